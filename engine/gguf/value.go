package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ValueType is the type tag of a GGUF metadata value.
type ValueType uint32

// The GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64",
}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// Valid reports whether t is one of the thirteen GGUF value types.
func (t ValueType) Valid() bool { return t <= TypeFloat64 }

// size is the encoded byte size of a fixed-size scalar type, 0 for string
// and array.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

func (t ValueType) isInteger() bool {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		return true
	}
	return false
}

func (t ValueType) isSigned() bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

func (t ValueType) isFloat() bool { return t == TypeFloat32 || t == TypeFloat64 }

// Value is one typed GGUF metadata value: a scalar, a string, or an array
// (of scalars, strings or arrays). Values are immutable and own their memory
// (nothing points into a file mapping), so a Value read from a File stays
// valid after Close and may be handed to a Writer as is.
type Value struct {
	typ ValueType
	num uint64 // scalar bits: integers (signed ones sign-extended), bool 0/1, float bits
	str string
	arr *array
}

type array struct {
	elem ValueType
	n    int
	raw  []byte   // fixed-size elements, little-endian, len = n*elem.size()
	strs []string // elem == TypeString
	vals []Value  // elem == TypeArray: each a Value of type TypeArray
}

// Type is the value's type tag.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the element type of an array value (TypeArray for nested
// arrays); for non-arrays it is the value's own type.
func (v Value) ElemType() ValueType {
	if v.typ == TypeArray && v.arr != nil {
		return v.arr.elem
	}
	return v.typ
}

// Len is the number of elements of an array value, the byte length of a
// string value, and 1 for scalars.
func (v Value) Len() int {
	switch v.typ {
	case TypeArray:
		if v.arr == nil {
			return 0
		}
		return v.arr.n
	case TypeString:
		return len(v.str)
	}
	return 1
}

// Scalar constructors.

func Uint8Value(x uint8) Value     { return Value{typ: TypeUint8, num: uint64(x)} }
func Int8Value(x int8) Value       { return Value{typ: TypeInt8, num: uint64(int64(x))} }
func Uint16Value(x uint16) Value   { return Value{typ: TypeUint16, num: uint64(x)} }
func Int16Value(x int16) Value     { return Value{typ: TypeInt16, num: uint64(int64(x))} }
func Uint32Value(x uint32) Value   { return Value{typ: TypeUint32, num: uint64(x)} }
func Int32Value(x int32) Value     { return Value{typ: TypeInt32, num: uint64(int64(x))} }
func Uint64Value(x uint64) Value   { return Value{typ: TypeUint64, num: x} }
func Int64Value(x int64) Value     { return Value{typ: TypeInt64, num: uint64(x)} }
func Float32Value(x float32) Value { return Value{typ: TypeFloat32, num: uint64(math.Float32bits(x))} }
func Float64Value(x float64) Value { return Value{typ: TypeFloat64, num: math.Float64bits(x)} }
func StringValue(s string) Value   { return Value{typ: TypeString, str: s} }

func BoolValue(b bool) Value {
	v := Value{typ: TypeBool}
	if b {
		v.num = 1
	}
	return v
}

// Array constructors. The slices are copied.

func StringsValue(s []string) Value {
	return Value{typ: TypeArray, arr: &array{elem: TypeString, n: len(s), strs: append([]string(nil), s...)}}
}

func Uint8sValue(s []uint8) Value {
	return Value{typ: TypeArray, arr: &array{elem: TypeUint8, n: len(s), raw: append([]byte(nil), s...)}}
}

func Int8sValue(s []int8) Value {
	raw := make([]byte, len(s))
	for i, x := range s {
		raw[i] = byte(x)
	}
	return Value{typ: TypeArray, arr: &array{elem: TypeInt8, n: len(s), raw: raw}}
}

func BoolsValue(s []bool) Value {
	raw := make([]byte, len(s))
	for i, x := range s {
		if x {
			raw[i] = 1
		}
	}
	return Value{typ: TypeArray, arr: &array{elem: TypeBool, n: len(s), raw: raw}}
}

func Uint16sValue(s []uint16) Value {
	return fixedArray(TypeUint16, len(s), func(i int) uint64 { return uint64(s[i]) })
}
func Int16sValue(s []int16) Value {
	return fixedArray(TypeInt16, len(s), func(i int) uint64 { return uint64(s[i]) })
}
func Uint32sValue(s []uint32) Value {
	return fixedArray(TypeUint32, len(s), func(i int) uint64 { return uint64(s[i]) })
}
func Int32sValue(s []int32) Value {
	return fixedArray(TypeInt32, len(s), func(i int) uint64 { return uint64(s[i]) })
}
func Uint64sValue(s []uint64) Value {
	return fixedArray(TypeUint64, len(s), func(i int) uint64 { return s[i] })
}
func Int64sValue(s []int64) Value {
	return fixedArray(TypeInt64, len(s), func(i int) uint64 { return uint64(s[i]) })
}
func Float32sValue(s []float32) Value {
	return fixedArray(TypeFloat32, len(s), func(i int) uint64 { return uint64(math.Float32bits(s[i])) })
}
func Float64sValue(s []float64) Value {
	return fixedArray(TypeFloat64, len(s), func(i int) uint64 { return math.Float64bits(s[i]) })
}

func fixedArray(elem ValueType, n int, get func(i int) uint64) Value {
	sz := elem.size()
	raw := make([]byte, n*sz)
	for i := 0; i < n; i++ {
		putLE(raw[i*sz:], sz, get(i))
	}
	return Value{typ: TypeArray, arr: &array{elem: elem, n: n, raw: raw}}
}

// ArrayValue builds an array from elements that must all have type elem.
// Elements that are arrays make a nested array.
func ArrayValue(elem ValueType, elems []Value) (Value, error) {
	if !elem.Valid() {
		return Value{}, fmt.Errorf("gguf: array of unknown value type %d", uint32(elem))
	}
	a := &array{elem: elem, n: len(elems)}
	for i, e := range elems {
		if e.typ != elem {
			return Value{}, fmt.Errorf("gguf: array of %s: element %d is %s", elem, i, e.typ)
		}
	}
	switch elem {
	case TypeString:
		a.strs = make([]string, len(elems))
		for i, e := range elems {
			a.strs[i] = e.str
		}
	case TypeArray:
		a.vals = append([]Value(nil), elems...)
	default:
		sz := elem.size()
		a.raw = make([]byte, len(elems)*sz)
		for i, e := range elems {
			putLE(a.raw[i*sz:], sz, e.num)
		}
	}
	return Value{typ: TypeArray, arr: a}, nil
}

func putLE(b []byte, size int, x uint64) {
	switch size {
	case 1:
		b[0] = byte(x)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(x))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(x))
	case 8:
		binary.LittleEndian.PutUint64(b, x)
	}
}

// scalarBits decodes the little-endian bytes of one fixed-size element of
// type t into the Value.num representation (signed types sign-extended).
func scalarBits(t ValueType, b []byte) uint64 {
	switch t {
	case TypeUint8, TypeBool:
		return uint64(b[0])
	case TypeInt8:
		return uint64(int64(int8(b[0])))
	case TypeUint16:
		return uint64(binary.LittleEndian.Uint16(b))
	case TypeInt16:
		return uint64(int64(int16(binary.LittleEndian.Uint16(b))))
	case TypeUint32, TypeFloat32:
		return uint64(binary.LittleEndian.Uint32(b))
	case TypeInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	}
	return binary.LittleEndian.Uint64(b)
}

// Index returns element i of an array value (the zero Value if v is not an
// array or i is out of range).
func (v Value) Index(i int) Value {
	if v.typ != TypeArray || v.arr == nil || i < 0 || i >= v.arr.n {
		return Value{}
	}
	a := v.arr
	switch a.elem {
	case TypeString:
		return StringValue(a.strs[i])
	case TypeArray:
		return a.vals[i]
	}
	sz := a.elem.size()
	return Value{typ: a.elem, num: scalarBits(a.elem, a.raw[i*sz:])}
}

func (v Value) mismatch(want string) error {
	got := v.typ.String()
	if v.typ == TypeArray {
		got = v.ElemType().String() + " array"
	}
	return fmt.Errorf("value is %s, want %s", got, want)
}

// AsString returns a string value.
func (v Value) AsString() (string, error) {
	if v.typ != TypeString {
		return "", v.mismatch("string")
	}
	return v.str, nil
}

// AsBool returns a bool value.
func (v Value) AsBool() (bool, error) {
	if v.typ != TypeBool {
		return false, v.mismatch("bool")
	}
	return v.num != 0, nil
}

// AsInt returns any integer value as int64.
func (v Value) AsInt() (int64, error) {
	if !v.typ.isInteger() {
		return 0, v.mismatch("integer")
	}
	if v.typ == TypeUint64 && v.num > math.MaxInt64 {
		return 0, fmt.Errorf("uint64 value %d overflows int64", v.num)
	}
	return int64(v.num), nil
}

// AsUint returns any non-negative integer value as uint64.
func (v Value) AsUint() (uint64, error) {
	if !v.typ.isInteger() {
		return 0, v.mismatch("unsigned integer")
	}
	if v.typ.isSigned() && int64(v.num) < 0 {
		return 0, fmt.Errorf("%s value %d is negative", v.typ, int64(v.num))
	}
	return v.num, nil
}

// AsFloat returns a float32/float64 value (or an integer converted).
func (v Value) AsFloat() (float64, error) {
	switch {
	case v.typ == TypeFloat32:
		return float64(math.Float32frombits(uint32(v.num))), nil
	case v.typ == TypeFloat64:
		return math.Float64frombits(v.num), nil
	case v.typ.isSigned():
		return float64(int64(v.num)), nil
	case v.typ.isInteger():
		return float64(v.num), nil
	}
	return 0, v.mismatch("float")
}

// AsStrings returns the elements of a string array (a copy).
func (v Value) AsStrings() ([]string, error) {
	if v.typ != TypeArray || v.arr == nil || v.arr.elem != TypeString {
		return nil, v.mismatch("string array")
	}
	return append([]string(nil), v.arr.strs...), nil
}

// AsInt32s returns the elements of any integer array, each range-checked
// to int32.
func (v Value) AsInt32s() ([]int32, error) {
	if v.typ != TypeArray || v.arr == nil || !v.arr.elem.isInteger() {
		return nil, v.mismatch("integer array")
	}
	a := v.arr
	out := make([]int32, a.n)
	sz := a.elem.size()
	signed := a.elem.isSigned()
	for i := range out {
		x := scalarBits(a.elem, a.raw[i*sz:])
		if signed {
			s := int64(x)
			if s < math.MinInt32 || s > math.MaxInt32 {
				return nil, fmt.Errorf("element %d (%d) of %s array is out of int32 range", i, s, a.elem)
			}
			out[i] = int32(s)
		} else {
			if x > math.MaxInt32 {
				return nil, fmt.Errorf("element %d (%d) of %s array is out of int32 range", i, x, a.elem)
			}
			out[i] = int32(x)
		}
	}
	return out, nil
}

// AsFloat32s returns the elements of a float or integer array as float32.
func (v Value) AsFloat32s() ([]float32, error) {
	if v.typ != TypeArray || v.arr == nil || !(v.arr.elem.isFloat() || v.arr.elem.isInteger()) {
		return nil, v.mismatch("float array")
	}
	out := make([]float32, v.arr.n)
	for i := range out {
		f, err := v.Index(i).AsFloat()
		if err != nil {
			return nil, err
		}
		out[i] = float32(f)
	}
	return out, nil
}

// Equal reports whether v and o have the same type and contents (floats
// compared bitwise).
func (v Value) Equal(o Value) bool {
	if v.typ != o.typ {
		return false
	}
	switch v.typ {
	case TypeString:
		return v.str == o.str
	case TypeArray:
		if v.Len() != o.Len() || v.ElemType() != o.ElemType() {
			return false
		}
		if v.arr == nil || o.arr == nil {
			return v.Len() == 0
		}
		switch v.arr.elem {
		case TypeString:
			for i := range v.arr.strs {
				if v.arr.strs[i] != o.arr.strs[i] {
					return false
				}
			}
			return true
		case TypeArray:
			for i := range v.arr.vals {
				if !v.arr.vals[i].Equal(o.arr.vals[i]) {
					return false
				}
			}
			return true
		}
		return string(v.arr.raw) == string(o.arr.raw)
	}
	return v.num == o.num
}

// maxShown is how many array elements String prints before abbreviating.
const maxShown = 8

// String formats the value for display; long arrays are abbreviated.
func (v Value) String() string {
	switch v.typ {
	case TypeString:
		return strconv.Quote(v.str)
	case TypeBool:
		return strconv.FormatBool(v.num != 0)
	case TypeFloat32:
		return strconv.FormatFloat(float64(math.Float32frombits(uint32(v.num))), 'g', -1, 32)
	case TypeFloat64:
		return strconv.FormatFloat(math.Float64frombits(v.num), 'g', -1, 64)
	case TypeArray:
		var b strings.Builder
		b.WriteByte('[')
		n := v.Len()
		for i := 0; i < n && i < maxShown; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(v.Index(i).String())
		}
		if n > maxShown {
			fmt.Fprintf(&b, ", ... (%d %s)", n, v.ElemType())
		}
		b.WriteByte(']')
		return b.String()
	}
	if v.typ.isSigned() {
		return strconv.FormatInt(int64(v.num), 10)
	}
	if v.typ.isInteger() {
		return strconv.FormatUint(v.num, 10)
	}
	return fmt.Sprintf("<%s>", v.typ)
}

// GoValue returns the value as a plain Go value (uint8 ... float64, bool,
// string, or a slice of those for arrays; []any for nested arrays).
func (v Value) GoValue() any {
	switch v.typ {
	case TypeUint8:
		return uint8(v.num)
	case TypeInt8:
		return int8(v.num)
	case TypeUint16:
		return uint16(v.num)
	case TypeInt16:
		return int16(v.num)
	case TypeUint32:
		return uint32(v.num)
	case TypeInt32:
		return int32(v.num)
	case TypeUint64:
		return v.num
	case TypeInt64:
		return int64(v.num)
	case TypeFloat32:
		return math.Float32frombits(uint32(v.num))
	case TypeFloat64:
		return math.Float64frombits(v.num)
	case TypeBool:
		return v.num != 0
	case TypeString:
		return v.str
	case TypeArray:
		n := v.Len()
		out := make([]any, n)
		for i := range out {
			out[i] = v.Index(i).GoValue()
		}
		return out
	}
	return nil
}

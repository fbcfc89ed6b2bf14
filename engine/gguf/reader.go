// Package gguf reads and writes GGUF model files (versions 2 and 3, little
// endian). Open maps a file (or every part of a split model) read-only and
// hands out zero-copy views of tensor data; Parse validates an in-memory
// image the same way. Writer produces GGUF v3, streaming tensor data.
//
// Every count and size in a file is checked against the bytes that remain
// before anything is allocated, so a damaged or hostile file yields an error
// naming the file, the byte offset and what was wrong, never a panic or a
// huge allocation.
package gguf

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"unicode/utf8"
	"unsafe"

	"github.com/minfer-go/minfer/engine/quant"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that overrides DefaultAlignment.
const KeyAlignment = "general.alignment"

const (
	maxDims       = 4 // GGML_MAX_DIMS
	maxArrayDepth = 4 // arrays nested deeper than this are refused

	minKVBytes     = 8 + 4 + 1         // key length, value type, smallest value
	minTensorBytes = 8 + 4 + 8 + 4 + 8 // name length, n_dims, one dim, type, offset
	headerBytes    = 4 + 4 + 8 + 8     // magic, version, tensor count, KV count
)

// ErrNotFound is wrapped by the error for an absent metadata key.
var ErrNotFound = errors.New("gguf: key not found")

// ErrTensorNotFound is wrapped by the error for an absent tensor.
var ErrTensorNotFound = errors.New("gguf: tensor not found")

// FormatError is a malformed-file error: the file, the byte offset of the
// offending item and what was wrong with it.
type FormatError struct {
	File   string
	Offset uint64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("gguf: %s: offset %#x: %s", e.File, e.Offset, e.Msg)
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name      string
	Dims      []uint64 // as stored: Dims[0] is the innermost (row length, ggml ne0)
	Type      quant.Type
	Offset    uint64 // relative to the start of its part's data section
	Size      uint64 // bytes
	NElements uint64

	part int // index into File.parts
}

// Rows is the number of rows (product of Dims[1:]).
func (t *TensorInfo) Rows() uint64 {
	if len(t.Dims) == 0 || t.Dims[0] == 0 {
		return 0
	}
	return t.NElements / t.Dims[0]
}

func (t *TensorInfo) String() string {
	return fmt.Sprintf("%s %s %v", t.Name, t.Type, t.Dims)
}

type part struct {
	path      string
	data      []byte
	dataStart uint64 // absolute offset of the data section
	unmap     func() error
}

// File is a parsed GGUF model: one file, or every part of a split model.
type File struct {
	Path      string
	Version   uint32
	Alignment uint64
	KVs       []KV         // in file order (of the first split part)
	Tensors   []TensorInfo // in file order, all split parts concatenated

	parts       []*part
	kvIndex     map[string]int
	tensorIndex map[string]int
}

// Parse validates and indexes an in-memory GGUF image. name is used in
// error messages. Tensor data views returned by Data alias data.
func Parse(name string, data []byte) (*File, error) {
	return parse(name, data)
}

// Open maps the GGUF file at path read-only. A split model
// ("PREFIX-00001-of-0000N.gguf", with split.count > 1) is opened as one
// model from any of its parts: every part is mapped and validated, and
// Tensors holds the tensors of all parts in part order.
func Open(path string) (*File, error) {
	f, err := openPart(path)
	if err != nil {
		return nil, err
	}
	return openSplit(path, f)
}

func openPart(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	data, unmap, err := mapFile(fd, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: map: %w", path, err)
	}
	f, err := parse(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	f.parts[0].unmap = unmap
	return f, nil
}

// Close unmaps every part. Slices returned by Data are invalid afterwards.
func (f *File) Close() error {
	var first error
	for _, p := range f.parts {
		if p.unmap != nil {
			if err := p.unmap(); err != nil && first == nil {
				first = fmt.Errorf("gguf: %s: unmap: %w", p.path, err)
			}
			p.unmap = nil
		}
		p.data = nil
	}
	return first
}

// Size is the total byte size of all parts.
func (f *File) Size() int64 {
	var n int64
	for _, p := range f.parts {
		n += int64(len(p.data))
	}
	return n
}

// Parts lists the paths of the files the model was read from, in part order.
func (f *File) Parts() []string {
	out := make([]string, len(f.parts))
	for i, p := range f.parts {
		out[i] = p.path
	}
	return out
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensorIndex[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Data is a zero-copy view of the tensor's bytes inside the mapping (nil
// after Close or for a TensorInfo not of this file).
func (f *File) Data(t *TensorInfo) []byte {
	if t == nil || t.part < 0 || t.part >= len(f.parts) {
		return nil
	}
	p := f.parts[t.part]
	start := p.dataStart + t.Offset
	end := start + t.Size
	if start < p.dataStart || end < start || end > uint64(len(p.data)) {
		return nil
	}
	return p.data[start:end:end]
}

// FileOffset is the absolute byte offset of the tensor's data inside its
// part file, and that file's path.
func (f *File) FileOffset(t *TensorInfo) (path string, off uint64) {
	if t == nil || t.part < 0 || t.part >= len(f.parts) {
		return "", 0
	}
	p := f.parts[t.part]
	return p.path, p.dataStart + t.Offset
}

// TensorData returns the zero-copy bytes of the named tensor.
func (f *File) TensorData(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", f.Path, name, ErrTensorNotFound)
	}
	d := f.Data(t)
	if d == nil && t.Size > 0 {
		return nil, fmt.Errorf("gguf: %s: tensor %q: file is closed", f.Path, name)
	}
	return d, nil
}

// Value looks a metadata key up.
func (f *File) Value(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

func (f *File) lookup(key string) (Value, error) {
	v, ok := f.Value(key)
	if !ok {
		return Value{}, fmt.Errorf("gguf: %s: key %q: %w", f.Path, key, ErrNotFound)
	}
	return v, nil
}

func (f *File) keyErr(key string, err error) error {
	return fmt.Errorf("gguf: %s: key %q: %w", f.Path, key, err)
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return "", err
	}
	s, err := v.AsString()
	if err != nil {
		return "", f.keyErr(key, err)
	}
	return s, nil
}

// Uint returns any integer value that is >= 0.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	x, err := v.AsUint()
	if err != nil {
		return 0, f.keyErr(key, err)
	}
	return x, nil
}

// Int returns any integer value.
func (f *File) Int(key string) (int64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	x, err := v.AsInt()
	if err != nil {
		return 0, f.keyErr(key, err)
	}
	return x, nil
}

// Float returns a float32/float64 value (integers are converted).
func (f *File) Float(key string) (float64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	x, err := v.AsFloat()
	if err != nil {
		return 0, f.keyErr(key, err)
	}
	return x, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.lookup(key)
	if err != nil {
		return false, err
	}
	x, err := v.AsBool()
	if err != nil {
		return false, f.keyErr(key, err)
	}
	return x, nil
}

// Strings returns a string array.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	x, err := v.AsStrings()
	if err != nil {
		return nil, f.keyErr(key, err)
	}
	return x, nil
}

// Int32s returns any integer array, each element range-checked to int32.
func (f *File) Int32s(key string) ([]int32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	x, err := v.AsInt32s()
	if err != nil {
		return nil, f.keyErr(key, err)
	}
	return x, nil
}

// Float32s returns a float (or integer) array as float32.
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.lookup(key)
	if err != nil {
		return nil, err
	}
	x, err := v.AsFloat32s()
	if err != nil {
		return nil, f.keyErr(key, err)
	}
	return x, nil
}

// ---- parsing ----

type cursor struct {
	name string
	data []byte
	pos  uint64
}

func (c *cursor) left() uint64 { return uint64(len(c.data)) - c.pos }

func (c *cursor) errAt(off uint64, format string, args ...any) error {
	return &FormatError{File: c.name, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// take consumes n bytes; what names the item for the truncation error.
func (c *cursor) take(n uint64, what string) ([]byte, error) {
	if n > c.left() {
		return nil, c.errAt(c.pos, "unexpected end of file reading %s (need %d bytes, %d left)", what, n, c.left())
	}
	b := c.data[c.pos : c.pos+n : c.pos+n]
	c.pos += n
	return b, nil
}

func (c *cursor) u32(what string) (uint32, error) {
	b, err := c.take(4, what)
	if err != nil {
		return 0, err
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24, nil
}

func (c *cursor) u64(what string) (uint64, error) {
	b, err := c.take(8, what)
	if err != nil {
		return 0, err
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56, nil
}

// str reads a gguf_string; the returned bytes alias the input.
func (c *cursor) str(what string) ([]byte, error) {
	if c.left() < 8 {
		_, err := c.take(8, what+" length") // the message is built only on failure
		return nil, err
	}
	n, _ := c.u64("")
	if n > c.left() {
		return nil, c.errAt(c.pos-8, "%s length %d runs past end of file (%d bytes left)", what, n, c.left())
	}
	return c.take(n, what)
}

// withPrefix prefixes a FormatError's message with context, keeping its offset.
func withPrefix(err error, prefix string) error {
	var fe *FormatError
	if errors.As(err, &fe) {
		return &FormatError{File: fe.File, Offset: fe.Offset, Msg: prefix + ": " + fe.Msg}
	}
	return err
}

func parse(name string, data []byte) (*File, error) {
	c := &cursor{name: name, data: data}
	if len(data) < 4 {
		return nil, c.errAt(0, "unexpected end of file reading header (file is %d bytes, a GGUF header is %d)", len(data), headerBytes)
	}
	switch string(data[:4]) {
	case Magic:
	case "FUGG":
		return nil, c.errAt(0, "big-endian GGUF (byte-swapped magic) is not supported")
	default:
		return nil, c.errAt(0, "bad magic %q (want %q): not a GGUF file", data[:4], Magic)
	}
	c.pos = 4
	version, err := c.u32("header version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, c.errAt(4, "GGUF version 1 is not supported (only versions 2 and 3)")
	case version&0xffff == 0 && bits.ReverseBytes32(version) <= 3:
		return nil, c.errAt(4, "big-endian GGUF (version %d byte-swapped) is not supported", bits.ReverseBytes32(version))
	default:
		return nil, c.errAt(4, "unsupported GGUF version %d (only versions 2 and 3)", version)
	}
	nTensors, err := c.u64("header tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := c.u64("header KV count")
	if err != nil {
		return nil, err
	}
	if nKV > c.left()/minKVBytes {
		return nil, c.errAt(16, "KV count %d is larger than the file could hold (%d bytes left, a KV needs at least %d)", nKV, c.left(), minKVBytes)
	}
	if nTensors > c.left()/minTensorBytes || nKV*minKVBytes+nTensors*minTensorBytes > c.left() {
		return nil, c.errAt(8, "tensor count %d is larger than the file could hold (%d bytes left, a tensor info needs at least %d)", nTensors, c.left(), minTensorBytes)
	}

	f := &File{
		Path:        name,
		Version:     version,
		Alignment:   DefaultAlignment,
		KVs:         make([]KV, 0, capHint(nKV)),
		kvIndex:     make(map[string]int, capHint(nKV)),
		Tensors:     make([]TensorInfo, 0, capHint(nTensors)),
		tensorIndex: make(map[string]int, capHint(nTensors)),
	}
	kvOffsets := make([]uint64, 0, capHint(nKV))
	for i := uint64(0); i < nKV; i++ {
		off := c.pos
		kb, err := c.str("key")
		if err != nil {
			return nil, withPrefix(err, fmt.Sprintf("KV #%d", i))
		}
		if !utf8.Valid(kb) {
			return nil, c.errAt(off, "KV #%d: key %q is not valid UTF-8", i, kb)
		}
		if len(kb) == 0 {
			return nil, c.errAt(off, "KV #%d: empty key", i)
		}
		key := string(kb)
		if j, dup := f.kvIndex[key]; dup {
			return nil, c.errAt(off, "KV #%d: duplicate key %q (first at KV #%d, offset %#x)", i, key, j, kvOffsets[j])
		}
		vt, err := c.u32("value type")
		if err != nil {
			return nil, withPrefix(err, fmt.Sprintf("KV %q", key))
		}
		v, err := c.value(ValueType(vt), 0)
		if err != nil {
			return nil, withPrefix(err, fmt.Sprintf("KV %q", key))
		}
		f.kvIndex[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
		kvOffsets = append(kvOffsets, off)
	}
	if j, ok := f.kvIndex[KeyAlignment]; ok {
		a, err := f.KVs[j].Value.AsUint()
		if err != nil {
			return nil, c.errAt(kvOffsets[j], "%s: %v", KeyAlignment, err)
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, c.errAt(kvOffsets[j], "%s %d is not a power of two", KeyAlignment, a)
		}
		f.Alignment = a
	}

	infoOffsets := make([]uint64, 0, capHint(nTensors))
	for i := uint64(0); i < nTensors; i++ {
		off := c.pos
		t, err := c.tensorInfo(f.Alignment)
		if err != nil {
			return nil, withPrefix(err, fmt.Sprintf("tensor info #%d", i))
		}
		if j, dup := f.tensorIndex[t.Name]; dup {
			return nil, c.errAt(off, "tensor #%d: duplicate tensor name %q (first at tensor #%d, offset %#x)", i, t.Name, j, infoOffsets[j])
		}
		f.tensorIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
		infoOffsets = append(infoOffsets, off)
	}

	// The data section starts at the next multiple of the alignment.
	end := c.pos
	dataStart := end + (f.Alignment-end%f.Alignment)%f.Alignment
	if dataStart < end {
		return nil, c.errAt(end, "data section offset overflows (alignment %d)", f.Alignment)
	}
	size := uint64(len(data))
	if nTensors > 0 && dataStart > size {
		return nil, c.errAt(end, "unexpected end of file: data section starts at %#x, past end of file (size %d)", dataStart, size)
	}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		start := dataStart + t.Offset
		stop := start + t.Size
		if start < dataStart || stop < start || stop > size {
			return nil, c.errAt(infoOffsets[i], "tensor %q: data [%#x,%#x) runs past end of file (size %d)", t.Name, dataStart+t.Offset, dataStart+t.Offset+t.Size, size)
		}
	}
	if err := checkOverlap(c, f.Tensors, infoOffsets, dataStart); err != nil {
		return nil, err
	}
	f.parts = []*part{{path: name, data: data, dataStart: dataStart}}
	return f, nil
}

// capHint bounds a preallocation taken from a (range-checked) file count;
// beyond it the slices and maps grow as entries are actually read.
func capHint(n uint64) int {
	const max = 4096
	if n > max {
		return max
	}
	return int(n)
}

func checkOverlap(c *cursor, ts []TensorInfo, infoOffsets []uint64, dataStart uint64) error {
	order := make([]int, 0, len(ts))
	for i := range ts {
		if ts[i].Size > 0 {
			order = append(order, i)
		}
	}
	sort.Slice(order, func(a, b int) bool { return ts[order[a]].Offset < ts[order[b]].Offset })
	for k := 1; k < len(order); k++ {
		p, q := &ts[order[k-1]], &ts[order[k]]
		if q.Offset < p.Offset+p.Size {
			return c.errAt(infoOffsets[order[k]], "tensor %q: data [%#x,%#x) overlaps tensor %q [%#x,%#x)",
				q.Name, dataStart+q.Offset, dataStart+q.Offset+q.Size, p.Name, dataStart+p.Offset, dataStart+p.Offset+p.Size)
		}
	}
	return nil
}

func (c *cursor) tensorInfo(alignment uint64) (TensorInfo, error) {
	off := c.pos
	nb, err := c.str("tensor name")
	if err != nil {
		return TensorInfo{}, err
	}
	if !utf8.Valid(nb) {
		return TensorInfo{}, c.errAt(off, "tensor name %q is not valid UTF-8", nb)
	}
	if len(nb) == 0 {
		return TensorInfo{}, c.errAt(off, "empty tensor name")
	}
	t := TensorInfo{Name: string(nb)}
	fail := func(format string, args ...any) (TensorInfo, error) {
		return TensorInfo{}, c.errAt(off, "tensor %q: "+format, append([]any{t.Name}, args...)...)
	}
	nd, err := c.u32("n_dims")
	if err != nil {
		return TensorInfo{}, withPrefix(err, fmt.Sprintf("tensor %q", t.Name))
	}
	if nd == 0 || nd > maxDims {
		return fail("n_dims %d out of range [1,%d]", nd, maxDims)
	}
	db, err := c.take(8*uint64(nd), "dims")
	if err != nil {
		return TensorInfo{}, withPrefix(err, fmt.Sprintf("tensor %q", t.Name))
	}
	t.Dims = make([]uint64, nd)
	ne := uint64(1)
	for i := range t.Dims {
		d := scalarBits(TypeUint64, db[8*i:])
		t.Dims[i] = d
		if d == 0 {
			return fail("dimension %d is zero (dims %v)", i, t.Dims[:i+1])
		}
		hi, lo := bits.Mul64(ne, d)
		if hi != 0 || lo > math.MaxInt64 {
			return fail("element count of dims %v overflows", t.Dims[:i+1])
		}
		ne = lo
	}
	t.NElements = ne
	typ, err := c.u32("tensor type")
	if err != nil {
		return TensorInfo{}, withPrefix(err, fmt.Sprintf("tensor %q", t.Name))
	}
	t.Type = quant.Type(typ)
	if !t.Type.Known() {
		return fail("unknown tensor type id %d", typ)
	}
	bs, bb := uint64(t.Type.BlockSize()), uint64(t.Type.BlockBytes())
	if t.Dims[0]%bs != 0 {
		return fail("row length %d (dims[0]) is not a multiple of the %s block size %d", t.Dims[0], t.Type, bs)
	}
	hi, lo := bits.Mul64(ne/bs, bb)
	if hi != 0 || lo > math.MaxInt64 {
		return fail("byte size of %v %s overflows", t.Dims, t.Type)
	}
	t.Size = lo
	t.Offset, err = c.u64("tensor offset")
	if err != nil {
		return TensorInfo{}, withPrefix(err, fmt.Sprintf("tensor %q", t.Name))
	}
	if t.Offset%alignment != 0 {
		return fail("data offset %d is not a multiple of the alignment %d", t.Offset, alignment)
	}
	return t, nil
}

// value reads a value of type vt; depth counts enclosing arrays.
func (c *cursor) value(vt ValueType, depth int) (Value, error) {
	off := c.pos
	switch {
	case vt == TypeString:
		b, err := c.str("string")
		if err != nil {
			return Value{}, err
		}
		return Value{typ: TypeString, str: string(b)}, nil
	case vt == TypeArray:
		return c.array(depth)
	case vt.Valid():
		b, err := c.take(uint64(vt.size()), vt.String())
		if err != nil {
			return Value{}, err
		}
		v := Value{typ: vt, num: scalarBits(vt, b)}
		if vt == TypeBool && v.num > 1 {
			return Value{}, c.errAt(off, "invalid bool value %d", v.num)
		}
		return v, nil
	}
	return Value{}, c.errAt(off-4, "unknown metadata value type %d", uint32(vt))
}

func (c *cursor) array(depth int) (Value, error) {
	off := c.pos
	et, err := c.u32("array element type")
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.Valid() {
		return Value{}, c.errAt(off, "unknown metadata value type %d (array element type)", et)
	}
	if elem == TypeArray && depth+1 >= maxArrayDepth {
		return Value{}, c.errAt(off, "arrays nested deeper than the limit of %d", maxArrayDepth)
	}
	n, err := c.u64("array length")
	if err != nil {
		return Value{}, err
	}
	var min uint64
	switch elem {
	case TypeString:
		min = 8
	case TypeArray:
		min = 4 + 8
	default:
		min = uint64(elem.size())
	}
	if n > c.left()/min {
		return Value{}, c.errAt(off+4, "array of %d %s needs at least %d bytes per element, only %d bytes left", n, elem, min, c.left())
	}
	a := &array{elem: elem, n: int(n)}
	switch elem {
	case TypeString:
		// Two passes: validate every length and total the bytes, then copy
		// all strings into one allocation (a vocabulary is ~150k strings).
		start := c.pos
		total := uint64(0)
		for i := uint64(0); i < n; i++ {
			b, err := c.str("string")
			if err != nil {
				return Value{}, withPrefix(err, fmt.Sprintf("array element %d", i))
			}
			total += uint64(len(b))
		}
		c.pos = start
		buf := make([]byte, 0, total) // total <= file size
		a.strs = make([]string, n)
		for i := range a.strs {
			b, _ := c.str("string")
			if len(b) == 0 {
				continue
			}
			off := len(buf)
			buf = append(buf, b...)
			a.strs[i] = unsafe.String(&buf[off], len(b)) // buf is never written again
		}
	case TypeArray:
		a.vals = make([]Value, n)
		for i := range a.vals {
			v, err := c.array(depth + 1)
			if err != nil {
				return Value{}, withPrefix(err, fmt.Sprintf("array element %d", i))
			}
			a.vals[i] = v
		}
	default:
		sz := uint64(elem.size())
		start := c.pos
		b, err := c.take(n*sz, "array data")
		if err != nil {
			return Value{}, err
		}
		if elem == TypeBool {
			for i, x := range b {
				if x > 1 {
					return Value{}, c.errAt(start+uint64(i), "array element %d: invalid bool value %d", i, x)
				}
			}
		}
		a.raw = append([]byte(nil), b...)
	}
	return Value{typ: TypeArray, arr: a}, nil
}

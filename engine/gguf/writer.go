package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/minfer-go/minfer/engine/quant"
)

// Writer builds a GGUF v3 file: metadata first, then tensors whose data is
// either held (AddTensor) or produced while the file is written
// (AddTensorFunc), so a model never has to be in memory as a whole.
type Writer struct {
	alignment   uint64
	kvs         []KV
	kvIndex     map[string]int
	tensors     []wtensor
	tensorIndex map[string]bool
	err         error // first error of an Add* call without an error result
}

type wtensor struct {
	name  string
	typ   quant.Type
	dims  []uint64
	size  uint64
	data  []byte
	write func(io.Writer) error
}

// NewWriter returns an empty writer with the default alignment (32).
func NewWriter() *Writer {
	return &Writer{
		alignment:   DefaultAlignment,
		kvIndex:     make(map[string]int),
		tensorIndex: make(map[string]bool),
	}
}

// Alignment is the data alignment the writer will use.
func (w *Writer) Alignment() uint64 { return w.alignment }

// SetAlignment sets the data alignment (a power of two) and records it as
// general.alignment (uint32), replacing an earlier value of that key.
func (w *Writer) SetAlignment(n uint32) error {
	if n == 0 || n&(n-1) != 0 {
		return fmt.Errorf("gguf: writer: alignment %d is not a power of two", n)
	}
	w.alignment = uint64(n)
	if i, ok := w.kvIndex[KeyAlignment]; ok {
		w.kvs[i].Value = Uint32Value(n)
		return nil
	}
	w.kvIndex[KeyAlignment] = len(w.kvs)
	w.kvs = append(w.kvs, KV{Key: KeyAlignment, Value: Uint32Value(n)})
	return nil
}

// Add appends a metadata entry. A duplicate or invalid key, or a malformed
// value, is an error. Adding general.alignment sets the writer's alignment.
func (w *Writer) Add(key string, v Value) error {
	if key == "" {
		return errors.New("gguf: writer: empty key")
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("gguf: writer: key %q is not valid UTF-8", key)
	}
	if _, dup := w.kvIndex[key]; dup {
		return fmt.Errorf("gguf: writer: duplicate key %q", key)
	}
	if err := checkValue(v, 0); err != nil {
		return fmt.Errorf("gguf: writer: key %q: %w", key, err)
	}
	if key == KeyAlignment {
		a, err := v.AsUint()
		if err != nil {
			return fmt.Errorf("gguf: writer: key %q: %w", key, err)
		}
		if a == 0 || a&(a-1) != 0 || a > math.MaxUint32 {
			return fmt.Errorf("gguf: writer: %s %d is not a power of two that fits in uint32", key, a)
		}
		w.alignment = a
	}
	w.kvIndex[key] = len(w.kvs)
	w.kvs = append(w.kvs, KV{Key: key, Value: v})
	return nil
}

func checkValue(v Value, depth int) error {
	if !v.typ.Valid() {
		return fmt.Errorf("unknown value type %d", uint32(v.typ))
	}
	if v.typ != TypeArray {
		return nil
	}
	if v.arr == nil {
		return errors.New("array value without an element type (use the array constructors)")
	}
	if v.arr.elem == TypeArray {
		if depth+1 >= maxArrayDepth {
			return fmt.Errorf("arrays nested deeper than the limit of %d", maxArrayDepth)
		}
		for _, e := range v.arr.vals {
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *Writer) record(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// Typed shorthands for Add. Their errors (duplicate keys) are reported by
// WriteTo / WriteFile and by Err.

func (w *Writer) AddString(key, v string)          { w.record(w.Add(key, StringValue(v))) }
func (w *Writer) AddUint32(key string, v uint32)   { w.record(w.Add(key, Uint32Value(v))) }
func (w *Writer) AddInt32(key string, v int32)     { w.record(w.Add(key, Int32Value(v))) }
func (w *Writer) AddUint64(key string, v uint64)   { w.record(w.Add(key, Uint64Value(v))) }
func (w *Writer) AddInt64(key string, v int64)     { w.record(w.Add(key, Int64Value(v))) }
func (w *Writer) AddFloat32(key string, v float32) { w.record(w.Add(key, Float32Value(v))) }
func (w *Writer) AddFloat64(key string, v float64) { w.record(w.Add(key, Float64Value(v))) }
func (w *Writer) AddBool(key string, v bool)       { w.record(w.Add(key, BoolValue(v))) }
func (w *Writer) AddStrings(key string, v []string) {
	w.record(w.Add(key, StringsValue(v)))
}
func (w *Writer) AddInt32s(key string, v []int32) { w.record(w.Add(key, Int32sValue(v))) }
func (w *Writer) AddFloat32s(key string, v []float32) {
	w.record(w.Add(key, Float32sValue(v)))
}

// Err is the first error of an Add* shorthand, if any.
func (w *Writer) Err() error { return w.err }

// tensorSize validates a tensor shape and returns its byte size.
func tensorSize(name string, typ quant.Type, dims []uint64) (uint64, error) {
	if name == "" {
		return 0, errors.New("gguf: writer: empty tensor name")
	}
	if !utf8.ValidString(name) {
		return 0, fmt.Errorf("gguf: writer: tensor name %q is not valid UTF-8", name)
	}
	if !typ.Known() {
		return 0, fmt.Errorf("gguf: writer: tensor %q: unknown tensor type id %d", name, uint32(typ))
	}
	if len(dims) == 0 || len(dims) > maxDims {
		return 0, fmt.Errorf("gguf: writer: tensor %q: n_dims %d out of range [1,%d]", name, len(dims), maxDims)
	}
	ne := uint64(1)
	for i, d := range dims {
		if d == 0 {
			return 0, fmt.Errorf("gguf: writer: tensor %q: dimension %d is zero", name, i)
		}
		hi, lo := bits.Mul64(ne, d)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("gguf: writer: tensor %q: element count of dims %v overflows", name, dims)
		}
		ne = lo
	}
	bs := uint64(typ.BlockSize())
	if dims[0]%bs != 0 {
		return 0, fmt.Errorf("gguf: writer: tensor %q: row length %d (dims[0]) is not a multiple of the %s block size %d", name, dims[0], typ, bs)
	}
	return ne / bs * uint64(typ.BlockBytes()), nil
}

func (w *Writer) addTensor(t wtensor) error {
	if w.tensorIndex[t.name] {
		return fmt.Errorf("gguf: writer: duplicate tensor name %q", t.name)
	}
	w.tensorIndex[t.name] = true
	w.tensors = append(w.tensors, t)
	return nil
}

// AddTensor appends a tensor whose bytes are data (held, not copied, until
// the file is written). len(data) must be the byte size of dims in typ.
func (w *Writer) AddTensor(name string, typ quant.Type, dims []uint64, data []byte) error {
	size, err := tensorSize(name, typ, dims)
	if err != nil {
		return err
	}
	if uint64(len(data)) != size {
		return fmt.Errorf("gguf: writer: tensor %q: %d bytes of data, %v %s needs %d", name, len(data), dims, typ, size)
	}
	return w.addTensor(wtensor{name: name, typ: typ, dims: append([]uint64(nil), dims...), size: size, data: data})
}

// AddTensorFunc appends a tensor whose bytes are produced by write when the
// file is written; write must produce exactly the byte size of dims in typ.
func (w *Writer) AddTensorFunc(name string, typ quant.Type, dims []uint64, write func(io.Writer) error) error {
	size, err := tensorSize(name, typ, dims)
	if err != nil {
		return err
	}
	if write == nil {
		return fmt.Errorf("gguf: writer: tensor %q: nil write function", name)
	}
	return w.addTensor(wtensor{name: name, typ: typ, dims: append([]uint64(nil), dims...), size: size, write: write})
}

// WriteFile writes the file to a temporary file in path's directory and
// renames it into place, so a failed write leaves nothing half-written.
func (w *Writer) WriteFile(path string) (err error) {
	if w.err != nil {
		return w.err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf: writer: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = w.WriteTo(tmp); err != nil {
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: writer: %w", err)
	}
	return nil
}

// enc is a little-endian encoder with a sticky error and a byte count.
type enc struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (e *enc) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.n += int64(n)
	e.err = err
	return n, err
}

func (e *enc) u32(x uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], x)
	e.Write(e.buf[:4])
}

func (e *enc) u64(x uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], x)
	e.Write(e.buf[:8])
}

func (e *enc) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
		e.n += int64(len(s))
	}
}

func (e *enc) pad(align uint64) {
	var zeros [64]byte
	for k := (align - uint64(e.n)%align) % align; k > 0 && e.err == nil; {
		c := min(k, uint64(len(zeros)))
		e.Write(zeros[:c])
		k -= c
	}
}

// value writes v's payload (without its own type tag).
func (e *enc) value(v Value) {
	switch v.typ {
	case TypeString:
		e.str(v.str)
	case TypeArray:
		a := v.arr
		e.u32(uint32(a.elem))
		e.u64(uint64(a.n))
		switch a.elem {
		case TypeString:
			for _, s := range a.strs {
				e.str(s)
			}
		case TypeArray:
			for _, x := range a.vals {
				e.value(x)
			}
		default:
			e.Write(a.raw)
		}
	default:
		putLE(e.buf[:], v.typ.size(), v.num)
		e.Write(e.buf[:v.typ.size()])
	}
}

// limitWriter passes at most left bytes through and counts what it got.
type limitWriter struct {
	w    io.Writer
	left uint64
	got  uint64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	l.got += uint64(len(p))
	if uint64(len(p)) > l.left {
		return 0, fmt.Errorf("produced more than the expected bytes")
	}
	l.left -= uint64(len(p))
	return l.w.Write(p)
}

// WriteTo writes the GGUF v3 file to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	e := &enc{w: bufio.NewWriterSize(out, 1<<20)}
	e.Write([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	var off uint64
	for _, t := range w.tensors {
		e.str(t.name)
		e.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(d)
		}
		e.u32(uint32(t.typ))
		e.u64(off)
		off += t.size
		off += (w.alignment - off%w.alignment) % w.alignment
	}
	e.pad(w.alignment)
	for _, t := range w.tensors {
		if e.err != nil {
			break
		}
		if t.write == nil {
			e.Write(t.data)
		} else {
			lw := &limitWriter{w: e, left: t.size}
			if err := t.write(lw); err != nil {
				return e.n, fmt.Errorf("gguf: writer: tensor %q: %w", t.name, err)
			}
			if e.err != nil {
				break
			}
			if lw.got != t.size {
				return e.n, fmt.Errorf("gguf: writer: tensor %q: write produced %d bytes, %v %s needs %d", t.name, lw.got, t.dims, t.typ, t.size)
			}
		}
		e.pad(w.alignment)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	if e.err != nil {
		return e.n, fmt.Errorf("gguf: writer: %w", e.err)
	}
	return e.n, nil
}

// Package kv holds the KV cache of one engine: its storage format (f32, f16
// or q8_0, chosen per engine, never process-wide), the row codecs and cell
// moves.
package kv

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/minfer-go/minfer/engine/quant"
)

// Format is the storage format of K and V rows.
type Format int

// The KV storage formats.
const (
	F32 Format = iota
	F16
	Q8_0
)

var formatNames = [...]string{F32: "f32", F16: "f16", Q8_0: "q8_0"}

// Formats lists every format, in order.
func Formats() []Format { return []Format{F32, F16, Q8_0} }

func (f Format) valid() bool { return f >= F32 && f <= Q8_0 }

func (f Format) String() string {
	if f.valid() {
		return formatNames[f]
	}
	return fmt.Sprintf("kv.Format(%d)", int(f))
}

// ParseFormat maps "f32", "f16" or "q8_0" to its Format.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats() {
		if s == formatNames[f] {
			return f, nil
		}
	}
	return 0, fmt.Errorf("kv: unknown cache format %q (want one of %s)", s, strings.Join(formatNames[:], ", "))
}

// blockLen is the number of values in one q8_0 block.
const blockLen = quant.QK

// RowBytes returns the bytes of a row of n values in format f. For q8_0, n
// must be a multiple of 32 (New checks that; a bad n here returns -1).
func RowBytes(f Format, n int) int {
	if n < 0 {
		return -1
	}
	switch f {
	case F32:
		return 4 * n
	case F16:
		return 2 * n
	case Q8_0:
		if n%blockLen != 0 {
			return -1
		}
		return n / blockLen * (2 + blockLen)
	}
	return -1
}

// StoreRow encodes src into dst in format f. dst must hold at least
// RowBytes(f, len(src)) bytes. q8_0 uses the weight Q8_0 quantizer of
// engine/quant, so a KV row is byte-identical to a Q8_0 weight row.
//
// A length mismatch is a programming error inside the engine (rows come from
// a Cache whose shape New checked) and panics like an out-of-range slice.
func StoreRow(f Format, dst []byte, src []float32) {
	nb := RowBytes(f, len(src))
	if nb < 0 || len(dst) < nb {
		panic(fmt.Sprintf("kv: StoreRow %s: %d values need %d bytes, dst has %d", f, len(src), nb, len(dst)))
	}
	switch f {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		storeRowF16(dst, src)
	case Q8_0:
		if err := quant.Quantize(quant.Q8_0, src, dst[:nb]); err != nil {
			panic(fmt.Sprintf("kv: StoreRow q8_0: %v", err))
		}
	}
}

// storeRowF16 and loadRowF16 are the f16 cells' own functions, so a CPU
// profile shows where the f16 cache's work is (abtest's gate 5 looks for
// them in arm B of MINFER_CACHE_TYPE=f16).
func storeRowF16(dst []byte, src []float32) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], quant.FP32ToFP16(v))
	}
}

func loadRowF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = quant.FP16ToFP32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// LoadRow decodes len(dst) values of format f from src.
func LoadRow(f Format, src []byte, dst []float32) {
	nb := RowBytes(f, len(dst))
	if nb < 0 || len(src) < nb {
		panic(fmt.Sprintf("kv: LoadRow %s: %d values need %d bytes, src has %d", f, len(dst), nb, len(src)))
	}
	switch f {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		loadRowF16(src, dst)
	case Q8_0:
		// Decoded here rather than through quant.Dequantize so that a KV
		// read never allocates or looks up a table; the layout is ggml's
		// block_q8_0: f16 scale d, then 32 int8 values; x = d * q.
		for b := 0; b < len(dst)/blockLen; b++ {
			blk := src[b*(2+blockLen):]
			d := quant.FP16ToFP32(binary.LittleEndian.Uint16(blk))
			out := dst[b*blockLen : (b+1)*blockLen]
			for j := range out {
				out[j] = d * float32(int8(blk[2+j]))
			}
		}
	}
}

// maxCacheBytes bounds one cache's allocation (K and V together).
const maxCacheBytes = 1 << 40

// Cache is the K and V storage of every layer: nCtx cells (rows) of rowLen
// values each, per layer, in one format.
type Cache struct {
	format   Format
	nLayer   int
	nCtx     int
	rowLen   int
	rowBytes int
	k, v     [][]byte // per layer, nCtx*rowBytes
}

// New allocates a cache. rowLen is n_head_kv*head_dim; q8_0 needs it to be a
// multiple of 32.
func New(f Format, nLayer, nCtx, rowLen int) (*Cache, error) {
	if !f.valid() {
		return nil, fmt.Errorf("kv: invalid format %s", f)
	}
	if nLayer <= 0 || nCtx <= 0 || rowLen <= 0 {
		return nil, fmt.Errorf("kv: cache of %d layers x %d cells x %d values: every dimension must be positive", nLayer, nCtx, rowLen)
	}
	if f == Q8_0 {
		if rowLen%blockLen != 0 {
			return nil, fmt.Errorf("kv: q8_0 cache needs a row length that is a multiple of %d, have %d (n_head_kv*head_dim)", blockLen, rowLen)
		}
		if _, err := quant.TraitsOf(quant.Q8_0); err != nil {
			return nil, fmt.Errorf("kv: q8_0 cache: %w", err)
		}
	}
	rb := RowBytes(f, rowLen)
	// Check nLayer*2*nCtx*rb <= maxCacheBytes without overflowing.
	if rb > maxCacheBytes || nCtx > maxCacheBytes/rb || nLayer > maxCacheBytes/(2*nCtx*rb) {
		return nil, fmt.Errorf("kv: %s cache of %d layers x %d cells x %d values exceeds %d bytes", f, nLayer, nCtx, rowLen, int64(maxCacheBytes))
	}
	c := &Cache{format: f, nLayer: nLayer, nCtx: nCtx, rowLen: rowLen, rowBytes: rb,
		k: make([][]byte, nLayer), v: make([][]byte, nLayer)}
	for l := 0; l < nLayer; l++ {
		c.k[l] = make([]byte, nCtx*rb)
		c.v[l] = make([]byte, nCtx*rb)
	}
	return c, nil
}

// K returns the key rows of layer (nCtx rows of RowBytes(Format(), RowLen())).
func (c *Cache) K(layer int) []byte { return c.k[layer] }

// V returns the value rows of layer.
func (c *Cache) V(layer int) []byte { return c.v[layer] }

// Format is the storage format.
func (c *Cache) Format() Format { return c.format }

// NCtx is the number of cells.
func (c *Cache) NCtx() int { return c.nCtx }

// NLayer is the number of layers.
func (c *Cache) NLayer() int { return c.nLayer }

// RowLen is the number of values of one row (n_head_kv*head_dim).
func (c *Cache) RowLen() int { return c.rowLen }

// RowBytes is the byte size of one row.
func (c *Cache) RowBytes() int { return c.rowBytes }

// MoveCells copies cells [src, src+n) to [dst, dst+n) in every layer, K and
// V. Overlapping ranges are handled in both directions (memmove semantics).
func (c *Cache) MoveCells(src, dst, n int) error {
	if n < 0 || src < 0 || dst < 0 || src > c.nCtx-n || dst > c.nCtx-n {
		return fmt.Errorf("kv: move %d cells from %d to %d: out of range of %d cells", n, src, dst, c.nCtx)
	}
	if n == 0 || src == dst {
		return nil
	}
	rb := c.rowBytes
	for l := 0; l < c.nLayer; l++ {
		for _, buf := range [2][]byte{c.k[l], c.v[l]} {
			copy(buf[dst*rb:(dst+n)*rb], buf[src*rb:(src+n)*rb]) // copy is memmove
		}
	}
	return nil
}

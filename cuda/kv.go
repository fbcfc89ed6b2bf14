package cuda

// kv.go: the KV cache kernels (cuda/kernels/kv.cu: store, load, cell
// move) in every KV format, and the store and load op handlers.
//
// Per-step data (the KV window {start, kv_len}, like token ids and
// positions elsewhere) is always passed as a device pointer and read
// inside the kernel, never as a scalar: a captured graph replays its
// launches with the same arguments, so only device memory can change
// between replays.

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
)

// kvRowBytes checks a KV format and row length and returns the row stride.
func kvRowBytes(op string, format kv.Format, rowLen, nCtx int) (int, error) {
	if format != kv.F32 && format != kv.F16 && format != kv.Q8_0 {
		return 0, opsBad(op, "KV format %s", format)
	}
	if rowLen <= 0 || rowLen > maxInt32 || nCtx <= 0 || nCtx > maxInt32 {
		return 0, opsBad(op, "KV rows of %d values in %d cells: both must be positive", rowLen, nCtx)
	}
	rb := kv.RowBytes(format, rowLen)
	if rb < 0 {
		return 0, opsBad(op, "%s KV rows of %d values: q8_0 needs a multiple of 32", format, rowLen)
	}
	return rb, nil
}

// KVStore writes src [rowLen, nt] (f32) into one layer's K or V region
// (nCtx cells) at cells win[0] .. win[0]+nt-1, encoded in format (q8_0 with
// the reference quantizer). win is the graph's KV window {start, kv_len}
// (i32[2] on the device) and is read by the kernel; rows whose cell falls
// outside the region are not written.
func (k *Kernels) KVStore(s *driver.Stream, region driver.DevicePtr, format kv.Format, src, win driver.DevicePtr, nt, rowLen, nCtx int) error {
	rb, err := kvRowBytes("kv_store", format, rowLen, nCtx)
	if err != nil {
		return err
	}
	if nt <= 0 || nt > nCtx {
		return opsBad("kv_store", "%d tokens for %d cells", nt, nCtx)
	}
	return opsErr("kv_store", k.launch(s, "minfer_kv_store", [3]uint32{uint32(nt), opsChunks(rowLen), 1}, opsBlock, 0,
		region, int32(format), src, win, int32(rowLen), int64(rb), int32(nCtx)))
}

// KVLoad expands cells [0, win[1]) of a region to f32 out [rowLen, nCtx]
// (graph.OpKvcacheLoad: rows beyond the KV length are left as they were).
// The length is read from the device window by the kernel.
func (k *Kernels) KVLoad(s *driver.Stream, out, region driver.DevicePtr, format kv.Format, win driver.DevicePtr, rowLen, nCtx int) error {
	rb, err := kvRowBytes("kv_load", format, rowLen, nCtx)
	if err != nil {
		return err
	}
	return opsErr("kv_load", k.launch(s, "minfer_kv_load", [3]uint32{uint32(nCtx), opsChunks(rowLen), 1}, opsBlock, 0,
		out, region, int32(format), win, int32(rowLen), int64(rb), int32(nCtx)))
}

// KVMoveScratchBytes is the scratch KVMove needs for n cells.
func KVMoveScratchBytes(format kv.Format, rowLen, n int) int {
	return kv.RowBytes(format, rowLen) * n
}

// KVMove moves cells [src, src+n) of one region (nCtx cells) to [dst,
// dst+n) with memmove semantics: the rows go to scratch (at least
// KVMoveScratchBytes) and back, two stream-ordered launches, so overlap in
// either direction is correct. n == 0 or src == dst launches nothing.
func (k *Kernels) KVMove(s *driver.Stream, region, scratch driver.DevicePtr, format kv.Format, rowLen, nCtx, src, dst, n int) error {
	rb, err := kvRowBytes("kv_move", format, rowLen, nCtx)
	if err != nil {
		return err
	}
	if n < 0 || src < 0 || dst < 0 || src > nCtx-n || dst > nCtx-n {
		return opsBad("kv_move", "move %d cells from %d to %d: out of range of %d cells", n, src, dst, nCtx)
	}
	if n == 0 || src == dst {
		return nil
	}
	if scratch == 0 {
		return opsBad("kv_move", "no scratch buffer")
	}
	nb := n * rb
	if err := k.CopyBytes(s, scratch, region.Add(uint64(src*rb)), nb); err != nil {
		return opsErr("kv_move", err)
	}
	return opsErr("kv_move", k.CopyBytes(s, region.Add(uint64(dst*rb)), scratch, nb))
}

// region returns a layer's K or V region.
func (b *Backend) region(layer int, side graph.KVSide) (driver.DevicePtr, error) {
	if b.kvK == nil || layer < 0 || layer >= b.kvSpec.NLayer {
		return 0, fmt.Errorf("no KV region for layer %d", layer)
	}
	if side == graph.SideV {
		return b.kvV[layer], nil
	}
	return b.kvK[layer], nil
}

// regions returns a layer's K and V regions.
func (b *Backend) regions(layer int) (k, v driver.DevicePtr, err error) {
	if k, err = b.region(layer, graph.SideK); err != nil {
		return 0, 0, err
	}
	v, err = b.region(layer, graph.SideV)
	return k, v, err
}

func (b *Backend) kvWindow(t graph.Tensor) (driver.DevicePtr, error) {
	if t.Len != 2 {
		return 0, fmt.Errorf("KV window of %d values, want 2", t.Len)
	}
	return b.pool.tensor(t)
}

func opKVStore(b *Backend, n *graph.Node, in []graph.Tensor, _ graph.Tensor) (func() error, error) {
	p, _, err := b.ptrs(in, 1, graph.Tensor{}, false)
	if err != nil {
		return nil, err
	}
	if len(in) < 2 {
		return nil, fmt.Errorf("%d inputs, want the rows and the KV window", len(in))
	}
	win, err := b.kvWindow(in[1])
	if err != nil {
		return nil, err
	}
	reg, err := b.region(n.P.Layer, n.P.Side)
	if err != nil {
		return nil, err
	}
	rl := b.kvSpec.RowLen
	if in[0].Len == 0 || in[0].Len%rl != 0 {
		return nil, fmt.Errorf("input of %d elements is not rows of %d", in[0].Len, rl)
	}
	nt, f, nCtx := in[0].Len/rl, b.kvSpec.Format, b.kvSpec.NCtx
	return func() error { return b.k.KVStore(b.s, reg, f, p[0], win, nt, rl, nCtx) }, nil
}

func opKVLoad(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	if err := checkOut(n, out); err != nil {
		return nil, err
	}
	if len(in) < 1 {
		return nil, errors.New("no KV window input")
	}
	win, err := b.kvWindow(in[0])
	if err != nil {
		return nil, err
	}
	_, o, err := b.ptrs(in, 0, out, true)
	if err != nil {
		return nil, err
	}
	reg, err := b.region(n.P.Layer, n.P.Side)
	if err != nil {
		return nil, err
	}
	rl, nCtx, f := b.kvSpec.RowLen, b.kvSpec.NCtx, b.kvSpec.Format
	if out.Len != rl*nCtx {
		return nil, fmt.Errorf("output of %d elements, want %d", out.Len, rl*nCtx)
	}
	return func() error { return b.k.KVLoad(b.s, o, reg, f, win, rl, nCtx) }, nil
}

package cuda

// embed.go: the embedding gather minfer_get_rows (cuda/kernels/embed.cu),
// which dequantizes the rows of any device weight type, and its op handler;
// minfer_get_rows_host gathers from a table in mapped host memory
// (MINFER_EMBED_HOST, registerHostMapped).

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// getRowsTypes are the weight types the gather decodes (dequant.cuh).
var getRowsTypes = map[quant.Type]bool{
	quant.F32: true, quant.F16: true, quant.BF16: true, quant.Q4_0: true, quant.Q4_1: true,
	quant.Q5_0: true, quant.Q5_1: true, quant.Q8_0: true, quant.Q4_K: true, quant.Q5_K: true, quant.Q6_K: true,
}

// GetRows gathers rows ids[0..nt) (i32 device array) of the weight w
// (wRows rows of k values of type wtype) into out [k, nt] as f32. An id
// outside [0, wRows) gives a NaN row (the kernel cannot return an error).
func (k *Kernels) GetRows(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, nt, rowLen int) error {
	return k.getRows(s, "minfer_get_rows", out, w, wtype, wRows, ids, nt, rowLen)
}

// GetRowsHost is GetRows of a table w in page-locked host memory mapped
// into the device (driver.HostMapped.Ptr): minfer_get_rows_host, the same
// code under its own name, so bitwise GetRows of a device copy.
func (k *Kernels) GetRowsHost(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, nt, rowLen int) error {
	return k.getRows(s, "minfer_get_rows_host", out, w, wtype, wRows, ids, nt, rowLen)
}

// GetRowsR is GetRows of a table kept only as its repacked copy
// (RepackHost's layout of the wRows x rowLen Q8_0 / Q6_K table, 16-byte
// aligned; MINFER_ONE_COPY): minfer_get_rows_r, bitwise GetRows of the GGUF
// bytes.
func (k *Kernels) GetRowsR(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, nt, rowLen int) error {
	if err := opsCheckRows("get_rows_r", nt, rowLen); err != nil {
		return err
	}
	if !MMVQRepackable(wtype) || MMVQRepackBytes(wtype, rowLen, wRows) == 0 {
		return opsBad("get_rows_r", "weight type %s, %d rows of %d: no repacked layout", wtype, wRows, rowLen)
	}
	if w == 0 || uint64(w)%mmvqrAlign != 0 || wRows > maxInt32 {
		return opsBad("get_rows_r", "table %v (%d-byte aligned) of %d rows", w, mmvqrAlign, wRows)
	}
	return opsErr("get_rows_r", k.launch(s, "minfer_get_rows_r", [3]uint32{uint32(nt), 1, 1}, opsRowBlock(rowLen), 0,
		out, w, int32(wtype), int32(wRows), ids, int32(rowLen)))
}

func (k *Kernels) getRows(s *driver.Stream, name string, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr,
	nt, rowLen int) error {
	if err := opsCheckRows("get_rows", nt, rowLen); err != nil {
		return err
	}
	if !getRowsTypes[wtype] {
		return opsBad("get_rows", "weight type %s has no device decoder", wtype)
	}
	if wRows <= 0 || wRows > maxInt32 {
		return opsBad("get_rows", "weight of %d rows", wRows)
	}
	rb, err := wtype.RowBytes(rowLen)
	if err != nil {
		return opsBad("get_rows", "%v", err)
	}
	return opsErr("get_rows", k.launch(s, name, [3]uint32{uint32(nt), 1, 1}, opsRowBlock(rowLen), 0,
		out, w, int32(wtype), int64(rb), int32(wRows), ids, int32(rowLen)))
}

func opGetRows(b *Backend, n *graph.Node, in []graph.Tensor, out graph.Tensor) (func() error, error) {
	p, o, err := b.nodeIO(n, in, 1, out)
	if err != nil {
		return nil, err
	}
	w, err := b.weight(n.Weight)
	if err != nil {
		return nil, err
	}
	rowLen, nt := n.Shape[0], in[0].Len
	if w.vector || w.rowLen != rowLen || out.Len != rowLen*nt {
		return nil, fmt.Errorf("weight %s rows of %d, output %d for %d ids", n.Weight, w.rowLen, out.Len, nt)
	}
	if w.host {
		return func() error { return b.k.GetRowsHost(b.s, o, w.ptr, w.typ, w.rows, p[0], nt, rowLen) }, nil
	}
	if w.rpOnly {
		return func() error { return b.k.GetRowsR(b.s, o, w.rp, w.typ, w.rows, p[0], nt, rowLen) }, nil
	}
	return func() error { return b.k.GetRows(b.s, o, w.ptr, w.typ, w.rows, p[0], nt, rowLen) }, nil
}

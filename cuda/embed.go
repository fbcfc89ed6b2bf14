package cuda

// embed.go: the embedding gather minfer_get_rows (cuda/kernels/embed.cu),
// which dequantizes the rows of any device weight type, and its op handler;
// minfer_get_rows_host gathers from a table in mapped host memory
// (MINFER_EMBED_HOST, registerHostMapped). Their _q8_1 twins also write the
// decode row's norm as Q8_1 (MINFER_FUSE_RES_NORM_Q8).

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
	rb, err := getRowsCheck("get_rows", wtype, wRows, nt, rowLen)
	if err != nil {
		return err
	}
	return opsErr("get_rows", k.launch(s, name, [3]uint32{uint32(nt), 1, 1}, opsRowBlock(rowLen), 0,
		out, w, int32(wtype), int64(rb), int32(wRows), ids, int32(rowLen)))
}

// getRowsCheck validates a gather of nt rows of rowLen values of a table of
// wRows rows of wtype and returns its row bytes.
func getRowsCheck(op string, wtype quant.Type, wRows, nt, rowLen int) (int, error) {
	if err := opsCheckRows(op, nt, rowLen); err != nil {
		return 0, err
	}
	if !getRowsTypes[wtype] {
		return 0, opsBad(op, "weight type %s has no device decoder", wtype)
	}
	if wRows <= 0 || wRows > maxInt32 {
		return 0, opsBad(op, "weight of %d rows", wRows)
	}
	rb, err := wtype.RowBytes(rowLen)
	if err != nil {
		return 0, opsBad(op, "%v", err)
	}
	return rb, nil
}

// GatherNorm is the norm a one-token gather writes after its row
// (MINFER_FUSE_RES_NORM_Q8): weight W (rowLen values, 0: none), Eps, and
// the Q8_1 row's destination Q8 (Q8Bytes >= ActQ8Bytes(rowLen, 1),
// 4-byte aligned, apart from the f32 row).
type GatherNorm struct {
	W       driver.DevicePtr
	Eps     float32
	Q8      driver.DevicePtr
	Q8Bytes uint64
}

// check validates nrm for a row of rowLen values written at out: the row
// RmsNormQ8_1 takes (the kernels norm it in that kernel's block).
func (nrm GatherNorm) check(op string, out driver.DevicePtr, rowLen int) error {
	blk := opsRowBlock(rowLen)
	if rowLen <= 0 || rowLen%quant.QK != 0 || rowLen > normQ8MaxPer*int(blk[0]) {
		return opsBad(op, "row of %d values: want a positive multiple of %d, at most %d", rowLen, quant.QK, normQ8MaxPer*int(blk[0]))
	}
	if !(nrm.Eps >= 0) {
		return opsBad(op, "eps %g: must be >= 0", nrm.Eps)
	}
	need := ActQ8Bytes(rowLen, 1)
	if out == 0 || nrm.Q8 == 0 || uint64(nrm.Q8)%4 != 0 || nrm.Q8Bytes < need || uint64(nrm.W)%4 != 0 {
		return opsBad(op, "output %v, Q8_1 row %v of %d bytes (needs %d, 4-byte aligned), norm weight %v", out, nrm.Q8, nrm.Q8Bytes, need, nrm.W)
	}
	if overlapBytes(nrm.Q8, need, out, 4*uint64(rowLen)) {
		return opsBad(op, "Q8_1 row %v overlaps the f32 row %v", nrm.Q8, out)
	}
	return nil
}

// The gathers that also write the row's norm as Q8_1 (embed.cu).
const (
	getRowsQ8Kernel     = "minfer_get_rows_q8_1"
	getRowsHostQ8Kernel = "minfer_get_rows_host_q8_1"
	getRowsRQ8Kernel    = "minfer_get_rows_r_q8_1"
)

// GetRowsQ8_1 is GetRows of one token (ids[0]) that also writes the Q8_1
// row of the gathered row's RMS norm (nrm): the row bitwise GetRows', the
// bytes RmsNormQ8_1's of it, one launch of minfer_get_rows_q8_1
// (MINFER_FUSE_RES_NORM_Q8: layer 0's attn norm at decode).
func (k *Kernels) GetRowsQ8_1(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, rowLen int,
	nrm GatherNorm) error {
	return k.getRowsQ8_1(s, getRowsQ8Kernel, out, w, wtype, wRows, ids, rowLen, nrm)
}

// GetRowsHostQ8_1 is GetRowsQ8_1 over a table in mapped host memory
// (minfer_get_rows_host_q8_1, GetRowsHost's twin).
func (k *Kernels) GetRowsHostQ8_1(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, rowLen int,
	nrm GatherNorm) error {
	return k.getRowsQ8_1(s, getRowsHostQ8Kernel, out, w, wtype, wRows, ids, rowLen, nrm)
}

func (k *Kernels) getRowsQ8_1(s *driver.Stream, name string, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr,
	rowLen int, nrm GatherNorm) error {
	const op = "get_rows_q8_1"
	rb, err := getRowsCheck(op, wtype, wRows, 1, rowLen)
	if err != nil {
		return err
	}
	if err := nrm.check(op, out, rowLen); err != nil {
		return err
	}
	return opsErr(op, k.launch(s, name, [3]uint32{1, 1, 1}, opsRowBlock(rowLen), 0,
		out, nrm.Q8, w, int32(wtype), int64(rb), int32(wRows), ids, int32(rowLen), nrm.W, nrm.Eps))
}

// GetRowsRQ8_1 is GetRowsR of one token that also writes the Q8_1 row of
// its norm (nrm), as GetRowsQ8_1: minfer_get_rows_r_q8_1 over the
// repacked table (MINFER_ONE_COPY's tied Q8_0 / Q6_K embedding).
func (k *Kernels) GetRowsRQ8_1(s *driver.Stream, out, w driver.DevicePtr, wtype quant.Type, wRows int, ids driver.DevicePtr, rowLen int,
	nrm GatherNorm) error {
	const op = "get_rows_r_q8_1"
	if err := opsCheckRows(op, 1, rowLen); err != nil {
		return err
	}
	if !MMVQRepackable(wtype) || MMVQRepackBytes(wtype, rowLen, wRows) == 0 {
		return opsBad(op, "weight type %s, %d rows of %d: no repacked layout", wtype, wRows, rowLen)
	}
	if w == 0 || uint64(w)%mmvqrAlign != 0 || wRows > maxInt32 {
		return opsBad(op, "table %v (%d-byte aligned) of %d rows", w, mmvqrAlign, wRows)
	}
	if err := nrm.check(op, out, rowLen); err != nil {
		return err
	}
	return opsErr(op, k.launch(s, getRowsRQ8Kernel, [3]uint32{1, 1, 1}, opsRowBlock(rowLen), 0,
		out, nrm.Q8, w, int32(wtype), int32(wRows), ids, int32(rowLen), nrm.W, nrm.Eps))
}

// gatherQ8Kernel names the gather of w that also writes its row's norm as
// Q8_1 ("" where w's gather has none): the host-mapped, repacked-only or
// device table's, as opGetRows picks the plain gather.
func gatherQ8Kernel(w *devWeight) string {
	switch {
	case w == nil || w.vector:
		return ""
	case w.host:
		return getRowsHostQ8Kernel
	case w.rpOnly:
		if MMVQRepackable(w.typ) {
			return getRowsRQ8Kernel
		}
		return ""
	case getRowsTypes[w.typ]:
		return getRowsQ8Kernel
	}
	return ""
}

// opGetRows runs graph.OpGetRows: the gather of the table's place (mapped
// host memory, the repacked copy alone, the device bytes). With n.OutNorm
// (FuseResNormQ8, one token) that gather's _q8_1 twin also writes the
// norm's Q8_1 row into the activation scratch, where the Q8In node after
// it (layer 0's q/k/v) reads it; the fuse pass made the node only where
// resNormRoute holds, elsewhere it is an error.
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
	if n.OutNorm != "" {
		if nt != 1 || gatherQ8Kernel(w) == "" {
			return nil, fmt.Errorf("norm %s folded into the gather of %s (%s) over %d ids: no Q8_1 form", n.OutNorm, n.Weight, w.typ, nt)
		}
		nw, err := b.vector(n.OutNorm, rowLen)
		if err != nil {
			return nil, err
		}
		nrm := GatherNorm{W: nw, Eps: n.P.OutEps, Q8: b.mm.ActQ8, Q8Bytes: b.mm.ActQ8Bytes}
		switch {
		case w.host:
			return func() error { return b.k.GetRowsHostQ8_1(b.s, o, w.ptr, w.typ, w.rows, p[0], rowLen, nrm) }, nil
		case w.rpOnly:
			return func() error { return b.k.GetRowsRQ8_1(b.s, o, w.rp, w.typ, w.rows, p[0], rowLen, nrm) }, nil
		}
		return func() error { return b.k.GetRowsQ8_1(b.s, o, w.ptr, w.typ, w.rows, p[0], rowLen, nrm) }, nil
	}
	if w.host {
		return func() error { return b.k.GetRowsHost(b.s, o, w.ptr, w.typ, w.rows, p[0], nt, rowLen) }, nil
	}
	if w.rpOnly {
		return func() error { return b.k.GetRowsR(b.s, o, w.rp, w.typ, w.rows, p[0], nt, rowLen) }, nil
	}
	return func() error { return b.k.GetRows(b.s, o, w.ptr, w.typ, w.rows, p[0], nt, rowLen) }, nil
}

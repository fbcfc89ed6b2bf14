package cuda

// onecopy.go: MINFER_ONE_COPY (on by default). A Q8_0 / Q6_K matrix that
// gets a repacked copy (MINFER_MMVQ_REPACK, mmvq_repack.go) keeps only
// that copy on the device: its GGUF bytes are repacked on the host
// (RepackHost) and uploaded once, and every kernel that reads the matrix
// reads the repacked layout: decode minfer_mmvqr_* (as with two copies),
// prefill the f16 GEMM (gemm16.go: minfer_gemm16_q8_0r, and under
// MINFER_MMQ_F16_KQ minfer_gemm16_q6_kr) or minfer_mmq_q6_kr (mmq.go),
// 2..8 tokens minfer_mmvq_nt_<t>r (mmvq_nt.go) and, for a tied embedding,
// the gather minfer_get_rows_r (embed.go). Each but the f16 GEMM is bitwise
// its GGUF kernel; with two copies a Q8_0 prefill runs the int8 MMQ over the
// GGUF bytes instead (gemm16On). The lever's registry entry lists, as
// Requires, the settings under which every route of these types reads the
// copy; with any other the default yields (two copies, logged at New) and an
// explicit 1 is refused there, never reading a copy the device does not
// have.

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
)

// oneCopyConflict is the refusal of an explicit MINFER_ONE_COPY=1 under
// lv, or nil: a setting of its Requires that does not hold routes some
// matmul of a repacked type to a kernel that reads the GGUF bytes. (At its
// default the lever yields to such a setting instead: levers.Parse.)
func oneCopyConflict(lv levers.Config) error {
	if !lv.OneCopy || lv.RequiresMet("MINFER_ONE_COPY") {
		return nil
	}
	return fmt.Errorf("cuda: MINFER_ONE_COPY=1 keeps only the repacked copy of Q8_0 / Q6_K matrices, and %s route some of their "+
		"matmuls to kernels that read the GGUF bytes: set MINFER_ONE_COPY=0 (two copies) or leave it unset (it then yields to them)",
		strings.Join(lv.Unmet("MINFER_ONE_COPY"), ", "))
}

// oneCopyYielded is the line the backend logs when the default one-copy
// layout yielded to lv (levers.Parse): which settings keep the GGUF bytes
// beside the repacked copy. "" when it did not (on, set to 0, a phantom
// arm, or no repacked copy made at all: REPACK=0 holds one copy).
func oneCopyYielded(lv levers.Config) string {
	if lv.OneCopy || lv.Value("MINFER_ONE_COPY") != "1" || !lv.MMVQRepack {
		return ""
	}
	bad := lv.Unmet("MINFER_ONE_COPY")
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("cuda: two device copies of the Q8_0 / Q6_K matrices (GGUF bytes and repacked): %s read the GGUF bytes, "+
		"and MINFER_ONE_COPY at its default yields to them", strings.Join(bad, ", "))
}

// oneCopyWanted reports whether a matrix of type t registered as w keeps
// only its repacked copy: the lever on and the matrix one that gets a copy
// (registerWeight's rule: a gathered-only table is read by the gather
// alone, from its GGUF bytes, and gets none).
func (b *Backend) oneCopyWanted(w graph.Weight) bool {
	return b.lv.OneCopy && len(w.Dims) > 1 && b.repackWanted(w.Type) && !w.Gathered
}

// oneCopyBytes is what registerWeight uploads for dw under
// MINFER_ONE_COPY: its GGUF bytes in the repacked layout (RepackHost). The
// upload then makes it dw.rp, the only copy (dw.ptr stays 0, so a GGUF
// reader would fail its null-pointer check rather than read anything).
func oneCopyBytes(dw *devWeight, data []byte) ([]byte, error) {
	rp, err := RepackHost(dw.typ, data, dw.rowLen/dw.typ.BlockSize()*dw.rows)
	if err != nil {
		return nil, fmt.Errorf("cuda: weight %s: MINFER_ONE_COPY=1: %w", dw.name, err)
	}
	return rp, nil
}

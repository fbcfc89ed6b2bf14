package cuda

// onecopy.go: MINFER_ONE_COPY. A Q8_0 / Q6_K matrix that gets a repacked
// copy (MINFER_MMVQ_REPACK, mmvq_repack.go) keeps only that copy on the
// device: its GGUF bytes are repacked on the host (RepackHost) and uploaded
// once, and every kernel that reads the matrix reads the repacked layout:
// decode minfer_mmvqr_* (as with two copies), prefill minfer_mmq_<t>r
// (mmq.go), 2..8 tokens minfer_mmvq_nt_<t>r (mmvq_nt.go) and, for a tied
// embedding, the gather minfer_get_rows_r (embed.go). Each is bitwise its
// GGUF kernel. The lever's registry entry lists, as Requires, the settings
// under which every route of these types reads the copy; with any other the
// backend refuses the lever at New, never reading a copy it does not have.

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
)

// oneCopyConflict is the refusal of MINFER_ONE_COPY=1 under lv, or nil:
// a setting of its Requires that does not hold routes some matmul of a
// repacked type to a kernel that reads the GGUF bytes.
func oneCopyConflict(lv levers.Config) error {
	if !lv.OneCopy || lv.RequiresMet("MINFER_ONE_COPY") {
		return nil
	}
	l, _ := levers.Lookup("MINFER_ONE_COPY")
	var bad []string
	for _, r := range l.Requires {
		name, want, _ := strings.Cut(r, "=")
		if got := lv.Value(name); got != want {
			bad = append(bad, fmt.Sprintf("%s=%s (it needs %s)", name, got, want))
		}
	}
	return fmt.Errorf("cuda: MINFER_ONE_COPY=1 keeps only the repacked copy of Q8_0 / Q6_K matrices, and %v route some of their "+
		"matmuls to kernels that read the GGUF bytes: unset MINFER_ONE_COPY or those", bad)
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

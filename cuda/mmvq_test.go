package cuda

import (
	"os"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestFuseResidualKernels_NamedInSource: every mmvq type's _res_ kernel
// name is defined by the kernel macros (mmvq.cu for all, mmvq_repack.cu for
// the repacked types).
func TestFuseResidualKernels_NamedInSource(t *testing.T) {
	for file, def := range map[string]string{"kernels/mmvq.cu": "minfer_mmvq_res_##name(",
		"kernels/mmvq_repack.cu": "minfer_mmvqr_res_##name("} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), def) {
			t.Errorf("%s does not define %s", file, def)
		}
	}
	for wt := range mmvqTable {
		if n := mmvqResKernel(wt); !strings.HasPrefix(n, "minfer_mmvq_res_") {
			t.Errorf("%s: residual kernel %q", wt, n)
		}
	}
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		if n := mmvqrResKernel(wt); n != "minfer_mmvqr_res_"+mmvqrTypes[wt] {
			t.Errorf("%s: repacked residual kernel %q", wt, n)
		}
	}
	if mmvqResKernel(quant.F16) != "" || mmvqrResKernel(quant.Q4_K) != "" {
		t.Error("a type without the kernel got a residual kernel name")
	}
}

// TestSupportsFused_MatMulAddOnlyWhereTheResidualKernelRuns: the backend
// offers the residual fusion for a chain whose matmul is one token on the
// quantize + mmvq route (GGUF or repacked), and refuses it for more tokens,
// a type without an mmvq kernel, a type whose mmvq lever is set, an
// unregistered weight and a chain without a matmul: those keep the unfused
// kernels, so the fused node never needs a fallback.
func TestSupportsFused_MatMulAddOnlyWhereTheResidualKernelRuns(t *testing.T) {
	b := &Backend{mm: MatMulOptions{ActQ8: 0x10000, ActQ8Bytes: 1 << 16}, weights: map[string]*devWeight{
		"q8":  {name: "q8", typ: quant.Q8_0, rowLen: 64, rows: 32},
		"q8r": {name: "q8r", typ: quant.Q8_0, rowLen: 64, rows: 32, rp: 0x20000},
		"f16": {name: "f16", typ: quant.F16, rowLen: 64, rows: 32},
		"q5k": {name: "q5k", typ: quant.Q5_K, rowLen: 256, rows: 32},
	}}
	add := &graph.Node{Op: graph.OpAdd, Shape: graph.Sh(32, 1)}
	mm := func(w string, nt int) *graph.Node {
		return &graph.Node{Op: graph.OpMatMul, Weight: w, Shape: graph.Sh(32, nt)}
	}
	for _, c := range []struct {
		what  string
		chain []*graph.Node
		want  bool
	}{
		{"decode Q8_0", []*graph.Node{add, mm("q8", 1)}, true},
		{"decode repacked Q8_0", []*graph.Node{add, mm("q8r", 1)}, true},
		{"two tokens", []*graph.Node{add, mm("q8", 2)}, false},
		{"F16", []*graph.Node{add, mm("f16", 1)}, false},
		{"unregistered", []*graph.Node{add, mm("none", 1)}, false},
		{"no matmul", []*graph.Node{add}, false},
		{"decode Q5_K", []*graph.Node{add, mm("q5k", 1)}, true},
	} {
		if got := b.SupportsFused(graph.FuseMatMulAdd, c.chain...); got != c.want {
			t.Errorf("%s: SupportsFused = %v, want %v", c.what, got, c.want)
		}
	}
	b.mm.NoKQMMVQ = true
	if b.SupportsFused(graph.FuseMatMulAdd, add, mm("q5k", 1)) {
		t.Error("MINFER_NO_KQ_MMVQ=1: the residual fusion offered for Q5_K")
	}
	b.mm.NoQ80MMVQ = true
	if b.SupportsFused(graph.FuseMatMulAdd, add, mm("q8", 1)) {
		t.Error("MINFER_NO_Q80_MMVQ=1: the residual fusion offered for a matmul on the f32 route")
	}
}

package cuda

// Tests of the folds at the edges of the layer stack (reports/
// MINFER_FUSE_RES_NORM_Q8, session 30): MINFER_FUSE_NORM_Q8 folds the
// output norm into the decode lm head's matmul (normQ8Route, opMatMul),
// and MINFER_FUSE_RES_NORM_Q8 makes the last down projection write that
// norm's Q8_1 row and the embedding gather layer 0's attn norm row
// (resNormRoute, opGetRows, minfer_get_rows[_host|_r]_q8_1 in
// kernels/embed.cu). The gathers' bytes are checked on the CPU by
// scripts/kernel-emu/embed-emu.sh (kernels/emu_test.go); the device tests
// are those of the two levers (fuse_normq8_test.go, fuse_resnormq8_test.go,
// fuse_ffnq8_resnorm_test.go) and TestFuseResNormQ8Device_EveryGatherForm.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestFuseEdges_RouteOffersTheLMHeadAndTheGatherOnlyOnADecodeRow: the
// backend offers FuseNormQ8 for the output norm before a one-row lm head
// on a decode MMVQ route (repacked Q8_0, GGUF Q6_K), not over two rows or
// an f32-activation weight (F16); FuseResNormQ8 for the last down
// projection before the lm head that carries the folded norm (not one
// without it), and for the one-row embedding gather of a device,
// host-mapped or repacked-only table before layer 0's normed q/k/v (with
// the split matvec too: no matvec writes the row), not for two rows, a
// table without a decoder, a row the norm's block does not hold or a
// vector.
func TestFuseEdges_RouteOffersTheLMHeadAndTheGatherOnlyOnADecodeRow(t *testing.T) {
	const n, vocab = 896, 1000
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	ws := map[string]*devWeight{
		"norm":     {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"lm8r":     {typ: quant.Q8_0, rowLen: n, rows: vocab, ptr: 0x10000, rp: 0x80000},
		"lm6":      {typ: quant.Q6_K, rowLen: 1024, rows: vocab, ptr: 0x10000},
		"lm16":     {typ: quant.F16, rowLen: n, rows: vocab, ptr: 0x10000},
		"down":     {typ: quant.Q4_K, rowLen: 4864, rows: n, ptr: 0x10000},
		"emb":      {typ: quant.Q8_0, rowLen: n, rows: vocab, ptr: 0x10000},
		"embr":     {typ: quant.Q8_0, rowLen: n, rows: vocab, rp: 0x80000, rpOnly: true},
		"embh":     {typ: quant.Q4_K, rowLen: n, rows: vocab, ptr: 0x10000, host: true},
		"embx":     {typ: quant.Q8_1, rowLen: n, rows: vocab, ptr: 0x10000},
		"emb8":     {typ: quant.Q8_0, rowLen: 880, rows: vocab, ptr: 0x10000},
		"norm1024": {typ: quant.F32, rowLen: 1024, rows: 1, vector: true, ptr: 0x2000},
	}
	b := &Backend{mm: mm, weights: ws}
	onorm := func(rows, width int) *graph.Node {
		return &graph.Node{Op: graph.OpRmsNorm, Shape: graph.Sh(width, rows), Weight: "norm"}
	}
	lm := func(w string, rows int, norm string) *graph.Node {
		return &graph.Node{ID: 9, Op: graph.OpMatMul, Inputs: []int{7}, Weight: w, Shape: graph.Sh(vocab, rows), Norm: norm}
	}
	for _, c := range []struct {
		name    string
		norm, c *graph.Node
		want    bool
	}{
		{"repacked Q8_0 lm head", onorm(1, n), lm("lm8r", 1, ""), true},
		{"GGUF Q6_K lm head", &graph.Node{Op: graph.OpRmsNorm, Shape: graph.Sh(1024, 1), Weight: "norm1024"}, lm("lm6", 1, ""), true},
		{"two rows", onorm(2, n), lm("lm8r", 2, ""), false},
		{"an f16 lm head (f32 activations)", onorm(1, n), lm("lm16", 1, ""), false},
	} {
		if got := b.SupportsFused(graph.FuseNormQ8, c.norm, c.c); got != c.want {
			t.Errorf("FuseNormQ8 %s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	downAdd := &graph.Node{ID: 7, Op: graph.OpMatMulAdd, Weight: "down", Shape: graph.Sh(n, 1)}
	gather := func(w string, rows, width int) *graph.Node {
		return &graph.Node{ID: 3, Op: graph.OpGetRows, Weight: w, Shape: graph.Sh(width, rows)}
	}
	qkv := func(norm string) *graph.Node {
		return &graph.Node{Op: graph.OpFusedQKV, Inputs: []int{3}, Norm: norm, Weights: []string{"x", "y", "z"}}
	}
	for _, c := range []struct {
		name string
		m, c *graph.Node
		want bool
	}{
		{"last down projection -> normed lm head", downAdd, lm("lm8r", 1, "norm"), true},
		{"last down projection -> lm head without a folded norm", downAdd, lm("lm8r", 1, ""), false},
		{"device Q8_0 table -> q/k/v", gather("emb", 1, n), qkv("norm"), true},
		{"repacked-only Q8_0 table", gather("embr", 1, n), qkv("norm"), true},
		{"host-mapped Q4_K table", gather("embh", 1, n), qkv("norm"), true},
		{"two rows", gather("emb", 2, n), qkv("norm"), false},
		{"a table without a decoder (Q8_1)", gather("embx", 1, n), qkv("norm"), false},
		{"a row of 880", gather("emb8", 1, 880), qkv("norm"), false},
		{"a vector", gather("norm", 1, n), qkv("norm"), false},
		{"a q/k/v without a folded norm", gather("emb", 1, n), qkv(""), false},
	} {
		if got := b.SupportsFused(graph.FuseResNormQ8, c.m, c.c); got != c.want {
			t.Errorf("FuseResNormQ8 %s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	split := &Backend{mm: mm, weights: ws}
	split.mm.MMVQSplit = true
	if !split.SupportsFused(graph.FuseResNormQ8, gather("emb", 1, n), qkv("norm")) || split.SupportsFused(graph.FuseResNormQ8, downAdd, lm("lm8r", 1, "norm")) {
		t.Error("MINFER_MMVQ_SPLIT: want the gather offered (no matvec writes its row) and the down projection declined (no split resn form)")
	}
	for _, c := range []struct {
		w    string
		want string
	}{{"emb", getRowsQ8Kernel}, {"embr", getRowsRQ8Kernel}, {"embh", getRowsHostQ8Kernel}, {"embx", ""}, {"norm", ""}} {
		if got := gatherQ8Kernel(ws[c.w]); got != c.want {
			t.Errorf("gatherQ8Kernel(%s) = %q, want %q", c.w, got, c.want)
		}
	}
}

// TestFuseEdges_GatherLaunchersRefuseByName: GetRowsQ8_1, GetRowsHostQ8_1
// and GetRowsRQ8_1 refuse, before any launch and naming the op, a row the
// norm's block does not hold, a negative eps, a missing, misaligned or
// short Q8_1 row, one over the f32 row, a misaligned norm weight, a table
// without a decoder, and (the repacked one) a type without the layout.
func TestFuseEdges_GatherLaunchersRefuseByName(t *testing.T) {
	k := &Kernels{}
	const out, w, ids = driver.DevicePtr(0x10000), driver.DevicePtr(0x100000), driver.DevicePtr(0x20000)
	const n = 896
	good := GatherNorm{W: 0x30000, Eps: 1e-6, Q8: 0x40000, Q8Bytes: ActQ8Bytes(n, 1)}
	for _, c := range []struct {
		name   string
		n      int
		typ    quant.Type
		nrm    func(*GatherNorm)
		wanted string
	}{
		{"a row of 880", 880, quant.Q8_0, func(*GatherNorm) {}, "880"},
		{"a row of 5120 (over 16 values a thread)", 5120, quant.Q8_0, func(*GatherNorm) {}, "row of 5120"},
		{"negative eps", n, quant.Q8_0, func(r *GatherNorm) { r.Eps = -1 }, "eps"},
		{"no Q8_1 row", n, quant.Q8_0, func(r *GatherNorm) { r.Q8 = 0 }, "Q8_1 row"},
		{"a misaligned Q8_1 row", n, quant.Q8_0, func(r *GatherNorm) { r.Q8 += 2 }, "Q8_1 row"},
		{"a Q8_1 row one block short", n, quant.Q8_0, func(r *GatherNorm) { r.Q8Bytes -= 36 }, "Q8_1 row"},
		{"a Q8_1 row over the f32 row", n, quant.Q8_0, func(r *GatherNorm) { r.Q8 = out + 64 }, "overlaps"},
		{"a misaligned norm weight", n, quant.Q8_0, func(r *GatherNorm) { r.W += 1 }, "norm weight"},
		{"a table without a decoder", n, quant.Q8_1, func(*GatherNorm) {}, "no device decoder"},
	} {
		r := good
		c.nrm(&r)
		for _, l := range []struct {
			op string
			f  func() error
		}{
			{"get_rows_q8_1", func() error { return k.GetRowsQ8_1(nil, out, w, c.typ, 100, ids, c.n, r) }},
			{"get_rows_q8_1", func() error { return k.GetRowsHostQ8_1(nil, out, w, c.typ, 100, ids, c.n, r) }},
			{"get_rows_r_q8_1", func() error { return k.GetRowsRQ8_1(nil, out, w, c.typ, 100, ids, c.n, r) }},
		} {
			err := l.f()
			want := c.wanted
			if l.op == "get_rows_r_q8_1" && (c.typ == quant.Q8_1 || c.n == 880) {
				want = "no repacked layout"
			}
			if err == nil || !strings.Contains(err.Error(), l.op) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s (%s): %v, want a refusal naming the op and %q", c.name, l.op, err, want)
			}
		}
	}
	if err := k.GetRowsRQ8_1(nil, out, w+8, quant.Q8_0, 100, ids, n, good); err == nil || !strings.Contains(err.Error(), "aligned") {
		t.Errorf("a repacked table 8 bytes off: %v, want a refusal naming its alignment", err)
	}
}

// TestEmbedQ8Sources_SignaturesAndTheNormKernelsArithmetic: the three
// _q8_1 gathers take the arguments their launchers pass, in order, and
// their norm is minfer_rms_norm_q8_1's: rms_scale's loads, sum, mean and
// scale lines and rms_q8_1's quantization lines, character for character
// (the row length named k there, n in norm.cu). The emulator cannot see
// every change of the reduction order (a 1-ulp mean rarely moves the
// rounded scale): this holds the text to the norm kernel's.
func TestEmbedQ8Sources_SignaturesAndTheNormKernelsArithmetic(t *testing.T) {
	src, norm := kernelSource(t, "embed.cu"), kernelSource(t, "norm.cu")
	gguf := []string{"float*", "uint8_t*", "const uint8_t*", "int", "long long", "int", "const int*", "int", "const float*", "float"}
	rp := []string{"float*", "uint8_t*", "const uint8_t*", "int", "int", "const int*", "int", "const float*", "float"}
	for name, want := range map[string][]string{getRowsQ8Kernel: gguf, getRowsHostQ8Kernel: gguf, getRowsRQ8Kernel: rp} {
		sig := regexp.MustCompile(`extern "C" __global__ void ` + name + `\(([^)]*)\)`).FindStringSubmatch(src)
		if sig == nil {
			t.Errorf("no extern \"C\" %s in embed.cu", name)
			continue
		}
		var types []string
		for _, a := range strings.Split(sig[1], ",") {
			f := strings.Fields(a)
			types = append(types, strings.Join(f[:len(f)-1], " "))
		}
		if strings.Join(types, "|") != strings.Join(want, "|") {
			t.Errorf("%s parameters %v, the launcher passes %v", name, types, want)
		}
	}
	for _, line := range []string{
		"const int i = tid + m * nb;",
		"xv[m] = i < n ? xr[i] : 0.0f;",
		"wv[m] = (w != nullptr && i < n) ? w[i] : 1.0f;",
		"if (tid + m * nb < n) s = __fadd_rn(s, __fmul_rn(xv[m], xv[m]));",
		"s = block_sum(s, scratch);",
		"const float mean = __fdiv_rn(s, (float)n);",
		"const float scale = __fdiv_rn(1.0f, (float)sqrt((double)__fadd_rn(mean, eps)));",
		"const int i0 = m * nb + (tid & ~31); // the warp's block starts here",
		"if (i0 >= n) break;                  // warp-uniform",
		"const int per = (n + blockDim.x - 1) / blockDim.x;",
		"if (per <= 4) {",
	} {
		if !strings.Contains(norm, line) {
			t.Errorf("norm.cu no longer has %q: re-check the gathers' norm against it", line)
			continue
		}
		ours := strings.NewReplacer("(n + ", "(k + ", "< n", "< k", ">= n", ">= k", "(float)n", "(float)k", "xr[i]", "val(i)",
			"(w != nullptr", "(nw != nullptr", "? w[i]", "? nw[i]", "block_sum", "mops::block_sum").Replace(line)
		if !strings.Contains(src, ours) {
			t.Errorf("embed.cu does not have norm.cu's %q (as %q)", line, ours)
		}
	}
	for _, w := range []string{"minfer_q8_1_warp(q8 + (size_t)(i0 / 32) * MINFER_Q8_1_BYTES, nw ? __fmul_rn(yv, wv[m]) : yv, lane);",
		"const float yv = __fmul_rn(xv[m], scale);"} {
		if !strings.Contains(src, w) {
			t.Errorf("embed.cu does not contain %q (rms_q8_1's quantization)", w)
		}
	}
}

// planLaunches counts the kernel launches of one decode step of g, fused
// on the plan backend b (planFuseOn), node by node as the op handlers
// issue them on the one-warp decode MMVQ routes: a gather, a norm, the
// q/k/v tail, an attention, a quantization (none for a Q8In node: its
// producer wrote the row; with a folded norm, the norm's), each matvec (a
// fused q/k/v's as qkvDecodePlan says) and the FFN kernel one each. A
// matmul off the decode routes fails the test (no model for it here).
func planLaunches(t *testing.T, b *Backend, g *graph.Graph) int {
	t.Helper()
	row := func(n *graph.Node) int { // the Q8_1 row's launch
		if n.Q8In {
			return 0
		}
		return 1
	}
	plans := func(names ...string) []matmulPlan {
		var ms []matmulPlan
		for _, w := range names {
			ms = append(ms, matmulPlan{w: b.weights[w]})
		}
		if !b.allDecode(1, ms) {
			t.Fatalf("weights %v: not all on a decode MMVQ route", names)
		}
		return ms
	}
	total := 0
	for _, n := range g.Nodes {
		switch n.Op {
		case graph.OpInput, graph.OpView, graph.OpReshape:
		case graph.OpFusedQKV:
			total += row(n) + b.qkvDecodePlan(1, plans(n.Weights...)).matvecs()
		case graph.OpFusedFFN:
			if same, _ := b.decodeGroup(1, plans(n.Weights...)); !same {
				t.Fatalf("%s: gate and up of two types", n.Name)
			}
			total += row(n) + 1
		case graph.OpFFNMatMulAdd:
			plans(append([]string{n.Weight}, n.Weights...)...)
			total += row(n) + 2 // the FFN (its _ffnq_ form), the down projection
		case graph.OpMatMul, graph.OpMatMulAdd:
			plans(n.Weight)
			total += row(n) + 1
		case graph.OpAttnMatMulAdd:
			plans(n.Weight)
			total += 2 // the attention writes the Q8_1 row, the o-projection
		default:
			total++
		}
	}
	return total
}

// noEdges asks the plan backend about every fusion but the edge folds,
// which it declines as the backend did before them: the output norm into
// the lm head, the lm head as a Q8In reader, the gather as a producer.
type noEdges struct{ planBackend }

func (e noEdges) SupportsFused(k graph.FuseKind, chain ...*graph.Node) bool {
	if (k == graph.FuseNormQ8 && chain[1].Op == graph.OpMatMul) ||
		(k == graph.FuseResNormQ8 && (chain[0].Op == graph.OpGetRows || chain[1].Op == graph.OpMatMul)) {
		return false
	}
	return e.planBackend.SupportsFused(k, chain...)
}

// TestFuseResNormQ8_PlanLaunchesATokenTheEdgesSaveThree: the launches of a
// decoded token on the real type mixes, counted on the plan (planLaunches)
// with the edge folds and without them (noEdges), against the forecast of
// reports/MINFER_FUSE_RES_NORM_Q8/NOTE.md (session 30). With every decode
// fusion on (FUSE_NORM_Q8, FUSE_FFN_Q8, RES_NORM_Q8, MMVQ_QKV_MIXED; the
// default FUSE_ATTN_Q8) a layer is six launches: qwen2-0.5b Q4_K_M 149 ->
// 146 (issue 20's bar: <= 150), qwen2-7b Q4_K_M 173 -> 170. FUSE_NORM_Q8
// alone saves one (the output norm and its quantization are one launch:
// 220 -> 219), RES_NORM_Q8 two more (the lm head reads the last down
// projection's row, the gather writes layer 0's: 173 -> 170 without
// FFN_Q8); with FUSE_NORM_Q8=0 (on by default since session 30) nothing
// changes (268).
func TestFuseResNormQ8_PlanLaunchesATokenTheEdgesSaveThree(t *testing.T) {
	all := []string{"MINFER_FUSE_NORM_Q8=1", "MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1", "MINFER_MMVQ_QKV_MIXED=1"}
	for _, c := range []struct {
		shape, typ    string
		env           []string
		before, after int
	}{
		{"qwen2-0.5b", "Q4_K_M", all, 149, 146},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_NORM_Q8=1", "MINFER_MMVQ_QKV_MIXED=1"}, 220, 219},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_NORM_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1", "MINFER_MMVQ_QKV_MIXED=1"}, 173, 170},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_FUSE_NORM_Q8=0", "MINFER_MMVQ_QKV_MIXED=1"}, 268, 268},
		{"qwen2-0.5b", "Q8_0", all, 149, 146},
		{"qwen2-7b", "Q4_K_M", all, 173, 170},
	} {
		name := fmt.Sprintf("%s %s %v", c.shape, c.typ, c.env)
		gb, bb := planFuseOn(t, c.shape, c.typ, func(b *Backend) graph.Backend { return noEdges{planBackend{b: b}} }, c.env...)
		ga, ba := planFuseOn(t, c.shape, c.typ, func(b *Backend) graph.Backend { return planBackend{b: b} }, c.env...)
		before, after := planLaunches(t, bb, gb), planLaunches(t, ba, ga)
		t.Logf("%s: %d launches a token without the edge folds, %d with them", name, before, after)
		if before != c.before || after != c.after {
			t.Errorf("%s: %d -> %d launches a token, want %d -> %d", name, before, after, c.before, c.after)
		}
	}
}

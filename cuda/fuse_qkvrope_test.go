package cuda

// Tests of MINFER_FUSE_QKV_ROPE (graph.FuseQKVRopeStore: the decode q/k/v
// matvec adds the biases, ropes q and k and stores k and v itself,
// mmvq_xqkv.go qkvRopeRoute, opFusedQKVRopeStore and
// MatMulQ8_1QKVRopeStore). The device test skips with a message when no
// device answers; the others need none. The kernels' bytes are checked on
// the CPU against the matvec then minfer_qkv_rope_store by
// scripts/kernel-emu/qkvrs-emu.sh (kernels/emu_test.go).

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

type qkvRopePlanCase struct {
	shape, typ string
	env        []string
	folded     int
	kernels    []string
}

func (c qkvRopePlanCase) layers() int {
	if c.shape == "qwen2-7b" {
		return 28
	}
	return 24
}

// TestFuseQKVRope_PlansFoldEveryLayerOnTheirKernels: with the lever on, the
// decode plans of qwen2-0.5b and qwen2-7b at Q4_K_M and Q8_0 fold every
// layer's q/k/v matvec into its rope/store (no rope/store, fused QKV or
// view node left; attention reads the folded node), on the kernels these
// plans launch: the 0.5b Q4_K_M's one-type Q5_0 and Q5_0 / repacked Q8_0
// pair, the 7B's Q4_K and Q4_K / repacked Q6_K pair, the repacked Q8_0.
// With MINFER_MMVQ_QKV_MIXED=0 the mixed layers keep three matvecs and
// the separate rope/store (12 of 24 fold on the 0.5b).
func TestFuseQKVRope_PlansFoldEveryLayerOnTheirKernels(t *testing.T) {
	for _, c := range []qkvRopePlanCase{
		{"qwen2-0.5b", "Q4_K_M", nil, 24, []string{"minfer_mmvq_qkvrs_q5_0", "minfer_mmvq_xqkvrs_q5_0_q8_0r"}},
		{"qwen2-0.5b", "Q8_0", nil, 24, []string{"minfer_mmvqr_qkvrs_q8_0"}},
		{"qwen2-7b", "Q4_K_M", nil, 28, []string{"minfer_mmvq_qkvrs_q4_k", "minfer_mmvq_xqkvrs_q4_k_q6_kr"}},
		{"qwen2-7b", "Q8_0", nil, 28, []string{"minfer_mmvqr_qkvrs_q8_0"}},
		{"qwen2-0.5b", "Q4_K_M", []string{"MINFER_MMVQ_QKV_MIXED=0"}, 12, []string{"minfer_mmvq_qkvrs_q5_0"}},
	} {
		name := fmt.Sprintf("%s %s %v", c.shape, c.typ, c.env)
		g, b := planFuseOn(t, c.shape, c.typ, func(b *Backend) graph.Backend { return planBackend{b: b} },
			append([]string{"MINFER_FUSE_QKV_ROPE=1"}, c.env...)...)
		var kernels []string
		folded := 0
		for _, n := range g.Nodes {
			if n.Op != graph.OpFusedQKVRopeStore {
				continue
			}
			folded++
			ms := make([]matmulPlan, 3)
			for i, w := range n.Weights {
				ms[i] = matmulPlan{w: b.weights[w]}
			}
			k, _, _, why := b.qkvRopeLayout(ms)
			if k == "" {
				t.Errorf("%s: %s has no kernel: %s", name, n.Name, why)
			}
			if !slices.Contains(kernels, k) {
				kernels = append(kernels, k)
			}
			if n.Norm == "" || len(n.Inputs) != 3 || g.Nodes[n.Inputs[1]].Op != graph.OpInput || g.Nodes[n.Inputs[2]].Op != graph.OpInput {
				t.Errorf("%s: %s reads %v with norm %q: want the un-normed row, positions and the KV window, the attn norm folded",
					name, n.Name, n.Inputs, n.Norm)
			}
		}
		slices.Sort(kernels)
		if folded != c.folded || !slices.Equal(kernels, c.kernels) {
			t.Errorf("%s: %d folded on %v, want %d on %v", name, folded, kernels, c.folded, c.kernels)
		}
		// Each layer not folded keeps its matvec node and its rope/store.
		rs, qkv := g.Count(graph.OpQkvBiasRopeStore), g.Count(graph.OpFusedQKV)
		if rs != qkv || folded+rs != c.layers() {
			t.Errorf("%s: %d folded, %d rope/store and %d fused QKV nodes left: want one or the other in each of %d layers",
				name, folded, rs, qkv, c.layers())
		}
		for _, n := range g.Nodes {
			if n.Op == graph.OpAttnMatMulAdd && g.Nodes[n.Inputs[0]].Op != graph.OpFusedQKVRopeStore && rs == 0 {
				t.Errorf("%s: %s reads q from %s", name, n.Name, g.Nodes[n.Inputs[0]].Op)
			}
		}
	}
}

// TestFuseQKVRope_RouteOnlyADecodeNeoxTokenOnAFusedPlan: the backend offers
// the fold for one decode token with neox rope over head_dim 64 and 128, an
// f32 or f16 cache, q/k/v on the one-type GGUF or repacked plan or a mixed
// pair with a kernel; it declines two tokens, interleaved rope, head_dim 6
// (pairs do not fill a block), q/k norm weights (qwen3), a q8_0 cache, the
// mixed pair with MINFER_MMVQ_QKV_MIXED=0, a pair without a kernel, an f16
// weight (no decode MMVQ route), an unregistered weight, rows that are not
// the heads', a fused QKV under another node, and the split form.
func TestFuseQKVRope_RouteOnlyADecodeNeoxTokenOnAFusedPlan(t *testing.T) {
	w := func(typ quant.Type, rowLen, rows int, rp bool) *devWeight {
		d := &devWeight{typ: typ, rowLen: rowLen, rows: rows, ptr: 0x1000}
		if rp {
			d.rp = 0x2000
		}
		return d
	}
	mm := MatMulOptions{MMQ: true, MMVQNT: true, MMVQQKVMixed: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	weights := map[string]*devWeight{
		"q": w(quant.Q5_0, 896, 896, false), "k": w(quant.Q5_0, 896, 128, false), "v": w(quant.Q5_0, 896, 128, false),
		"v8r": w(quant.Q8_0, 896, 128, true), "v6r": w(quant.Q6_K, 896, 128, true), "vf16": w(quant.F16, 896, 128, false),
		"q8r": w(quant.Q8_0, 896, 896, true), "k8r": w(quant.Q8_0, 896, 128, true),
		"q128": w(quant.Q4_K, 1024, 1024, false), "k128": w(quant.Q4_K, 1024, 256, false), "v128": w(quant.Q6_K, 1024, 256, true),
		"q6": w(quant.Q5_0, 896, 84, false), "k6": w(quant.Q5_0, 896, 12, false), "v6": w(quant.Q5_0, 896, 12, false),
	}
	rs := func(nh, nkv, hd, nt int, rope graph.RopeStyle) *graph.Node {
		return &graph.Node{Op: graph.OpQkvBiasRopeStore, Shape: graph.Sh(hd, nh, nt),
			P: graph.OpParams{NHead: nh, NHeadKV: nkv, HeadDim: hd, Rope: rope}}
	}
	qkv := func(ws ...string) *graph.Node { return &graph.Node{Op: graph.OpFusedQKV, Weights: ws} }
	neox, inter := graph.RopeNeox, graph.RopeInterleaved
	normed := rs(14, 2, 64, 1, neox)
	normed.Weights = []string{"qn", "kn"}
	mixedOff := mm
	mixedOff.MMVQQKVMixed = false
	split := mm
	split.MMVQSplit = true
	for _, c := range []struct {
		name   string
		mm     MatMulOptions
		format kv.Format
		r, f   *graph.Node
		want   bool
	}{
		{"one-type Q5_0, f16", mm, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "v"), true},
		{"one-type Q5_0, f32", mm, kv.F32, rs(14, 2, 64, 1, neox), qkv("q", "k", "v"), true},
		{"repacked Q8_0", mm, kv.F16, rs(14, 2, 64, 1, neox), qkv("q8r", "k8r", "v8r"), true},
		{"Q5_0 with a repacked Q8_0 v", mm, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "v8r"), true},
		{"Q4_K with a repacked Q6_K v, head_dim 128", mm, kv.F16, rs(8, 2, 128, 1, neox), qkv("q128", "k128", "v128"), true},
		{"two tokens", mm, kv.F16, rs(14, 2, 64, 2, neox), qkv("q", "k", "v"), false},
		{"interleaved rope", mm, kv.F16, rs(14, 2, 64, 1, inter), qkv("q", "k", "v"), false},
		{"head_dim 6", mm, kv.F16, rs(14, 2, 6, 1, neox), qkv("q6", "k6", "v6"), false},
		{"q/k norms", mm, kv.F16, normed, qkv("q", "k", "v"), false},
		{"q8_0 cache", mm, kv.Q8_0, rs(14, 2, 64, 1, neox), qkv("q", "k", "v"), false},
		{"mixed with MINFER_MMVQ_QKV_MIXED=0", mixedOff, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "v8r"), false},
		{"a pair without a kernel", mm, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "v6r"), false},
		{"an f16 v", mm, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "vf16"), false},
		{"an unregistered weight", mm, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "nope"), false},
		{"rows not the heads'", mm, kv.F16, rs(7, 2, 64, 1, neox), qkv("q", "k", "v"), false},
		{"a matmul, not a fused QKV", mm, kv.F16, rs(14, 2, 64, 1, neox), &graph.Node{Op: graph.OpMatMul, Weights: []string{"q", "k", "v"}}, false},
		{"the split form", split, kv.F16, rs(14, 2, 64, 1, neox), qkv("q", "k", "v"), false},
	} {
		b := &Backend{mm: c.mm, weights: weights, kvSpec: graph.KVSpec{Format: c.format},
			k: &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}}
		if got := b.SupportsFused(graph.FuseQKVRopeStore, c.r, c.f); got != c.want {
			t.Errorf("%s: SupportsFused = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFuseQKVRope_LauncherRefusesWhatTheKernelCannotTake: the fused launch's
// checks (run at plan time by the node and again at launch) take the
// 0.5b's shape and refuse, by name, a q8_0 cache, head_dim 6, q rows that
// are not whole heads, v rows that are not k's, a null position, a
// misaligned window, theta 0, no kernel, q and k of two types, a
// misaligned weight and a short Q8_1 row; nothing is launched.
func TestFuseQKVRope_LauncherRefusesWhatTheKernelCannotTake(t *testing.T) {
	type call struct {
		name  string
		xqb   uint64
		w     [3]driver.DevicePtr
		types [3]quant.Type
		n     [3]int
		tail  QkvRopeTail
	}
	ok := call{name: "minfer_mmvq_xqkvrs_q5_0_q8_0r", xqb: 1 << 12, w: [3]driver.DevicePtr{0x10000, 0x20000, 0x30000},
		types: [3]quant.Type{quant.Q5_0, quant.Q5_0, quant.Q8_0}, n: [3]int{896, 128, 128},
		tail: QkvRopeTail{Q: 0x40000, Pos: 0x50000, Win: 0x50010, KRegion: 0x60000, VRegion: 0x70000, Format: kv.F16,
			NCtx: 256, HeadDim: 64, Theta: 1e6}}
	rep := [3]bool{false, false, true}
	args := func(c call) ([]any, error) {
		return qkvRopeStoreArgs(c.name, 0x8000, c.xqb, c.w, c.types, rep, [3]driver.DevicePtr{}, 896, c.n, c.tail)
	}
	if a, err := args(ok); err != nil || len(a) != 21 || a[16] != int32(kv.F16) || a[17] != int64(128*2) {
		t.Fatalf("the 0.5b's launch: %v, args %v: want 21 arguments, f16 rows of 256 bytes", err, a)
	}
	for _, c := range []struct {
		what string
		mod  func(*call)
		want string
	}{
		{"q8_0 cache", func(c *call) { c.tail.Format = kv.Q8_0 }, "q8_0"},
		{"head_dim 6", func(c *call) { c.tail.HeadDim = 6 }, "head_dim 6"},
		{"q rows", func(c *call) { c.n[0] = 900 }, "whole heads"},
		{"v rows", func(c *call) { c.n[2] = 64 }, "as many rows as k"},
		{"null position", func(c *call) { c.tail.Pos = 0 }, "positions"},
		{"misaligned window", func(c *call) { c.tail.Win = 0x50002 }, "KV window"},
		{"theta 0", func(c *call) { c.tail.Theta = 0 }, "theta"},
		{"no kernel", func(c *call) { c.name = "" }, "no fused"},
		{"plain kernel name", func(c *call) { c.name = "minfer_mmvq_xqkv_q5_0_q8_0r" }, "no fused"},
		{"q and k of two types", func(c *call) { c.types[1] = quant.Q8_0 }, "not one type"},
		{"misaligned weight", func(c *call) { c.w[0] = 0x10001 }, "weight 0"},
		{"short Q8_1 row", func(c *call) { c.xqb = 100 }, "Q8_1"},
	} {
		c2 := ok
		c.mod(&c2)
		if _, err := args(c2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %q", c.what, err, c.want)
		}
	}
}

// TestFuseQKVRope_SetBesideAnUnmetRequireIsRefused: MINFER_FUSE_QKV_ROPE=1
// with the QKV fusion off (no node to fold) or the split MMVQ form (which
// the fused kernels' one-warp rows are not) would switch nothing: the
// backend refuses the pair by name and takes the lever alone.
func TestFuseQKVRope_SetBesideAnUnmetRequireIsRefused(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"MINFER_FUSE_QKV_ROPE=1"}, ""},
		{[]string{"MINFER_FUSE_QKV_ROPE=1", "MINFER_NO_FUSE_QKV=1"}, "MINFER_NO_FUSE_QKV=1"},
		{[]string{"MINFER_FUSE_QKV_ROPE=1", "MINFER_MMVQ_SPLIT=1"}, "MINFER_MMVQ_SPLIT=1"},
		{[]string{"MINFER_FUSE_QKV_ROPE=0", "MINFER_MMVQ_SPLIT=1"}, ""},
	} {
		checkOptInRefusal(t, "MINFER_FUSE_QKV_ROPE", c.env, c.want)
	}
	checkOptInRequiresListed(t, "MINFER_FUSE_QKV_ROPE")
}

// TestQKVRopeKernels_NamesAndLivenessMatchTheSources: every kernel
// qkvrsKernel can name (each mmvq type's one-type form, the repacked Q8_0
// and Q6_K, every mixed pair) is instantiated in mmvq_xqkv.cu under that
// name, the lever's liveness pattern matches each of them and none of the
// plain q/k/v kernels or minfer_qkv_rope_store.
func TestQKVRopeKernels_NamesAndLivenessMatchTheSources(t *testing.T) {
	_, src := kernelDefines(t, "kernels/mmvq_xqkv.cu")
	l, ok := levers.Lookup("MINFER_FUSE_QKV_ROPE")
	if !ok || l.Liveness == nil || l.Liveness.CUDA == nil || len(l.Liveness.CUDA.Census) != 1 {
		t.Fatalf("MINFER_FUSE_QKV_ROPE's liveness: %+v", l.Liveness)
	}
	glob := l.Liveness.CUDA.Census[0]
	check := func(name, macro, prefix string, plain ...string) {
		if name == "" || !strings.Contains(src, "\n"+macro+"("+strings.TrimPrefix(name, prefix)+", ") {
			t.Errorf("%q: mmvq_xqkv.cu has no %s(%s, ...)", name, macro, strings.TrimPrefix(name, prefix))
		}
		if m, _ := path.Match(glob, name); !m {
			t.Errorf("%s does not match the liveness pattern %s", name, glob)
		}
		for _, p := range append(plain, "minfer_qkv_rope_store") {
			if m, _ := path.Match(glob, p); m {
				t.Errorf("the unfused kernel %s matches %s", p, glob)
			}
		}
	}
	for ty := range mmvqTable {
		check(qkvrsKernel(qkvPlan{kind: qkvOneType, route: routeMMVQ}, ty), "MINFER_QKVRS_KERNEL", "minfer_mmvq_qkvrs_",
			mmvqFusedKernel(ty, "qkv"))
	}
	for ty := range mmvqrTypes {
		check(qkvrsKernel(qkvPlan{kind: qkvOneType, route: routeMMVQR}, ty), "MINFER_QKVRSR_KERNEL", "minfer_mmvqr_qkvrs_",
			mmvqrKernel(ty, "qkv"))
	}
	for pair, plain := range xqkvTable {
		check(qkvrsKernel(qkvPlan{kind: qkvMixed, pair: pair}, pair.qk), "MINFER_XQKVRS_KERNEL", "minfer_mmvq_xqkvrs_", plain)
	}
}

// TestFuseQKVRopeDevice_LogitsBitwiseAndOneLaunchFewer: synthetic
// qwen2-tiny Q8_0 (repacked Q8_0 q/k/v) and Q4_K_M, qwen2-0.5b Q4_K_M (Q5_0
// and Q5_0 / repacked Q8_0 layers), prefill then 6 decode steps, CUDA
// graphs on and off, f32 (auto) and f16 caches, the QKV fusion and the
// one-warp MMVQ path pinned (its Requires): MINFER_FUSE_QKV_ROPE=1 gives
// bitwise the logits of =0 at every step. Census of the decode steps: the
// _qkvrs_ kernels run only with the lever on, once a layer a step, and each
// launch replaces one q/k/v matvec and one minfer_qkv_rope_store.
func TestFuseQKVRopeDevice_LogitsBitwiseAndOneLaunchFewer(t *testing.T) {
	dsNeedDevice(t)
	models := []dsModel{{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"}, {"qwen2-0.5b", "Q4_K_M"}}
	for _, cache := range []string{"auto", "f16"} {
		t.Run("cache="+cache, func(t *testing.T) {
			// The plain q/k/v forms this census names (MINFER_FUSE_NORM_MMVQ=0:
			// an A/B's arm B may set it; its normed forms have names of their own).
			pin := append([]string{"MINFER_NO_FUSE_QKV=0", "MINFER_CACHE_TYPE=" + cache, "MINFER_FUSE_NORM_MMVQ=0"}, dsOneWarpDecode...)
			dsLeverDecodeOn(t, "MINFER_FUSE_QKV_ROPE", models, pin, func(t *testing.T, _ dsModel, sh synth.Shape, _ string, cOff, cOn map[string]int64, _ *Backend) {
				fused, names := rpMatching(cOn, "minfer_mmvq*qkvrs_*")
				fusedOff, _ := rpMatching(cOff, "minfer_mmvq*qkvrs_*")
				mvOff := qkvMatvecLaunches(cOff)
				mvOn := qkvMatvecLaunches(cOn)
				rsOff, rsOn := cOff["minfer_qkv_rope_store"], cOn["minfer_qkv_rope_store"]
				t.Logf("decode launches over %d steps: _qkvrs_ on %d %v, off %d; q/k/v matvecs off %d, on %d; minfer_qkv_rope_store off %d, on %d",
					frSteps, fused, names, fusedOff, mvOff, mvOn, rsOff, rsOn)
				if want := int64(sh.NLayer * frSteps); fused != want || fusedOff != 0 || mvOff-mvOn != fused || rsOff-rsOn != fused || rsOn != 0 {
					t.Errorf("_qkvrs_ on %d (want %d layers x %d steps = %d), off %d; q/k/v matvecs dropped by %d, rope/stores by %d (%d left): want both drops equal to on, none left",
						fused, sh.NLayer, frSteps, want, fusedOff, mvOff-mvOn, rsOff-rsOn, rsOn)
				}
			})
		})
	}
}

// qkvMatvecLaunches counts the decode q/k/v matvec launches of a census:
// the one-type fused forms and the mixed ones (the plans of the tests'
// models launch no separate q/k/v matvecs).
func qkvMatvecLaunches(c map[string]int64) int64 {
	one, _ := rpMatching(c, "minfer_mmvq*_qkv_*")
	mixed, _ := rpMatching(c, "minfer_mmvq_xqkv_*")
	return one + mixed
}

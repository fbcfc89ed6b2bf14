package cuda

// Tests of MINFER_FUSE_NORM_MMVQ (mmvq_norm.go: the decode fused q/k/v and
// gate/up matvecs norm their own row, kernels/mmvq_znorm.cu) that need no
// device: the route at plan time and what it declines, the launch count a
// token, the launchers' refusals, the kernel names against the sources and
// the lever's liveness pattern, the Requires refusal. The kernels' bytes
// are checked on the CPU against minfer_rms_norm_q8_1 then the plain
// kernel by scripts/kernel-emu/normmv-emu.sh (kernels/emu_test.go); the
// device test is in mmvq_norm_device_test.go.

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// nmvNodes is, for each decode node of g that carries a folded norm, the
// normed kernel normMMVQNode names ("" declined) and why.
type nmvNode struct {
	n         *graph.Node
	name, why string
}

func nmvNodes(t *testing.T, g *graph.Graph, b *Backend, nt int) []nmvNode {
	t.Helper()
	var out []nmvNode
	for _, n := range g.Nodes {
		if n.Norm == "" {
			continue
		}
		names := n.Weights
		if n.Op == graph.OpMatMul {
			names = []string{n.Weight}
		}
		var ms []matmulPlan
		for _, w := range names {
			ms = append(ms, matmulPlan{w: b.weights[w]})
		}
		name, why := b.normMMVQNode(n, nt, ms)
		out = append(out, nmvNode{n, name, why})
	}
	return out
}

// TestFuseNormMMVQ_PlansTakeTheNormedKernelsAtDecode: with the lever on,
// every decode q/k/v and gate/up node of the plans that carries the folded
// norm takes a normed kernel (the forms these plans launch: qwen2-0.5b
// Q4_K_M's one-type Q5_0 and Q5_0 / repacked Q8_0 pair, roped or not, its
// Q5_0 FFN; the repacked Q8_0 of the Q8_0 model), 2 a layer, and the lm
// head keeps its norm launch. Declined, every node keeping the norm
// launch: the lever off, more than one token, MINFER_MMVQ_SPLIT=1, the
// 7B's row of 3584 (above 2048); with
// MINFER_MMVQ_QKV_MIXED=0 the mixed layers' separate q/k/v launches.
func TestFuseNormMMVQ_PlansTakeTheNormedKernelsAtDecode(t *testing.T) {
	on := []string{"MINFER_FUSE_NORM_MMVQ=1"}
	for _, c := range []struct {
		shape, typ string
		env        []string
		nt         int
		normed     int      // nodes on a normed kernel
		kernels    []string // their kernels, sorted
		why        string   // what the others' refusals name ("" when none but the lm head's)
	}{
		{"qwen2-0.5b", "Q4_K_M", on, 1, 48, []string{"minfer_mmvqn_ffn_q5_0", "minfer_mmvqn_qkv_q5_0", "minfer_mmvqn_xqkv_q5_0_q8_0r"}, ""},
		{"qwen2-0.5b", "Q4_K_M", append([]string{"MINFER_FUSE_QKV_ROPE=1"}, on...), 1, 48,
			[]string{"minfer_mmvqn_ffn_q5_0", "minfer_mmvqn_qkvrs_q5_0", "minfer_mmvqn_xqkvrs_q5_0_q8_0r"}, ""},
		{"qwen2-0.5b", "Q8_0", on, 1, 48, []string{"minfer_mmvqnr_ffn_q8_0", "minfer_mmvqnr_qkv_q8_0"}, ""},
		{"qwen2-0.5b", "Q8_0", append([]string{"MINFER_FUSE_QKV_ROPE=1"}, on...), 1, 48, []string{"minfer_mmvqnr_ffn_q8_0", "minfer_mmvqnr_qkvrs_q8_0"}, ""},
		{"qwen2-0.5b", "Q8_0", append([]string{"MINFER_MMVQ_REPACK=0", "MINFER_ONE_COPY=0"}, on...), 1, 48,
			[]string{"minfer_mmvqn_ffn_q8_0", "minfer_mmvqn_qkv_q8_0"}, ""},
		{"qwen2-0.5b", "Q4_K_M", append([]string{"MINFER_MMVQ_QKV_MIXED=0"}, on...), 1, 36,
			[]string{"minfer_mmvqn_ffn_q5_0", "minfer_mmvqn_qkv_q5_0"}, "separate launches"},
		{"qwen2-0.5b", "Q4_K_M", nil, 1, 0, nil, "MINFER_FUSE_NORM_MMVQ=0"},
		{"qwen2-0.5b", "Q4_K_M", on, 5, 0, nil, "5 tokens"},
		{"qwen2-0.5b", "Q4_K_M", append([]string{"MINFER_MMVQ_SPLIT=1"}, on...), 1, 0, nil, "MINFER_MMVQ_SPLIT=1"},
		{"qwen2-7b", "Q4_K_M", append([]string{"MINFER_FUSE_QKV_ROPE=1"}, on...), 1, 0, nil, "3584"},
	} {
		name := fmt.Sprintf("%s %s %v nt %d", c.shape, c.typ, c.env, c.nt)
		g, b := planFuseOn(t, c.shape, c.typ, func(b *Backend) graph.Backend { return planBackend{b: b} }, c.env...)
		normed, heads := 0, 0
		var kernels []string
		for _, x := range nmvNodes(t, g, b, c.nt) {
			switch {
			case x.n.Op == graph.OpMatMul:
				heads++
				if x.name != "" || (c.normed > 0 && !strings.Contains(x.why, "lm head")) {
					t.Errorf("%s: the lm head %s takes %q (%s), want the norm launch kept", name, x.n.Name, x.name, x.why)
				}
			case x.name != "":
				normed++
				if !slices.Contains(kernels, x.name) {
					kernels = append(kernels, x.name)
				}
				if m, _ := path.Match("minfer_mmvqn*", x.name); !m {
					t.Errorf("%s: %s outside the liveness pattern", name, x.name)
				}
			case c.why == "" || !strings.Contains(x.why, c.why):
				t.Errorf("%s: %s (%s) declined: %q, want a reason naming %q", name, x.n.Name, x.n.Op, x.why, c.why)
			}
		}
		slices.Sort(kernels)
		t.Logf("%s: %d nodes normed on %v, %d lm heads", name, normed, kernels, heads)
		if normed != c.normed || !slices.Equal(kernels, c.kernels) || heads != 1 {
			t.Errorf("%s: %d nodes on %v, %d lm heads; want %d on %v, 1", name, normed, kernels, heads, c.normed, c.kernels)
		}
	}
}

// TestNormMMVQKernels_NamesAndLivenessMatchTheSources: every normed kernel
// the route can name is instantiated in mmvq_znorm.cu under that name and
// nothing else is; the liveness pattern matches each of them and no other
// kernel of the sources (the plain forms, minfer_mmvq_nt_*); each plain
// form the route replaces maps to its normed name; the prologue's limits
// are the launcher's.
func TestNormMMVQKernels_NamesAndLivenessMatchTheSources(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmvq_znorm.cu")
	if defs["MINFER_MMVQN_MAX_K"] != normMMVQMaxK || defs["MINFER_MMVQN_OPS_THREADS"] != opsThreads {
		t.Errorf("mmvq_znorm.cu MINFER_MMVQN_MAX_K %d, MINFER_MMVQN_OPS_THREADS %d; the launcher has %d, opsThreads %d",
			defs["MINFER_MMVQN_MAX_K"], defs["MINFER_MMVQN_OPS_THREADS"], normMMVQMaxK, opsThreads)
	}
	forms := map[string][]string{
		"MINFER_MMVQN_KERNEL":        {"minfer_mmvqn_qkv_", "minfer_mmvqn_ffn_"},
		"MINFER_MMVQNR_KERNEL":       {"minfer_mmvqnr_qkv_", "minfer_mmvqnr_ffn_"},
		"MINFER_MMVQN_XQKV_KERNEL":   {"minfer_mmvqn_xqkv_"},
		"MINFER_MMVQN_QKVRS_KERNEL":  {"minfer_mmvqn_qkvrs_"},
		"MINFER_MMVQNR_QKVRS_KERNEL": {"minfer_mmvqnr_qkvrs_"},
		"MINFER_MMVQN_XQKVRS_KERNEL": {"minfer_mmvqn_xqkvrs_"},
	}
	inSrc := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(MINFER_MMVQN[A-Z_]*_KERNEL)\(([a-z0-9_]+),`).FindAllStringSubmatch(src, -1) {
		pre, ok := forms[m[1]]
		if !ok {
			t.Errorf("mmvq_znorm.cu: unknown instantiation macro %s", m[1])
		}
		for _, p := range pre {
			inSrc[p+m[2]] = true
		}
	}
	if len(inSrc) != len(mmvqnKernels) {
		t.Errorf("mmvq_znorm.cu instantiates %d kernels, the route knows %d", len(inSrc), len(mmvqnKernels))
	}
	l, ok := levers.Lookup("MINFER_FUSE_NORM_MMVQ")
	if !ok || l.Liveness == nil || l.Liveness.CUDA == nil || len(l.Liveness.CUDA.Census) != 1 {
		t.Fatalf("MINFER_FUSE_NORM_MMVQ's liveness: %+v", l.Liveness)
	}
	glob := l.Liveness.CUDA.Census[0]
	for name := range mmvqnKernels {
		if !inSrc[name] {
			t.Errorf("%s: not instantiated in mmvq_znorm.cu", name)
		}
		if m, _ := path.Match(glob, name); !m {
			t.Errorf("%s does not match the liveness pattern %s", name, glob)
		}
	}
	// Every other kernel of the sources (the first name after each
	// __global__) stays outside the pattern.
	first := regexp.MustCompile(`\bminfer_[a-z0-9_]+`)
	for _, f := range []string{"mmvq.cu", "mmvq_repack.cu", "mmvq_xqkv.cu", "mmvq_split.cu", "mmvq_nt.cu", "norm.cu", "quantize_act.cu"} {
		_, s := kernelDefines(t, "kernels/"+f)
		for _, chunk := range strings.Split(s, "__global__")[1:] {
			if name := first.FindString(chunk); name != "" {
				if ok, _ := path.Match(glob, name); ok {
					t.Errorf("%s: the kernel %s matches the liveness pattern %s", f, name, glob)
				}
			}
		}
	}
	// The plain forms the route replaces, by name.
	for ty := range mmvqTable {
		for _, form := range []string{"qkv", "ffn", "qkvrs"} {
			if got := mmvqnKernel(mmvqFusedKernel(ty, form)); got != "minfer_mmvqn_"+form+"_"+strings.TrimPrefix(mmvqTable[ty], "minfer_mmvq_") {
				t.Errorf("%s %s: normed form %q", ty, form, got)
			}
		}
	}
	for ty, sfx := range mmvqrTypes {
		for _, form := range []string{"qkv", "ffn", "qkvrs"} {
			if got := mmvqnKernel(mmvqrKernel(ty, form)); got != "minfer_mmvqnr_"+form+"_"+sfx {
				t.Errorf("%s %s repacked: normed form %q", ty, form, got)
			}
		}
	}
	for pair, plain := range xqkvTable {
		if got := mmvqnKernel(plain); got != strings.Replace(plain, "minfer_mmvq_", "minfer_mmvqn_", 1) {
			t.Errorf("%+v: normed form %q of %s", pair, got, plain)
		}
		if got := mmvqnKernel(qkvrsKernel(qkvPlan{kind: qkvMixed, pair: pair}, pair.qk)); !strings.HasPrefix(got, "minfer_mmvqn_xqkvrs_") {
			t.Errorf("%+v: normed roped form %q", pair, got)
		}
	}
	// Forms without a normed kernel: declined, never a name.
	for _, plain := range []string{"minfer_mmvq_q8_0", "minfer_mmvq_res_q8_0", "minfer_mmvq_ffnq_q5_0", "minfer_mmvqr_ffnq_q8_0",
		"minfer_mmvq_qkv_s_q8_0", "minfer_mmv_q8_0", "", "minfer_mmvq_xqkv_q8_0_q5_0"} {
		if got := mmvqnKernel(plain); got != "" {
			t.Errorf("%q: normed form %q, want none", plain, got)
		}
	}
}

// TestNormMMVQ_LaunchersRefuseBadArguments: the three launchers refuse, by
// name and before any launch, what the normed kernels cannot take: an
// unknown or misplaced kernel name, a row that is not k, above 2048 or not
// whole Q8_1 blocks, a null or misaligned row or norm weight, a negative
// or NaN eps, q/k/v of two types on a one-type kernel, mixed q/k rows that
// are not whole blocks, a misaligned weight or bias, a null output, and
// the roped form's bad tail.
func TestNormMMVQ_LaunchersRefuseBadArguments(t *testing.T) {
	var k Kernels
	row := NormRow{X: 0x8000, W: 0x9000, K: 896, Eps: 1e-6}
	type qkv struct {
		name  string
		out   driver.DevicePtr
		r     NormRow
		w     [3]driver.DevicePtr
		types [3]quant.Type
		rep   [3]bool
		bias  [3]driver.DevicePtr
		n     [3]int
	}
	ok := qkv{name: "minfer_mmvqn_xqkv_q5_0_q8_0r", out: 0x40000, r: row, w: [3]driver.DevicePtr{0x10000, 0x20000, 0x30000},
		types: [3]quant.Type{quant.Q5_0, quant.Q5_0, quant.Q8_0}, rep: [3]bool{false, false, true}, n: [3]int{896, 128, 128}}
	for _, c := range []struct {
		what string
		mod  func(*qkv)
		want string
	}{
		{"unknown kernel", func(c *qkv) { c.name = "minfer_mmvqn_xqkv_q8_0_q5_0" }, "no normed q/k/v"},
		{"plain kernel", func(c *qkv) { c.name = "minfer_mmvq_xqkv_q5_0_q8_0r" }, "no normed q/k/v"},
		{"roped kernel", func(c *qkv) { c.name = "minfer_mmvqn_xqkvrs_q5_0_q8_0r" }, "no normed q/k/v"},
		{"ffn kernel", func(c *qkv) { c.name = "minfer_mmvqn_ffn_q5_0" }, "no normed q/k/v"},
		{"row not k", func(c *qkv) { c.r.K = 1024 }, "normed row of 1024"},
		{"row above 2048", func(c *qkv) { c.r.K = 2080 }, "up to 2048"},
		{"null row", func(c *qkv) { c.r.X = 0 }, "null or not 4-byte"},
		{"misaligned norm weight", func(c *qkv) { c.r.W = 0x9002 }, "null or not 4-byte"},
		{"negative eps", func(c *qkv) { c.r.Eps = -1 }, "eps"},
		{"NaN eps", func(c *qkv) { c.r.Eps = float32(math.NaN()) }, "eps"},
		{"mixed q rows", func(c *qkv) { c.n[0] = 898 }, "multiples of 4"},
		{"one-type kernel, two types", func(c *qkv) { c.name = "minfer_mmvqn_qkv_q5_0" }, "one-type"},
		{"misaligned weight", func(c *qkv) { c.w[1] = 0x20001 }, "weight 1"},
		{"misaligned bias", func(c *qkv) { c.bias[2] = 0x5002 }, "bias 2"},
		{"null output", func(c *qkv) { c.out = 0 }, "output"},
	} {
		x := ok
		c.mod(&x)
		if err := k.MatMulNormQKV(nil, x.name, x.out, x.r, x.w, x.types, x.rep, x.bias, 896, x.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("qkv %s: %v, want a refusal naming %q", c.what, err, c.want)
		}
	}
	for _, c := range []struct {
		what, name string
		rep        bool
		r          NormRow
		wg, out    driver.DevicePtr
		want       string
	}{
		{"the repacked name for GGUF weights", "minfer_mmvqnr_ffn_q8_0", false, row, 0x10000, 0x40000, "not the normed SwiGLU"},
		{"another type's kernel", "minfer_mmvqn_ffn_q5_0", false, row, 0x10000, 0x40000, "not the normed SwiGLU"},
		{"row of 3584", "minfer_mmvqn_ffn_q8_0", false, NormRow{X: 0x8000, W: 0x9000, K: 3584}, 0x10000, 0x40000, "normed row"},
		{"misaligned gate", "minfer_mmvqn_ffn_q8_0", false, row, 0x10001, 0x40000, "weight 0"},
		{"null output", "minfer_mmvqn_ffn_q8_0", false, row, 0x10000, 0, "output"},
	} {
		r := c.r
		if r.K == 3584 {
			if err := k.MatMulNormFFN(nil, c.name, c.out, r, c.wg, 0x20000, quant.Q8_0, c.rep, 3584, 64); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ffn %s: %v, want a refusal naming %q", c.what, err, c.want)
			}
			continue
		}
		if err := k.MatMulNormFFN(nil, c.name, c.out, r, c.wg, 0x20000, quant.Q8_0, c.rep, 896, 64); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ffn %s: %v, want a refusal naming %q", c.what, err, c.want)
		}
	}
	tail := QkvRopeTail{Q: 0x40000, Pos: 0x50000, Win: 0x50010, KRegion: 0x60000, VRegion: 0x70000, Format: kv.F16,
		NCtx: 256, HeadDim: 64, Theta: 1e6}
	for _, c := range []struct {
		what, name string
		r          NormRow
		tail       QkvRopeTail
		want       string
	}{
		{"the unroped kernel", "minfer_mmvqn_xqkv_q5_0_q8_0r", row, tail, "no normed q/k/v + rope"},
		{"the plain roped kernel", "minfer_mmvq_xqkvrs_q5_0_q8_0r", row, tail, "no normed q/k/v + rope"},
		{"eps NaN", "minfer_mmvqn_xqkvrs_q5_0_q8_0r", NormRow{X: 0x8000, W: 0x9000, K: 896, Eps: float32(math.NaN())}, tail, "eps"},
		{"a q8_0 cache", "minfer_mmvqn_xqkvrs_q5_0_q8_0r", row, func() QkvRopeTail { x := tail; x.Format = kv.Q8_0; return x }(), "q8_0"},
		{"head_dim 6", "minfer_mmvqn_xqkvrs_q5_0_q8_0r", row, func() QkvRopeTail { x := tail; x.HeadDim = 6; return x }(), "head_dim 6"},
	} {
		if err := k.MatMulNormQKVRopeStore(nil, c.name, c.r, ok.w, ok.types, ok.rep, ok.bias, 896, ok.n, c.tail); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("roped %s: %v, want a refusal naming %q", c.what, err, c.want)
		}
	}
	// The normed arguments: the Q8_1 row's place takes x, w, eps.
	args := normArgs([]any{driver.DevicePtr(1), driver.DevicePtr(2), int32(3)}, 1, row)
	if len(args) != 5 || args[1] != row.X || args[2] != row.W || args[3] != row.Eps || args[4] != int32(3) {
		t.Errorf("normArgs: %v", args)
	}
}

// TestFuseNormMMVQ_SetBesideAnUnmetRequireIsRefused: MINFER_FUSE_NORM_MMVQ=1
// without the folded norm (MINFER_FUSE_NORM_Q8=0: no node carries one) or
// with the split form (no normed split kernel) would switch nothing: the
// backend refuses the pair by name and takes the lever alone.
func TestFuseNormMMVQ_SetBesideAnUnmetRequireIsRefused(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"MINFER_FUSE_NORM_MMVQ=1"}, ""},
		{[]string{"MINFER_FUSE_NORM_MMVQ=1", "MINFER_FUSE_QKV_ROPE=1"}, ""},
		{[]string{"MINFER_FUSE_NORM_MMVQ=1", "MINFER_FUSE_NORM_Q8=0"}, "MINFER_FUSE_NORM_Q8=0"},
		{[]string{"MINFER_FUSE_NORM_MMVQ=1", "MINFER_MMVQ_SPLIT=1"}, "MINFER_MMVQ_SPLIT=1"},
		{[]string{"MINFER_FUSE_NORM_MMVQ=0", "MINFER_MMVQ_SPLIT=1"}, ""},
	} {
		lv := checkOptInRefusal(t, "MINFER_FUSE_NORM_MMVQ", c.env, c.want)
		if slices.Contains(c.env, "MINFER_FUSE_NORM_MMVQ=1") != lv.FuseNormMMVQ {
			t.Errorf("%v: FuseNormMMVQ %v", c.env, lv.FuseNormMMVQ)
		}
	}
	checkOptInRequiresListed(t, "MINFER_FUSE_NORM_MMVQ")
}

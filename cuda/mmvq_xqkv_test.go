package cuda

// Tests of MINFER_MMVQ_QKV_MIXED (mmvq_xqkv.go, kernels/mmvq_xqkv.cu) that
// need no device: the plan-time route of a fused q/k/v node, the launches
// it saves over the quantizer's recipes, the launcher's refusals, the
// kernel table against the source and the lever's refusal beside the
// settings its Requires exclude. The kernel's outputs are checked on the
// CPU by scripts/kernel-emu/xqkv-emu.sh (kernels/emu_test.go) and on the
// device by mmvq_xqkv_device_test.go.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/quantize"
	"github.com/minfer-go/minfer/engine/synth"
)

// xqBackend is a backend with no device whose matmul options take the
// decode MMVQ routes (a Q8_1 scratch set), the mixed lever as given.
func xqBackend(mixed bool) *Backend {
	return &Backend{mm: MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20, MMVQQKVMixed: mixed},
		k: &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}}
}

// xqWeight is a registered matrix of typ, rows x k; a Q8_0 / Q6_K one has a
// repacked copy when repacked (MINFER_MMVQ_REPACK's default).
func xqWeight(typ quant.Type, k, rows int, repacked bool) *devWeight {
	w := &devWeight{typ: typ, rowLen: k, rows: rows, ptr: 0x10000}
	if repacked && MMVQRepackable(typ) {
		w.rp = 0x20000
	}
	return w
}

func xqPlans(ws ...*devWeight) []matmulPlan {
	ms := make([]matmulPlan, len(ws))
	for i, w := range ws {
		ms[i] = matmulPlan{w: w}
	}
	return ms
}

// TestMMVQQKVMixedRoute_OneLaunchOnlyWhereAKernelTakesTheTriple: the plan
// of a fused q/k/v node at decode, per type triple and lever setting. The
// lever on takes the mixed launch for q/k of one type on the GGUF decode
// route with v of another type on a decode route, where the pair has a
// kernel (qwen2-0.5b Q4_K_M's Q5_0 + repacked Q8_0, the 7B's Q4_K +
// repacked Q6_K, and their GGUF-v forms), q and k rows are whole blocks of
// 4 (v any) and no matrix takes the split form. Every other case keeps its
// route: one type is the one-type kernel whatever the lever; the lever
// off, q/k of two types, a pair without a kernel, an f32-activation v, 2
// tokens, q rows of 130 and the split form are three launches, each saying
// why when the lever was on.
func TestMMVQQKVMixedRoute_OneLaunchOnlyWhereAKernelTakesTheTriple(t *testing.T) {
	const k = 256
	w := func(typ quant.Type, rows int) *devWeight { return xqWeight(typ, k, rows, true) }
	gguf := func(typ quant.Type, rows int) *devWeight { return xqWeight(typ, k, rows, false) }
	splitOn := xqBackend(true)
	splitOn.mm.MMVQSplit = true
	noKQ := xqBackend(true)
	noKQ.mm.NoKQMMVQ = true
	for _, c := range []struct {
		name   string
		b      *Backend
		nt     int
		ws     []*devWeight
		kind   qkvKind
		kernel string // qkvMixed: the kernel
		why    string // qkvSeparate with the lever on: a word of the reason
	}{
		{"0.5b Q4_K_M: Q5_0 + repacked Q8_0", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.Q8_0, 128)},
			qkvMixed, "minfer_mmvq_xqkv_q5_0_q8_0r", ""},
		{"the same, lever off", xqBackend(false), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.Q8_0, 128)},
			qkvSeparate, "", ""},
		{"7B Q4_K_M: Q4_K + repacked Q6_K", xqBackend(true), 1, []*devWeight{w(quant.Q4_K, 3584), w(quant.Q4_K, 512), w(quant.Q6_K, 512)},
			qkvMixed, "minfer_mmvq_xqkv_q4_k_q6_kr", ""},
		{"the same, lever off", xqBackend(false), 1, []*devWeight{w(quant.Q4_K, 3584), w(quant.Q4_K, 512), w(quant.Q6_K, 512)},
			qkvSeparate, "", ""},
		{"REPACK=0: Q5_0 + GGUF Q8_0", xqBackend(true), 1, []*devWeight{gguf(quant.Q5_0, 896), gguf(quant.Q5_0, 128), gguf(quant.Q8_0, 128)},
			qkvMixed, "minfer_mmvq_xqkv_q5_0_q8_0", ""},
		{"REPACK=0: Q4_K + GGUF Q6_K", xqBackend(true), 1, []*devWeight{gguf(quant.Q4_K, 256), gguf(quant.Q4_K, 128), gguf(quant.Q6_K, 128)},
			qkvMixed, "minfer_mmvq_xqkv_q4_k_q6_k", ""},
		{"Q5_K_M: Q5_K + repacked Q6_K", xqBackend(true), 1, []*devWeight{w(quant.Q5_K, 512), w(quant.Q5_K, 256), w(quant.Q6_K, 256)},
			qkvMixed, "minfer_mmvq_xqkv_q5_k_q6_kr", ""},
		{"Q4_K_S: Q4_K + Q5_K", xqBackend(true), 1, []*devWeight{w(quant.Q4_K, 256), w(quant.Q4_K, 128), w(quant.Q5_K, 128)},
			qkvMixed, "minfer_mmvq_xqkv_q4_k_q5_k", ""},
		{"v rows of 126 (the last block partial)", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.Q8_0, 126)},
			qkvMixed, "minfer_mmvq_xqkv_q5_0_q8_0r", ""},
		{"one type, lever on", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.Q5_0, 128)},
			qkvOneType, "", ""},
		{"one repacked type, lever on", xqBackend(true), 1, []*devWeight{w(quant.Q8_0, 896), w(quant.Q8_0, 128), w(quant.Q8_0, 128)},
			qkvOneType, "", ""},
		{"q and k of two types", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q4_K, 128), w(quant.Q8_0, 128)},
			qkvSeparate, "", "not one type"},
		{"repacked q/k", xqBackend(true), 1, []*devWeight{w(quant.Q8_0, 896), w(quant.Q8_0, 128), w(quant.Q6_K, 128)},
			qkvSeparate, "", "GGUF decode route"},
		{"a pair without a kernel (Q4_0 + Q8_0)", xqBackend(true), 1, []*devWeight{w(quant.Q4_0, 896), w(quant.Q4_0, 128), w(quant.Q8_0, 128)},
			qkvSeparate, "", "no mixed kernel"},
		{"an f16 v (f32-activation route)", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.F16, 128)},
			qkvSeparate, "", ""},
		{"K-quants off MMVQ (MINFER_NO_KQ_MMVQ)", noKQ, 1, []*devWeight{w(quant.Q4_K, 256), w(quant.Q4_K, 128), w(quant.Q6_K, 128)},
			qkvSeparate, "", ""},
		{"two tokens", xqBackend(true), 2, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.Q8_0, 128)},
			qkvSeparate, "", ""},
		{"q rows of 130", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 130), w(quant.Q5_0, 128), w(quant.Q8_0, 128)},
			qkvSeparate, "", "multiples of 4"},
		{"k rows of 126", xqBackend(true), 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 126), w(quant.Q8_0, 126)},
			qkvSeparate, "", "multiples of 4"},
		{"the split form (MINFER_MMVQ_SPLIT=1)", splitOn, 1, []*devWeight{w(quant.Q5_0, 896), w(quant.Q5_0, 128), w(quant.Q8_0, 128)},
			qkvSeparate, "", "split"},
	} {
		p := c.b.qkvDecodePlan(c.nt, xqPlans(c.ws...))
		got := ""
		if p.kind == qkvMixed {
			got = xqkvKernel(p.pair)
		}
		if p.kind != c.kind || got != c.kernel || !strings.Contains(p.why, c.why) {
			t.Errorf("%s: plan %+v (kernel %q), want kind %d, kernel %q, why containing %q", c.name, p, got, c.kind, c.kernel, c.why)
		}
		if want := map[qkvKind]int{qkvSeparate: 3, qkvOneType: 1, qkvMixed: 1}[c.kind]; p.matvecs() != want {
			t.Errorf("%s: %d matvec launches, want %d", c.name, p.matvecs(), want)
		}
		if p.kind == qkvSeparate && c.b.mm.MMVQQKVMixed && c.nt == 1 && c.b.allDecode(c.nt, xqPlans(c.ws...)) && p.why == "" {
			t.Errorf("%s: a decode node of mixed types keeps three launches without a reason", c.name)
		}
	}
}

// xqTokenLaunches is, for a model of shape sh quantized by recipe ftype,
// the matvec launches of its fused q/k/v nodes in one decoded token and the
// mixed kernels among them (by name), on a backend with the lever as given
// and the repacked copies as given: each layer's q/k/v types are the
// quantizer's (engine/quantize TypeFor, as minfer synth writes them).
func xqTokenLaunches(t *testing.T, sh synth.Shape, ftype string, mixed, repack bool) (launches int, kernels map[string]int) {
	t.Helper()
	hp := sh.HParams()
	b := xqBackend(mixed)
	kernels = map[string]int{}
	for l := range sh.NLayer {
		var ws []*devWeight
		for _, m := range []struct {
			name string
			rows int
		}{{"attn_q", hp.NQ()}, {"attn_k", hp.NKV()}, {"attn_v", hp.NKV()}} {
			name := fmt.Sprintf("blk.%d.%s.weight", l, m.name)
			typ, err := quantize.TypeFor(name, []uint64{uint64(sh.NEmbd), uint64(m.rows)}, ftype, hp, l)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, xqWeight(typ, sh.NEmbd, m.rows, repack))
		}
		p := b.qkvDecodePlan(1, xqPlans(ws...))
		launches += p.matvecs()
		if p.kind == qkvMixed {
			kernels[xqkvKernel(p.pair)]++
		}
	}
	return launches, kernels
}

// TestMMVQQKVMixed_LeverSavesTwoLaunchesPerMixedLayerOfTheRecipes: the
// prediction of reports/MINFER_MMVQ_QKV_MIXED/NOTE.md from the plan. Over
// the layers of the synth shapes quantized by the recipes, the lever cuts
// the fused q/k/v's matvec launches of a decoded token by 24 on qwen2-0.5b
// Q4_K_M (12 layers of Q5_0 q/k with a repacked Q8_0 v, one mixed launch
// each) and by 28 on qwen2-7b and qwen3-0.6b Q4_K_M (14 layers of Q4_K with
// a repacked Q6_K v), 2 on the trained tiny-code shape the correctness
// gates run (hidden 256, 4 layers); the same with the GGUF v kernels when
// nothing is repacked; and every mixed layer of the Q5_K_M and Q4_K_S
// recipes has a kernel too (no recipe's mix is left at three launches).
func TestMMVQQKVMixed_LeverSavesTwoLaunchesPerMixedLayerOfTheRecipes(t *testing.T) {
	tinyCode := synth.Shape{Name: "tiny-code", NEmbd: 256, NLayer: 4, NHead: 4, NHeadKV: 2, NFF: 704}
	shape := func(name string) synth.Shape {
		sh, err := synth.ShapeByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return sh
	}
	for _, c := range []struct {
		sh     synth.Shape
		ftype  string
		saved  int
		kernel string // repacked v
	}{
		{shape("qwen2-0.5b"), "Q4_K_M", 24, "minfer_mmvq_xqkv_q5_0_q8_0r"},
		{shape("qwen2-7b"), "Q4_K_M", 28, "minfer_mmvq_xqkv_q4_k_q6_kr"},
		{shape("qwen3-0.6b"), "Q4_K_M", 28, "minfer_mmvq_xqkv_q4_k_q6_kr"},
		{tinyCode, "Q4_K_M", 4, "minfer_mmvq_xqkv_q4_k_q6_kr"},
		{shape("qwen2-0.5b"), "Q5_K_M", 24, "minfer_mmvq_xqkv_q5_1_q8_0r"},
		{shape("qwen2-7b"), "Q5_K_M", 28, "minfer_mmvq_xqkv_q5_k_q6_kr"},
		{shape("qwen2-0.5b"), "Q4_K_S", 8, "minfer_mmvq_xqkv_q5_0_q5_1"},
		{shape("qwen2-7b"), "Q4_K_S", 8, "minfer_mmvq_xqkv_q4_k_q5_k"},
		{shape("qwen2-0.5b"), "Q8_0", 0, ""},
		{shape("qwen2-0.5b"), "MIX", 0, ""},
	} {
		for _, repack := range []bool{true, false} {
			off, _ := xqTokenLaunches(t, c.sh, c.ftype, false, repack)
			on, ks := xqTokenLaunches(t, c.sh, c.ftype, true, repack)
			want := map[string]int{}
			if c.kernel != "" {
				k := c.kernel
				if !repack {
					k = strings.TrimSuffix(k, "r")
				}
				want[k] = c.saved / 2
			}
			t.Logf("%s %s repack=%v: q/k/v matvec launches a token: lever off %d, on %d (saved %d); mixed kernels %v",
				c.sh.Name, c.ftype, repack, off, on, off-on, ks)
			if off-on != c.saved || fmt.Sprint(ks) != fmt.Sprint(want) {
				t.Errorf("%s %s repack=%v: saved %d launches with %v, want %d with %v", c.sh.Name, c.ftype, repack, off-on, ks, c.saved, want)
			}
		}
	}
}

// TestMMVQQKVMixed_LauncherRefusesWhatTheRouteDeclines: MatMulQ8_1QKVMixed
// refuses, naming the op and the values and before any launch, a pair
// without a kernel, q or k rows that are not multiples of 4, a GGUF weight
// or a repacked v off their alignment, a misaligned bias, a short Q8_1 row
// and a null output.
func TestMMVQQKVMixed_LauncherRefusesWhatTheRouteDeclines(t *testing.T) {
	k := &Kernels{}
	const p = driver.DevicePtr(0x10000)
	ok := xqkvPair{quant.Q5_0, quant.Q8_0, true}
	w := [3]driver.DevicePtr{p, p, p}
	n := [3]int{896, 128, 128}
	qb := ActQ8Bytes(896, 1)
	for _, c := range []struct {
		name string
		pair xqkvPair
		w    [3]driver.DevicePtr
		bias [3]driver.DevicePtr
		n    [3]int
		qb   uint64
		out  driver.DevicePtr
		want string
	}{
		{"no kernel", xqkvPair{quant.Q4_0, quant.Q8_0, true}, w, [3]driver.DevicePtr{}, n, qb, p, "no mixed q/k/v kernel"},
		{"q rows 130", ok, w, [3]driver.DevicePtr{}, [3]int{130, 128, 128}, qb, p, "multiples of 4"},
		{"k rows 126", ok, w, [3]driver.DevicePtr{}, [3]int{896, 126, 126}, qb, p, "multiples of 4"},
		{"q weight 2 bytes off", ok, [3]driver.DevicePtr{p + 2, p, p}, [3]driver.DevicePtr{}, n, qb, p, "weight 0"},
		{"repacked v 8 bytes off", ok, [3]driver.DevicePtr{p, p, p + 8}, [3]driver.DevicePtr{}, n, qb, p, "weight 2"},
		{"misaligned bias", ok, w, [3]driver.DevicePtr{0, p + 2, 0}, n, qb, p, "bias 1"},
		{"a Q8_1 row one block short", ok, w, [3]driver.DevicePtr{}, n, qb - 36, p, "Q8_1 activation"},
		{"null output", ok, w, [3]driver.DevicePtr{}, n, qb, 0, "output"},
	} {
		err := k.MatMulQ8_1QKVMixed(nil, c.out, p, c.qb, c.w, c.pair, c.bias, 896, c.n)
		if err == nil || !strings.Contains(err.Error(), "matmul_q8_1_xqkv") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming matmul_q8_1_xqkv and %q", c.name, err, c.want)
		}
	}
}

// TestMMVQQKVMixedKernels_NamedInSource: every pair of the table is one
// MINFER_XQKV_KERNEL line of mmvq_xqkv.cu whose q/k and v row families are
// its types (and its v layout), and the source has no other; the block of
// rows the route checks is the kernel's (MINFER_MMVQ_ROWS).
func TestMMVQQKVMixedKernels_NamedInSource(t *testing.T) {
	_, src := kernelDefines(t, "kernels/mmvq_xqkv.cu")
	mmvq, _ := kernelDefines(t, "kernels/mmvq.cu")
	if mmvq["MINFER_MMVQ_ROWS"] != mmvqRows || !strings.Contains(src, "minfer_mmvq_xqkv_##name(") {
		t.Errorf("mmvq.cu MINFER_MMVQ_ROWS %d (launcher %d); mmvq_xqkv.cu names its kernels minfer_mmvq_xqkv_##name: %v",
			mmvq["MINFER_MMVQ_ROWS"], mmvqRows, strings.Contains(src, "minfer_mmvq_xqkv_##name("))
	}
	re := regexp.MustCompile(`(?m)^MINFER_XQKV_KERNEL\(([a-z0-9_]+), MinferXqkv([A-Z0-9_]+), MinferXqkv([A-Za-z0-9_]+)\)`)
	var inSrc []string
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		inSrc = append(inSrc, "minfer_mmvq_xqkv_"+m[1])
		v, vr := strings.CutSuffix(m[3], "r")
		pair := xqkvPair{qk: xqType(t, m[2]), v: xqType(t, v), vRepacked: vr}
		if got := xqkvKernel(pair); got != "minfer_mmvq_xqkv_"+m[1] {
			t.Errorf("mmvq_xqkv.cu instantiates %s for %+v; the table names %q", m[1], pair, got)
		}
	}
	var inTable []string
	for _, name := range xqkvTable {
		inTable = append(inTable, name)
	}
	slices.Sort(inSrc)
	slices.Sort(inTable)
	if !slices.Equal(inSrc, inTable) {
		t.Errorf("mmvq_xqkv.cu instantiates %v, the table names %v", inSrc, inTable)
	}
	for p := range xqkvTable {
		if p.qk == p.v || mmvqTable[p.qk] == "" || mmvqTable[p.v] == "" || p.vRepacked && !MMVQRepackable(p.v) {
			t.Errorf("pair %+v: not two MMVQ types with a layout each has", p)
		}
	}
}

func xqType(t *testing.T, s string) quant.Type {
	t.Helper()
	ty, err := quant.ParseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return ty
}

// TestMMVQQKVMixed_RefusedBesideTheSettingsItsRequiresExclude: set to 1
// with the split form or without the q/k/v fusion (where it would switch
// nothing), the backend refuses the lever by name before opening a device;
// alone, or unset beside them, it is not refused. Unset it is on (the
// default since reports/MINFER_MMVQ_QKV_MIXED, session 32's five-gate
// PASS) and yields to those settings; =0 turns it off.
func TestMMVQQKVMixed_RefusedBesideTheSettingsItsRequiresExclude(t *testing.T) {
	const lever = "MINFER_MMVQ_QKV_MIXED"
	for _, c := range []struct {
		set     []string
		on      bool
		refused bool
	}{
		{[]string{lever + "=1"}, true, false},
		{[]string{lever + "=1", "MINFER_MMVQ_SPLIT=1"}, true, true},
		{[]string{lever + "=1", "MINFER_NO_FUSE_QKV=1"}, true, true},
		{[]string{"MINFER_MMVQ_SPLIT=1"}, false, false},
		{[]string{"MINFER_NO_FUSE_QKV=1"}, false, false},
		{[]string{lever + "=0"}, false, false},
		{nil, true, false},
	} {
		lv, err := levers.Parse(c.set)
		if err != nil {
			t.Fatal(err)
		}
		if lv.MMVQQKVMixed != c.on {
			t.Errorf("%v: MMVQQKVMixed %v, want %v", c.set, lv.MMVQQKVMixed, c.on)
		}
		err = optInConflict(lv, lever)
		if (err != nil) != c.refused || err != nil && !strings.Contains(err.Error(), lever) {
			t.Errorf("%v: %v, want refused %v naming the lever", c.set, err, c.refused)
		}
		if !c.refused {
			continue
		}
		if _, err := New(Options{Levers: lv}); err == nil || !strings.Contains(err.Error(), lever) {
			t.Errorf("New with %v: %v, want the refusal", c.set, err)
		}
	}
}

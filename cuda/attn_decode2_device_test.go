package cuda

// Tests of the lean split-K decode attention (attn_decode2.cu,
// attn_decode2.go): the kernel against the port of engine/cpu's attention
// (adRef, attn_device_test.go) for every KV format and the decode shapes,
// the backend path across graph replays against the CPU backend, the whole
// model against the plain kernel (MINFER_NO_SPLITK_ATTN=1), and
// MINFER_NO_SPLITK_ATTN's census. Device tests skip without a device; the
// launcher tests are host-only.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

// adLean is the lean kernel (attn_decode2.cu) for the shared adShape
// helpers.
var adLean = adKernel{name: "attn_decode2",
	scratchBytes: AttnDecode2ScratchBytes,
	launch: func(k *Kernels, s *driver.Stream, out, q, kr, vr driver.DevicePtr, f kv.Format, win, scr driver.DevicePtr, scrB int, p AttnParams) error {
		return k.AttentionDecode2(s, out, q, kr, vr, f, win, scr, scrB, p)
	},
	counterBytes: func(p AttnParams, f kv.Format) uint64 { return attnDecode2Geometry(p, f).mlOff }}

func ad2OpenShape(t *testing.T, ms *mmtSession, f kv.Format, k, v adRegion, nh, nkv, hd, nCtx int) *adShape {
	t.Helper()
	return adOpenKernelShape(t, ms, adLean, f, k, v, nh, nkv, hd, nCtx)
}

// TestAttnDecode2Device_EveryFormatShapeWindowMatchesCPUWithin1e3: the lean
// kernel against engine/cpu's attention for every KV format, head_dim 64
// and 128, GQA ratios 1/4/7/8, nt 1..8, no window and sliding windows, KV
// lengths 1 .. n_ctx (4096+): one split (up to 64 cells), 2 .. 63 active
// splits and all 64 (the case list is checked to cover them). One scratch
// per shape serves every case without re-zeroing (as in a replayed graph),
// its counters are read back as zero, the same buffers rerun with other
// windows give each answer, and a repeated launch is bitwise equal (the
// combine does not depend on which block is last).
func TestAttnDecode2Device_EveryFormatShapeWindowMatchesCPUWithin1e3(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(71, 72))
	const nkv, nCtx = 2, 4160
	lengths := []int{1, 2, 31, 33, 63, 64, 65, 97, 129, 256, 257, 600, 1000, 2047, 4096 + 37, nCtx}
	windows := []int{0, 100, 300}
	nsplit := attnDecode2Geometry(AttnParams{NT: 1, NHead: nkv, NHeadKV: nkv, HeadDim: 64, NCtx: nCtx}, kv.F16).nsplit
	covered := map[int]bool{}
	for _, w := range windows {
		for _, L := range lengths {
			n := L
			if w > 0 {
				n = min(L, w)
			}
			_, nact := attnDecode2SplitPlan(n, nsplit)
			covered[nact] = true
		}
	}
	if !covered[1] || !covered[attnDecode2MaxSplits] || len(covered) < 6 {
		t.Fatalf("the cases cover active split counts %v of %d splits: want 1, several between and %d", covered, nsplit, attnDecode2MaxSplits)
	}
	adSweepFormats(t, ms, r, adLean, nkv, nCtx, lengths, windows)
}

// TestAttnDecode2Device_NT3BitwiseEqualsThreeNT1: each (token, head) is
// computed the same way whatever nt is: a 3-token launch gives bitwise the
// rows of three 1-token launches, at lengths of one split, a few and many.
func TestAttnDecode2Device_NT3BitwiseEqualsThreeNT1(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(73, 74))
	const nkv, nCtx = 2, 1200
	for _, c := range []struct {
		f       kv.Format
		hd, g   int
		starts  []int
		windows []int
	}{
		{kv.F32, 64, 7, []int{10, 62, 140, 597, 1190}, []int{0, 64}},
		{kv.F16, 128, 7, []int{10, 62, 140, 597, 1190}, []int{0, 100}},
		{kv.Q8_0, 64, 4, []int{30, 600}, []int{0}},
	} {
		rl := nkv * c.hd
		k, v := adFill(r, c.f, nCtx, rl), adFill(r, c.f, nCtx, rl)
		adUpload(t, ms, &k, &v)
		sh := ad2OpenShape(t, ms, c.f, k, v, c.g*nkv, nkv, c.hd, nCtx)
		row := c.hd * c.g * nkv
		for _, w := range c.windows {
			for _, start := range c.starts {
				q := dsRand(r, 3*row, 2)
				all := sh.run(t, q, 3, start, w)
				for i := range 3 {
					one := sh.run(t, q[i*row:(i+1)*row], 1, start+i, w)
					for j := range one {
						if math.Float32bits(one[j]) != math.Float32bits(all[i*row+j]) {
							t.Fatalf("%s hd%d start %d window %d token %d elem %d: nt=1 %v, nt=3 %v (bitwise)", c.f, c.hd, start, w, i, j, one[j], all[i*row+j])
						}
					}
				}
			}
		}
		sh.zeroCounters(t, c.f.String())
	}
}

// TestAttnDecode2Device_OddShapesMatchCPUWithin1e3: head_dims without a
// compile-time kernel (the pair-load path), GQA ratios above 8, tiny
// contexts; the last cells of each context take several splits.
func TestAttnDecode2Device_OddShapesMatchCPUWithin1e3(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(75, 76))
	worst, worstAt := 0.0, ""
	for _, c := range []struct {
		f                 kv.Format
		hd, nh, nkv, nCtx int
	}{
		{kv.F16, 80, 10, 2, 300},
		{kv.F32, 96, 12, 1, 300},
		{kv.Q8_0, 96, 6, 2, 300}, // rows of 192 values: six q8_0 blocks, heads straddle blocks
		{kv.F16, 128, 20, 2, 500},
		{kv.Q8_0, 64, 34, 2, 500},
		{kv.F32, 16, 4, 4, 400},
		{kv.F16, 2, 8, 1, 9}, // the smallest head
	} {
		rl := c.nkv * c.hd
		k, v := adFill(r, c.f, c.nCtx, rl), adFill(r, c.f, c.nCtx, rl)
		adUpload(t, ms, &k, &v)
		sh := ad2OpenShape(t, ms, c.f, k, v, c.nh, c.nkv, c.hd, c.nCtx)
		for _, w := range []int{0, 7} {
			for _, start := range []int{0, 1, 33, c.nCtx - 9, c.nCtx - 1} {
				for _, nt := range []int{1, 3, 8} {
					if start >= 0 && start+nt <= c.nCtx && nt <= c.nCtx {
						sh.check(t, r, nt, start, w, 2, &worst, &worstAt)
					}
				}
			}
		}
		sh.zeroCounters(t, fmt.Sprintf("%s hd%d", c.f, c.hd))
	}
	t.Logf("worst max|diff| %g (%s)", worst, worstAt)
}

// TestAttnDecode2Device_StartOutsideTheRegionGivesNaNRows: a negative start
// gives NaN everywhere; tokens past the region give NaN rows while the
// earlier tokens are still right; the next launch is unaffected.
func TestAttnDecode2Device_StartOutsideTheRegionGivesNaNRows(t *testing.T) {
	ms := mmtOpen(t)
	r := rand.New(rand.NewPCG(77, 78))
	const f, hd, nh, nkv, nCtx = kv.F16, 128, 28, 4, 600
	rl := nkv * hd
	k, v := adFill(r, f, nCtx, rl), adFill(r, f, nCtx, rl)
	adUpload(t, ms, &k, &v)
	sh := ad2OpenShape(t, ms, f, k, v, nh, nkv, hd, nCtx)
	q := dsRand(r, hd*nh*4, 1)
	for i, x := range sh.run(t, q, 4, -1, 0) {
		if !math.IsNaN(float64(x)) {
			t.Fatalf("start -1: out[%d] = %v, want NaN", i, x)
		}
	}
	got := sh.run(t, q, 4, nCtx-2, 0) // cells 598, 599 exist, 600 and 601 do not
	row := hd * nh
	want := adRef(q[:2*row], k.f32, v.f32, rl, hd, nh, nkv, 2, nCtx-2, 0, attnScale(sh.p))
	if d, at := adWorst(got[:2*row], want); d > 1e-3 {
		t.Errorf("tokens inside the region: max|diff| %g at %d", d, at)
	}
	for i, x := range got[2*row:] {
		if !math.IsNaN(float64(x)) {
			t.Fatalf("token past the region: out[%d] = %v, want NaN", 2*row+i, x)
		}
	}
	var worst float64
	var worstAt string
	sh.check(t, r, 1, 450, 0, 2, &worst, &worstAt)
	sh.zeroCounters(t, "after NaN rows")
}

// ad2Census sums the census launches of kernels with the prefix.
func ad2Census(b *Backend, prefix string) int64 {
	var n int64
	for name, c := range b.Kernels().Census() {
		if strings.HasPrefix(name, prefix) {
			n += c
		}
	}
	return n
}

// TestAttnDecode2_BackendMatchesCPUBackendAcrossReplays: the backend's decode path (opAttn, its scratch, CUDA graph capture and
// replay with a new window each step) against the engine/cpu backend, every
// KV format, no window and a sliding window; the census shows the lean
// kernels ran. The lean kernels and graphs are pinned on
// (MINFER_NO_SPLITK_ATTN=0, MINFER_ATTN_DECODE_TC=0, dsGraphsOn): an A/B's
// arm B may turn either off.
func TestAttnDecode2_BackendMatchesCPUBackendAcrossReplays(t *testing.T) {
	dsNeedDevice(t)
	worst := 0.0
	for _, f := range kv.Formats() {
		for _, w := range []int{0, 64} {
			d, b := adBackendRun(t, dsLevers(t, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_SPLITK_ATTN=0", "MINFER_ATTN_DECODE_TC=0"}, dsGraphsOn...)...), f, w)
			worst = max(worst, d)
			if st := b.CaptureStats(); !st.Disabled && st.Replays == 0 {
				t.Errorf("%s window %d: no replay happened (%+v): the test did not cover graph replays", f, w, st)
			}
			if n := ad2Census(b, "minfer_attn_decode2"); n == 0 { // decode2l_*, or decode2q_* under MINFER_FUSE_ATTN_Q8
				t.Errorf("%s window %d: no minfer_attn_decode2* launch; census %v", f, w, b.Kernels().Census())
			}
		}
	}
	t.Logf("worst max|diff| %g", worst)
}

// TestAttnDecode2_LeverSwitchesTheKernel (census): with MINFER_NO_SPLITK_ATTN
// unset the decode steps launch the lean split-K kernels and no plain
// attention kernel; with MINFER_NO_SPLITK_ATTN=1 the reverse.
func TestAttnDecode2_LeverSwitchesTheKernel(t *testing.T) {
	dsNeedDevice(t)
	for _, off := range []bool{false, true} {
		val := "0"
		if off {
			val = "1"
		}
		_, b := adBackendRun(t, dsLevers(t, "MINFER_LAUNCH_CENSUS=1", "MINFER_NO_SPLITK_ATTN="+val, "MINFER_ATTN_DECODE_TC=0"), kv.F16, 0)
		lean, plain := ad2Census(b, "minfer_attn_decode2"), ad2Census(b, "minfer_attn_f32") // decode2l_* or decode2q_*
		if !off && (lean == 0 || plain != 0) {
			t.Errorf("lever unset: %d split-K launches (want > 0), %d plain (want 0); census %v", lean, plain, b.Kernels().Census())
		}
		if off && (lean != 0 || plain == 0) {
			t.Errorf("MINFER_NO_SPLITK_ATTN=1: %d split-K launches (want 0), %d plain (want > 0); census %v", lean, plain, b.Kernels().Census())
		}
	}
}

// ad2LongSteps forwards a 100-token prompt and then n decode steps (so the
// decode attention takes several splits) and returns every step's logits.
func ad2LongSteps(t *testing.T, path string, n int, extra ...string) [][]float32 {
	t.Helper()
	e := dsEngine(t, path, "cuda", 256, extra...)
	prompt := make([]int32, 100)
	for i := range prompt {
		prompt[i] = int32(11 + 13*i%487) // ids below the tiny vocabulary (512)
	}
	l, err := e.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{l}
	for i := range n {
		if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestAttnDecode2_WholeModelLeverOnVsOffWithin1e3: whole models decoding
// at 100+ cells (several splits) with the lean split-K kernel and the plain
// one-block kernel (MINFER_NO_SPLITK_ATTN=1; the v1 split-K kernel it was
// also compared with is retired). With f32 activations (qwen2-tiny F32) the
// two agree within 1e-3 of the largest logit (the accumulation-order
// class) and on top-1 wherever the top-2 margin is above 0.1. With Q8_0
// weights the matmuls quantize their activations to int8: a last-bit
// difference in an attention output flips an int8 rounding now and then,
// and the logits then move by ~1% at once (H200, 2026-11-29: v1 vs v2
// bitwise equal for the first steps, then rel 0.010-0.016 on tiny-code and
// the 0.5b shape). Those models are held to the activation-quantization
// class instead: rel 5e-2, top-1 equal where the margin is above what that
// bar can close (dsClassFlipMargin: 0.2 at least). CUDA graph replays give
// bitwise the direct launches. The lean arms pin MINFER_NO_SPLITK_ATTN=0
// and the graph arm dsGraphsOn (under an A/B's arm B either would
// otherwise compare the plain kernel, or direct launches, with itself).
func TestAttnDecode2_WholeModelLeverOnVsOffWithin1e3(t *testing.T) {
	dsNeedDevice(t)
	models := []struct {
		name        string
		path        string
		bar, margin float64
	}{
		{"qwen2-tiny F32", dsSynth(t, "qwen2-tiny", "F32"), 1e-3, 0.1},
		{"qwen2-tiny Q8_0", dsSynth(t, "qwen2-tiny", "Q8_0"), 5e-2, 0.2},
		{"tiny-code", dsTinyCode(t), 5e-2, 0.2},
		{"qwen2-0.5b Q8_0", dsSynth(t, "qwen2-0.5b", "Q8_0"), 5e-2, 0.2},
	}
	for _, m := range models {
		v2 := ad2LongSteps(t, m.path, 8, append([]string{"MINFER_NO_SPLITK_ATTN=0", "MINFER_ATTN_DECODE_TC=0"}, dsGraphsOn...)...)
		direct := ad2LongSteps(t, m.path, 8, "MINFER_NO_SPLITK_ATTN=0", "MINFER_ATTN_DECODE_TC=0", "MINFER_NO_CUDA_GRAPH=1")
		arms := map[string][][]float32{
			"plain": ad2LongSteps(t, m.path, 8, "MINFER_NO_SPLITK_ATTN=1"),
		}
		worst := 0.0
		for _, ref := range []string{"plain"} {
			for i, want := range arms[ref] {
				d := dsLogitDiff(v2[i], want)
				worst = max(worst, d)
				if d > m.bar {
					t.Errorf("%s step %d: relative logit diff v2 vs %s %.3g > %g", m.name, i, ref, d, m.bar)
				}
				fm := m.margin
				if m.bar >= 5e-2 {
					fm = dsClassFlipMargin(want, m.bar)
				}
				if a, b := dsArgmax(v2[i]), dsArgmax(want); a != b && dsTop2Margin(want) > fm {
					t.Errorf("%s step %d: argmax %d with v2, %d with %s, at top-2 margin %.3g > %.3g", m.name, i, a, b, ref, dsTop2Margin(want), fm)
				}
			}
		}
		for i := range v2 {
			t.Logf("%s step %d: v2 vs plain %.3g", m.name, i, dsLogitDiff(v2[i], arms["plain"][i]))
		}
		dsBitwise(t, m.name+": graphs vs direct", v2, direct)
		t.Logf("%s: worst relative logit diff of v2 vs plain %.3g", m.name, worst)
	}
}

// TestAttnDecode2Launcher_RefusesBadCallsAndLaysScratchOutForEveryNT (no
// device): the launcher refuses nt > 8 and a short scratch before
// launching; for every shape the counters sit before the partials and the
// scratch of the shape serves every nt.
func TestAttnDecode2Launcher_RefusesBadCallsAndLaysScratchOutForEveryNT(t *testing.T) {
	k := &Kernels{}
	const p0 = driver.DevicePtr(0x1000)
	good := AttnParams{NT: 1, NHead: 14, NHeadKV: 2, HeadDim: 64, NCtx: 640}
	need, err := AttnDecode2ScratchBytes(good, kv.F16)
	if err != nil {
		t.Fatal(err)
	}
	nine := good
	nine.NT = 9
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"nine tokens", "at most 8", k.AttentionDecode2(nil, p0, p0, p0, p0, kv.F16, p0, p0, need, nine)},
		{"short scratch", "needs", k.AttentionDecode2(nil, p0, p0, p0, p0, kv.F16, p0, p0, need-1, good)},
		{"no scratch", "needs", k.AttentionDecode2(nil, p0, p0, p0, p0, kv.F16, p0, 0, need, good)},
		{"bad head_dim", "head_dim 130", k.AttentionDecode2(nil, p0, p0, p0, p0, kv.F16, p0, p0, need, AttnParams{NT: 1, NHead: 2, NHeadKV: 1, HeadDim: 130, NCtx: 64})},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || !strings.Contains(c.err.Error(), "attn_decode2") {
			t.Errorf("%s: error %v, want one naming attn_decode2 and %q", c.name, c.err, c.want)
		}
	}
	for _, f := range kv.Formats() {
		for _, hd := range []int{2, 64, 80, 128} {
			for _, nkv := range []int{1, 2, 4} {
				for _, g := range []int{1, 7, 8, 17} {
					for _, nCtx := range []int{8, 33, 640, 4160, 131072} {
						p := AttnParams{NT: 1, NHead: g * nkv, NHeadKV: nkv, HeadDim: hd, NCtx: nCtx}
						sb, err := AttnDecode2ScratchBytes(p, f)
						if f == kv.Q8_0 && (nkv*hd)%32 != 0 {
							if err == nil {
								t.Errorf("%+v q8_0: no refusal of a row that is not whole blocks", p)
							}
							continue
						}
						if err != nil {
							t.Fatalf("%+v %s: %v", p, f, err)
						}
						for nt := 1; nt <= min(AttnDecodeMaxNT, nCtx); nt++ {
							p.NT = nt
							geo := attnDecode2Geometry(p, f)
							if geo.nsplit < 1 || geo.nsplit > attnDecode2MaxSplits || geo.gridX != nt*g*nkv {
								t.Fatalf("%+v: grid %d x %d", p, geo.gridX, geo.nsplit)
							}
							if uint64(4*geo.gridX) > geo.mlOff || geo.bytes != uint64(sb) {
								t.Fatalf("%+v: %d counters before offset %d; %d bytes, the shape's scratch is %d", p, geo.gridX, geo.mlOff, geo.bytes, sb)
							}
							if !strings.HasPrefix(geo.name, "minfer_attn_decode2l_") || !strings.HasSuffix(geo.name, "_"+f.String()) {
								t.Fatalf("%+v %s: kernel %q", p, f, geo.name)
							}
						}
					}
				}
			}
		}
	}
}

// TestAttnDecode2Geometry_KernelNamesConstantsAndSplitRuleMatchTheSource (no
// device): every name the launcher can pick is an extern "C" kernel of
// attn_decode2.cu, the Go constants are the kernel's, attnDecode2SplitPlan
// is the rule the source states, and for every n_ctx and attended length
// n <= n_ctx the active splits fit the grid, cover the cells exactly once,
// take one split exactly up to attnDecode2SingleCells cells and otherwise
// at least attnDecode2SplitCells cells each (but the last).
func TestAttnDecode2Geometry_KernelNamesConstantsAndSplitRuleMatchTheSource(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kernels", "attn_decode2.cu"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for form, fam := range attnDecode2Names {
		params := "(MINFER_ADEC2_PARAMS) {"
		if form == 1 { // the Q8_1 output (MINFER_FUSE_ATTN_Q8): one argument more, no any class
			params = "(MINFER_ADEC2_PARAMS, uint8_t* q8) {"
		}
		for hd, a := range fam {
			for _, name := range a {
				if name == "" && form == 1 && hd == 2 {
					continue
				}
				if name == "" || !strings.Contains(src, " "+name+params) {
					t.Errorf("kernel %q (form %d) is not defined in attn_decode2.cu", name, form)
				}
			}
		}
	}
	for name, want := range map[string]int{
		"THREADS": attnDecode2Threads, "SPLIT": attnDecode2SplitCells, "SINGLE": attnDecode2SingleCells,
	} {
		if decl := fmt.Sprintf("constexpr int %s = %d;", name, want); !strings.Contains(src, decl) {
			t.Errorf("attn_decode2.cu does not declare %q (the Go launcher's value)", decl)
		}
	}
	// The combine takes MAXS partials; the launcher's cap must fit.
	if m := regexp.MustCompile(`constexpr int MAXS = (\d+);`).FindStringSubmatch(src); m == nil {
		t.Error("attn_decode2.cu does not declare MAXS, the splits its combine takes")
	} else if maxs, _ := strconv.Atoi(m[1]); maxs < attnDecode2MaxSplits {
		t.Errorf("the combine takes %d splits (MAXS), the launcher's cap is %d", maxs, attnDecode2MaxSplits)
	}
	const rule = "const int chunk = n <= SINGLE ? n : max((n + nsplit - 1) / nsplit, SPLIT);"
	if !strings.Contains(src, rule) || !strings.Contains(src, "const int nact = (n + chunk - 1) / chunk;") {
		t.Errorf("attn_decode2.cu no longer states the split rule attnDecode2SplitPlan mirrors: %q", rule)
	}
	for _, nCtx := range []int{1, 9, 32, 33, 64, 65, 100, 640, 700, 2048, 2049, 4160, 8192, 32768, 131072} {
		nsplit := attnDecode2Geometry(AttnParams{NT: 1, NHead: 14, NHeadKV: 2, HeadDim: 64, NCtx: nCtx}, kv.F32).nsplit
		step := max(1, nCtx/20000)
		for n := 1; n <= nCtx; n += step {
			chunk, nact := attnDecode2SplitPlan(n, nsplit)
			switch {
			case nact < 1 || nact > nsplit:
				t.Fatalf("n_ctx %d, n %d: %d active splits of a grid of %d", nCtx, n, nact, nsplit)
			case (nact-1)*chunk >= n || nact*chunk < n:
				t.Fatalf("n_ctx %d, n %d: %d splits of %d cells do not cover the cells exactly", nCtx, n, nact, chunk)
			case (nact == 1) != (n <= attnDecode2SingleCells):
				t.Fatalf("n_ctx %d, n %d: %d active splits; want one exactly up to %d cells", nCtx, n, nact, attnDecode2SingleCells)
			case nact > 1 && chunk < attnDecode2SplitCells:
				t.Fatalf("n_ctx %d, n %d: splits of %d cells, fewer than %d", nCtx, n, chunk, attnDecode2SplitCells)
			}
		}
	}
}

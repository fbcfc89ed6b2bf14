package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// tinySpec is the shape of a synthetic model written by writeTiny.
type tinySpec struct {
	arch                               string // qwen2 (biases) or qwen3 (q/k norms)
	nEmbd, nLayer, nHead, nHeadKV, nFF int
	headDim                            int // 0: nEmbd/nHead
	tied                               bool
	wtype                              quant.Type // type of the 2-D weights
	seed                               uint64
}

var (
	tinyQwen2 = tinySpec{arch: "qwen2", nEmbd: 64, nLayer: 2, nHead: 4, nHeadKV: 2, nFF: 96, tied: true, wtype: quant.F32, seed: 1}
	tinyQwen3 = tinySpec{arch: "qwen3", nEmbd: 64, nLayer: 2, nHead: 4, nHeadKV: 1, nFF: 128, headDim: 32, wtype: quant.F32, seed: 2}
)

// tinyVocab: the 256 byte tokens (GPT-2 byte alphabet) and two control tokens.
func tinyVocab() (tokens []string, types []int32) {
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
			r = rune(256 + n)
			n++
		}
		tokens = append(tokens, string(r))
		types = append(types, 1)
	}
	tokens = append(tokens, "<|endoftext|>", "<|im_end|>")
	types = append(types, 3, 3)
	return tokens, types
}

// writeTiny writes a random-weight model to dir and returns its path.
func writeTiny(t testing.TB, dir string, s tinySpec) string {
	t.Helper()
	r := rand.New(rand.NewPCG(s.seed, 7))
	tokens, types := tinyVocab()
	nVocab := len(tokens)
	hd := s.headDim
	w := gguf.NewWriter()
	a := s.arch + "."
	w.AddString("general.architecture", s.arch)
	w.AddUint32(a+"context_length", 256)
	w.AddUint32(a+"embedding_length", uint32(s.nEmbd))
	w.AddUint32(a+"block_count", uint32(s.nLayer))
	w.AddUint32(a+"feed_forward_length", uint32(s.nFF))
	w.AddUint32(a+"attention.head_count", uint32(s.nHead))
	w.AddUint32(a+"attention.head_count_kv", uint32(s.nHeadKV))
	if hd != 0 {
		w.AddUint32(a+"attention.key_length", uint32(hd))
		w.AddUint32(a+"attention.value_length", uint32(hd))
	} else {
		hd = s.nEmbd / s.nHead
	}
	w.AddFloat32(a+"rope.freq_base", 10000)
	w.AddFloat32(a+"attention.layer_norm_rms_epsilon", 1e-6)
	w.AddString("tokenizer.ggml.model", "gpt2")
	w.AddString("tokenizer.ggml.pre", "qwen2")
	w.AddStrings("tokenizer.ggml.tokens", tokens)
	w.AddInt32s("tokenizer.ggml.token_type", types)
	w.AddStrings("tokenizer.ggml.merges", nil)
	w.AddUint32("tokenizer.ggml.eos_token_id", uint32(nVocab-1))
	w.AddBool("tokenizer.ggml.add_bos_token", false)

	add := func(name string, dims ...int) {
		n := 1
		d := make([]uint64, len(dims))
		for i, x := range dims {
			n *= x
			d[i] = uint64(x)
		}
		vals := make([]float32, n)
		for i := range vals {
			if len(dims) == 1 {
				vals[i] = float32(1 + 0.2*r.NormFloat64())
			} else {
				vals[i] = float32(r.NormFloat64() / math.Sqrt(float64(dims[0])))
			}
		}
		typ := quant.F32
		var buf []byte
		if len(dims) == 2 && s.wtype != quant.F32 {
			typ = s.wtype
			nb, err := typ.RowBytes(n)
			if err != nil {
				t.Fatal(err)
			}
			buf = make([]byte, nb)
			if err := quant.Quantize(typ, vals, buf); err != nil {
				t.Fatal(err)
			}
		} else {
			buf = make([]byte, 4*n)
			for i, v := range vals {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			}
		}
		if err := w.AddTensor(name, typ, d, buf); err != nil {
			t.Fatal(err)
		}
	}
	nq, nkv := s.nHead*hd, s.nHeadKV*hd
	add("token_embd.weight", s.nEmbd, nVocab)
	for i := 0; i < s.nLayer; i++ {
		b := "blk." + strconv.Itoa(i) + "."
		add(b+"attn_norm.weight", s.nEmbd)
		add(b+"attn_q.weight", s.nEmbd, nq)
		add(b+"attn_k.weight", s.nEmbd, nkv)
		add(b+"attn_v.weight", s.nEmbd, nkv)
		if s.arch == "qwen2" {
			add(b+"attn_q.bias", nq)
			add(b+"attn_k.bias", nkv)
			add(b+"attn_v.bias", nkv)
		} else {
			add(b+"attn_q_norm.weight", hd)
			add(b+"attn_k_norm.weight", hd)
		}
		add(b+"attn_output.weight", nq, s.nEmbd)
		add(b+"ffn_norm.weight", s.nEmbd)
		add(b+"ffn_gate.weight", s.nEmbd, s.nFF)
		add(b+"ffn_up.weight", s.nEmbd, s.nFF)
		add(b+"ffn_down.weight", s.nFF, s.nEmbd)
	}
	add("output_norm.weight", s.nEmbd)
	if !s.tied {
		add("output.weight", s.nEmbd, nVocab)
	}
	path := filepath.Join(dir, s.arch+"-"+s.wtype.String()+".gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadTiny(t testing.TB, s tinySpec, lv levers.Config) *Engine {
	t.Helper()
	e, err := Load(writeTiny(t, t.TempDir(), s), Options{Device: "cpu", Threads: 2, Levers: lv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func mustEnv(t testing.TB, env ...string) levers.Config {
	t.Helper()
	c, err := levers.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func maxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func allFinite(t *testing.T, x []float32) {
	t.Helper()
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
}

var prompt = []int32{'d', 'e', 'f', ' ', 'f', 'i', 'b'}

// The tiny models of every flavour run end to end and give finite logits.
func TestTinyModels_RunEndToEndWithFiniteLogits(t *testing.T) {
	for _, s := range []tinySpec{tinyQwen2, tinyQwen3, withType(tinyQwen2, quant.Q8_0), withType(tinyQwen3, quant.Q4_K)} {
		t.Run(s.arch+"-"+s.wtype.String(), func(t *testing.T) {
			if s.wtype == quant.Q4_K {
				s.nEmbd, s.nFF = 256, 256
				s.headDim = 64
			}
			e := loadTiny(t, s, levers.Default())
			logits, err := e.Forward(prompt, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(logits) != len(prompt)*e.HParams().NVocab {
				t.Fatalf("%d logits", len(logits))
			}
			allFinite(t, logits)
			if e.Pos() != len(prompt) {
				t.Fatalf("pos %d", e.Pos())
			}
			next, err := e.Forward([]int32{int32(argmax(logits[len(logits)-e.HParams().NVocab:]))}, false)
			if err != nil {
				t.Fatal(err)
			}
			allFinite(t, next)
		})
	}
}

func withType(s tinySpec, typ quant.Type) tinySpec { s.wtype = typ; return s }

// Prefill of nt tokens equals nt decodes of one token: every matmul row,
// norm and attention of a token is computed the same way whatever the batch,
// so the CPU result is bitwise equal (the bar asserted is 1e-5).
func TestForward_PrefillEqualsStepwiseDecodeWithin1e5(t *testing.T) {
	for _, s := range []tinySpec{tinyQwen2, tinyQwen3, withType(tinyQwen2, quant.Q8_0)} {
		t.Run(s.arch+"-"+s.wtype.String(), func(t *testing.T) {
			e := loadTiny(t, s, levers.Default())
			nv := e.HParams().NVocab
			toks := []int32{10, 200, 33}
			all, err := e.Forward(toks, true)
			if err != nil {
				t.Fatal(err)
			}
			e.Reset()
			bitwise := true
			for i, tok := range toks {
				one, err := e.Forward([]int32{tok}, false)
				if err != nil {
					t.Fatal(err)
				}
				ref := all[i*nv : (i+1)*nv]
				if d := maxAbsDiff(one, ref); d > 1e-5 {
					t.Fatalf("token %d: max |diff| %g > 1e-5", i, d)
				}
				for j := range one {
					bitwise = bitwise && math.Float32bits(one[j]) == math.Float32bits(ref[j])
				}
			}
			t.Logf("nt=3 vs 3 x nt=1 bitwise equal: %v", bitwise)
			if !bitwise {
				t.Errorf("expected bitwise equality on the CPU")
			}
		})
	}
}

// Fused and unfused graphs give bitwise identical logits on the CPU.
func TestFusedEqualsUnfused_Bitwise(t *testing.T) {
	for _, s := range []tinySpec{tinyQwen2, tinyQwen3} {
		t.Run(s.arch, func(t *testing.T) {
			fused := loadTiny(t, s, levers.Default())
			unfused := loadTiny(t, s, mustEnv(t, "MINFER_NO_FUSE_QKV=1", "MINFER_NO_FUSE_FFN=1"))
			for _, nt := range []int{1, 4} {
				pf, err := fused.Plan(nt, false)
				if err != nil {
					t.Fatal(err)
				}
				pu, err := unfused.Plan(nt, false)
				if err != nil {
					t.Fatal(err)
				}
				nl := fused.HParams().NLayer
				for _, op := range []graph.Op{graph.OpFusedFFN, graph.OpFusedQKV, graph.OpQkvBiasRopeStore} {
					want := nl
					if op == graph.OpQkvBiasRopeStore && s.arch == "qwen3" {
						want = 0 // q/k norms sit between the projections and rope
					}
					if got := pf.G.Count(op); got != want {
						t.Errorf("nt=%d: fused graph has %d %s, want %d", nt, got, op, want)
					}
					if got := pu.G.Count(op); got != 0 {
						t.Errorf("nt=%d: unfused graph has %d %s", nt, got, op)
					}
				}
			}
			sameLogits(t, fused, unfused)
		})
	}
}

// sameLogits runs a prefill and two decode steps on both engines and wants
// bitwise equal logits.
func sameLogits(t *testing.T, fused, unfused *Engine) {
	t.Helper()
	for _, toks := range [][]int32{{5, 6, 7, 8}, {9}, {100}} {
		a, err := fused.Forward(toks, true)
		if err != nil {
			t.Fatal(err)
		}
		b, err := unfused.Forward(toks, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("logit %d: fused %v unfused %v", i, a[i], b[i])
			}
		}
	}
}

// TestTruncate_ThenForwardEqualsTheUntruncatedRunBitwise: prompt, garbage,
// Truncate back to the prompt, continuation: the logits are bitwise those
// of prompt + continuation without the detour (the garbage cells are never
// read); a cut beyond the context or below 0 is an error that changes
// nothing.
func TestTruncate_ThenForwardEqualsTheUntruncatedRunBitwise(t *testing.T) {
	for _, s := range []tinySpec{tinyQwen2, tinyQwen3} {
		t.Run(s.arch, func(t *testing.T) {
			e := loadTiny(t, s, levers.Default())
			prompt, next := []int32{10, 200, 33, 7, 99}, []int32{42, 5}
			if _, err := e.Forward(prompt, false); err != nil {
				t.Fatal(err)
			}
			want, err := e.Forward(next, false)
			if err != nil {
				t.Fatal(err)
			}
			e.Reset()
			if _, err := e.Forward(prompt, false); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Forward([]int32{1, 2, 3, 4, 6, 8}, false); err != nil {
				t.Fatal(err)
			}
			for _, bad := range []int{-1, e.Pos() + 1} {
				if err := e.Truncate(bad); err == nil || e.Pos() != len(prompt)+6 {
					t.Errorf("Truncate(%d): err %v, pos %d", bad, err, e.Pos())
				}
			}
			if err := e.Truncate(len(prompt)); err != nil || e.Pos() != len(prompt) {
				t.Fatalf("Truncate(%d): err %v, pos %d", len(prompt), err, e.Pos())
			}
			got, err := e.Forward(next, false)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("logit %d: %g after the truncated detour, %g without it", i, got[i], want[i])
				}
			}
		})
	}
}

func TestForward_BadInputIsAnErrorAndChangesNothing(t *testing.T) {
	e := loadTiny(t, tinyQwen2, levers.Default())
	if _, err := e.Forward(nil, false); err == nil {
		t.Error("empty forward: no error")
	}
	if _, err := e.Forward([]int32{-1}, false); err == nil {
		t.Error("negative id: no error")
	}
	if _, err := e.Forward([]int32{int32(e.HParams().NVocab)}, false); err == nil {
		t.Error("id = n_vocab: no error")
	}
	long := make([]int32, e.NCtx()+1)
	if _, err := e.Forward(long, false); err == nil || !strings.Contains(err.Error(), "context") {
		t.Errorf("over-long forward: %v", err)
	}
	if e.Pos() != 0 {
		t.Errorf("pos %d after failed forwards", e.Pos())
	}
	if _, err := Load("x.gguf", Options{Device: "cuda"}); err == nil || !strings.Contains(err.Error(), "no CUDA backend in this build") {
		t.Errorf("cuda device: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.gguf"), Options{}); err == nil {
		t.Error("missing file: no error")
	}
}

func TestKVFormats_RunAndStayClose(t *testing.T) {
	ref := loadTiny(t, tinyQwen2, levers.Default())
	want, err := ref.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{"f16", "q8_0"} {
		e := loadTiny(t, tinyQwen2, mustEnv(t, "MINFER_CACHE_TYPE="+ct))
		if e.KVFormat() == ref.KVFormat() {
			t.Fatalf("%s: format %s", ct, e.KVFormat())
		}
		got, err := e.Forward(prompt, false)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxAbsDiff(got, want); d > 0.5 {
			t.Errorf("%s: max |diff| %g > 0.5", ct, d)
		}
	}
}

// skip_bias drops the q bias: the logits change.
func TestMutateSkipBias_ChangesLogits(t *testing.T) {
	a, err := loadTiny(t, tinyQwen2, levers.Default()).Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadTiny(t, tinyQwen2, mustEnv(t, "MINFER_TEST_MUTATE=skip_bias")).Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(a, b); d == 0 {
		t.Fatal("skip_bias left the logits unchanged")
	}
}

// perturb_logit makes the runner-up the greedy pick.
func TestMutatePerturbLogit_FlipsGreedy(t *testing.T) {
	a, err := loadTiny(t, tinyQwen2, levers.Default()).Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadTiny(t, tinyQwen2, mustEnv(t, "MINFER_TEST_MUTATE=perturb_logit")).Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	if argmax(a) == argmax(b) {
		t.Fatalf("greedy token %d unchanged", argmax(a))
	}
}

// slowSpec is a model big enough that a forward takes milliseconds, so the
// few instructions of Forward outside the seam's own clock are noise.
var slowSpec = tinySpec{arch: "qwen2", nEmbd: 256, nLayer: 4, nHead: 4, nHeadKV: 2, nFF: 704, tied: true, wtype: quant.F16, seed: 3}

// seamRun is what the slow_* seams did over a run of forwards: the wait the
// seam computed per forward (nothing when it did not act) and each forward's
// wall time measured around the call, the recorded wait not slept.
type seamRun struct {
	waits  []time.Duration
	walls  []time.Duration
	nts    []int
	waited []bool
}

// seamForwards runs the forwards (sizes in tokens) from an empty context on
// e with the seam's wait recorded instead of slept.
func seamForwards(t *testing.T, e *Engine, sizes ...int) seamRun {
	t.Helper()
	var r seamRun
	var got []time.Duration
	e.sleep = func(d time.Duration) { got = append(got, d) }
	e.Reset()
	for i, nt := range sizes {
		toks := make([]int32, nt)
		for j := range toks {
			toks[j] = int32(10 + i + j)
		}
		n := len(got)
		t0 := time.Now()
		if _, err := e.Forward(toks, false); err != nil {
			t.Fatal(err)
		}
		r.walls = append(r.walls, time.Since(t0))
		r.nts = append(r.nts, nt)
		r.waited = append(r.waited, len(got) > n)
		var w time.Duration
		if len(got) > n {
			w = got[n]
		}
		r.waits = append(r.waits, w)
	}
	return r
}

// checkSeam holds the seam to its definition on the CPU: every forward for
// which acts(nt) waits frac x its own wall time, no other forward waits.
// The wait can never exceed frac x the wall time measured around the call
// (the seam's clock runs inside it); its lower bar, 0.8 x that over all the
// acting forwards together, is what "F = 1 makes the forward at least 1.8x
// slower" means, and the seam's clock misses only the call's return.
func checkSeam(t *testing.T, r seamRun, frac float64, acts func(nt int) bool) {
	t.Helper()
	var wait, wall time.Duration
	for i, nt := range r.nts {
		if r.waited[i] != acts(nt) {
			t.Fatalf("forward %d (nt=%d): seam waited %v, want it to act %v", i, nt, r.waited[i], acts(nt))
		}
		if !r.waited[i] {
			continue
		}
		if hi := time.Duration(frac * float64(r.walls[i])); r.waits[i] <= 0 || r.waits[i] > hi {
			t.Errorf("forward %d (nt=%d): waits %v, want in (0, %v] (%g x its wall %v)", i, nt, r.waits[i], hi, frac, r.walls[i])
		}
		wait += r.waits[i]
		wall += r.walls[i]
	}
	if lo := time.Duration(0.8 * frac * float64(wall)); wait < lo {
		t.Errorf("the acting forwards wait %v in all, want at least %v (0.8 x %g x their wall %v)", wait, lo, frac, wall)
	}
}

// slow_decode=F: every one-token forward waits F x its own wall time (F = 1:
// twice as slow, at least 1.8x), a prefill never waits.
func TestMutateSlowDecode_DecodeWaitsFTimesItsOwnWallTimePrefillNothing(t *testing.T) {
	sizes := []int{7, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1}
	decode := func(nt int) bool { return nt == 1 }
	for _, c := range []struct {
		env  string
		frac float64
	}{{"slow_decode", 1}, {"slow_decode=1", 1}, {"slow_decode=0.03", 0.03}, {"slow_decode=2.5", 2.5}} {
		t.Run(c.env, func(t *testing.T) {
			e := loadTiny(t, slowSpec, mustEnv(t, "MINFER_TEST_MUTATE="+c.env))
			checkSeam(t, seamForwards(t, e, sizes...), c.frac, decode)
		})
	}
	if r := seamForwards(t, loadTiny(t, slowSpec, levers.Default()), sizes...); slices.Contains(r.waited, true) {
		t.Fatalf("unmutated engine waited: %v", r.waits)
	}
}

// slow_prefill=F: every forward of nt > 1 tokens waits F x its own wall
// time, decode never waits.
func TestMutateSlowPrefill_PrefillWaitsFTimesItsOwnWallTimeDecodeNothing(t *testing.T) {
	sizes := []int{7, 1, 1, 1, 16, 1, 2}
	for _, c := range []struct {
		env  string
		frac float64
	}{{"slow_prefill", 1}, {"slow_prefill=0.5", 0.5}} {
		t.Run(c.env, func(t *testing.T) {
			e := loadTiny(t, slowSpec, mustEnv(t, "MINFER_TEST_MUTATE="+c.env))
			checkSeam(t, seamForwards(t, e, sizes...), c.frac, func(nt int) bool { return nt > 1 })
		})
	}
}

// clockDevice is a device backend that times its work with a fake clock:
// each split boundary (Synchronize) adds one split of device time; Delay
// records the wait and adds it, as the CUDA backend's spin does.
type clockDevice struct {
	*cpu.Backend
	split    time.Duration
	overhead time.Duration // device time a delay costs beyond what it asks
	now      time.Duration
	delays   []time.Duration
}

func (d *clockDevice) Name() string { return "clockdev" }

func (d *clockDevice) Synchronize() error {
	d.now += d.split
	return d.Backend.Synchronize()
}

func (d *clockDevice) DeviceTime() time.Duration { return d.now }

func (d *clockDevice) Delay(w time.Duration) error {
	d.delays = append(d.delays, w)
	d.now += w + d.overhead
	return nil
}

var _ DeviceClock = (*clockDevice)(nil)

// On a device that times its work the seam waits on the device, F x the
// forward's device time (counted in the device time, so it grows by F),
// and never sleeps on the host.
func TestMutateSlowDecode_OnADeviceClockDelaysFTimesTheForwardsDeviceTime(t *testing.T) {
	dev := &clockDevice{Backend: cpu.New(cpu.Options{Threads: 1}), split: 4 * time.Millisecond}
	lv := mustEnv(t, "MINFER_TEST_MUTATE=slow_decode=0.25")
	e, err := Load(writeTiny(t, t.TempDir(), tinyQwen2), Options{Levers: lv,
		NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) { return dev, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Backend() != "clockdev" {
		t.Fatalf("engine runs on %s", e.Backend())
	}
	e.sleep = func(d time.Duration) { t.Fatalf("the seam slept %v on the host", d) }
	if _, err := e.Forward(prompt, false); err != nil {
		t.Fatal(err)
	}
	if len(dev.delays) != 0 {
		t.Fatalf("a prefill was delayed: %v", dev.delays)
	}
	splits := len(mustPlan(t, e, 1).Splits)
	for i := range 3 {
		before := dev.now
		if _, err := e.Forward([]int32{int32(40 + i)}, false); err != nil {
			t.Fatal(err)
		}
		own := time.Duration(splits) * dev.split
		if want := own / 4; len(dev.delays) != i+1 || dev.delays[i] != want {
			t.Fatalf("decode %d: delays %v, want the last %v (0.25 x %v of device time)", i, dev.delays, want, own)
		}
		if got, want := dev.now-before, own+own/4; got != want {
			t.Fatalf("decode %d: device time grew by %v, want %v (its own and the delay)", i, got, want)
		}
	}
}

// A delay that costs more than it asks (the spin's launch and events: ~15
// us a token on the H200, which made slow_decode=0.03 a 4.6% slowdown
// there) is paid back from the next ones: over many tokens the device time
// grows by F, within one delay's overhead.
func TestMutateSlowDecode_DelayOverheadIsCompensatedOverTheRun(t *testing.T) {
	dev := &clockDevice{Backend: cpu.New(cpu.Options{Threads: 1}), split: 100 * time.Microsecond, overhead: 15 * time.Microsecond}
	lv := mustEnv(t, "MINFER_TEST_MUTATE=slow_decode=0.03")
	e, err := Load(writeTiny(t, t.TempDir(), tinyQwen2), Options{Levers: lv,
		NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) { return dev, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Forward(prompt, false); err != nil {
		t.Fatal(err)
	}
	splits := time.Duration(len(mustPlan(t, e, 1).Splits))
	before := dev.now
	const n = 100
	for i := range n {
		if _, err := e.Forward([]int32{int32(40 + i%8)}, false); err != nil {
			t.Fatal(err)
		}
	}
	own := n * splits * dev.split
	extra := dev.now - before - own
	if want := own * 3 / 100; extra < want || extra > want+dev.overhead {
		t.Fatalf("the seam added %v over %d decodes of %v, want 3%% (%v) within one overhead (%v)", extra, n, own, want, dev.overhead)
	}
}

func mustPlan(t *testing.T, e *Engine, nt int) *graph.Plan {
	t.Helper()
	pl, err := e.Plan(nt, false)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// cpuCensus runs a prefill and two decode steps with the census on and
// returns the CPU backend's counts.
func cpuCensus(t *testing.T, s tinySpec, env ...string) map[string]int64 {
	t.Helper()
	e := loadTiny(t, s, mustEnv(t, append([]string{"MINFER_LAUNCH_CENSUS=1"}, env...)...))
	for _, toks := range [][]int32{prompt, {1}, {2}} {
		if _, err := e.Forward(toks, false); err != nil {
			t.Fatal(err)
		}
	}
	c := e.Backends()[0].(*cpu.Backend).Census()
	if c == nil {
		t.Fatal("census on, but the CPU backend counted nothing")
	}
	return c
}

// matches counts the executions whose name matches the glob.
func matches(t *testing.T, c map[string]int64, glob string) int64 {
	t.Helper()
	var n int64
	for name, k := range c {
		ok, err := path.Match(glob, name)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			n += k
		}
	}
	return n
}

// The CPU census carries the liveness evidence the registry's CPU rules
// read: with a lever at its On value the arm runs at least one name of
// each of the rule's patterns, at the other value none.
func TestCPUCensus_RegistryLivenessRulesSeparateTheArms(t *testing.T) {
	for _, c := range []struct {
		lever, off string
	}{{"MINFER_NO_FUSE_FFN", "1"}, {"MINFER_NO_FUSE_QKV", "1"}, {"MINFER_CACHE_TYPE", "f32"}} {
		l, ok := levers.Lookup(c.lever)
		if !ok || l.Liveness == nil || l.Liveness.CPU == nil || len(l.Liveness.CPU.Census) == 0 {
			t.Fatalf("%s: no CPU liveness rule in the registry", c.lever)
		}
		for _, s := range []tinySpec{tinyQwen2, withType(tinyQwen3, quant.Q8_0)} {
			on := cpuCensus(t, s, c.lever+"="+l.Liveness.On)
			off := cpuCensus(t, s, c.lever+"="+c.off)
			for _, glob := range l.Liveness.CPU.Census {
				if matches(t, on, glob) == 0 || matches(t, off, glob) != 0 {
					t.Errorf("%s %s: %s=%s counts %d of %s, %s=%s counts %d; want some and none",
						s.arch, s.wtype, c.lever, l.Liveness.On, matches(t, on, glob), glob, c.lever, c.off, matches(t, off, glob))
				}
			}
		}
	}
	// The counts are per node: the decode steps of qwen2-tiny (2 layers)
	// with everything fused run one fused FFN per layer per forward.
	c := cpuCensus(t, tinyQwen2)
	if got := c["cpu_fused_ffn_f32"]; got != 3*2 {
		t.Errorf("cpu_fused_ffn_f32 = %d, want 6 (3 forwards x 2 layers); census %v", got, c)
	}
	if got := c["cpu_kv_store_f32"]; got != 3*2*2 {
		t.Errorf("cpu_kv_store_f32 = %d, want 12 (3 forwards x 2 layers x K and V); census %v", got, c)
	}
	if e := loadTiny(t, tinyQwen2, levers.Default()); e.Backends()[0].(*cpu.Backend).Census() != nil {
		t.Error("census off: the CPU backend counts")
	}
}

const realModel = "../../../shared/models/tiny-code-f16.gguf"

// The real tiny-code model gives finite logits and continues a Python
// function header with plausible text (greedy).
func TestRealModel_GreedyContinuesFibonacci(t *testing.T) {
	if _, err := os.Stat(realModel); err != nil {
		t.Skipf("real model absent (%s): %v", realModel, err)
	}
	e, err := Load(realModel, Options{Device: "cpu", NCtx: 256, Levers: levers.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tok := e.Tokenizer()
	ids := tok.Encode("def fibonacci(n):", false)
	logits, err := e.Forward(ids, false)
	if err != nil {
		t.Fatal(err)
	}
	allFinite(t, logits)
	var out []int32
	start := time.Now()
	for i := 0; i < 24; i++ {
		next := int32(argmax(logits))
		out = append(out, next)
		if logits, err = e.Forward([]int32{next}, false); err != nil {
			t.Fatal(err)
		}
		allFinite(t, logits)
	}
	el := time.Since(start)
	text := tok.Decode(out)
	t.Logf("def fibonacci(n):%s", text)
	t.Logf("%d decode steps in %v (%.1f tok/s)", len(out), el, float64(len(out))/el.Seconds())
	if strings.TrimSpace(text) == "" {
		t.Fatal("empty continuation")
	}

	// The model card's example: the trained continuation is known.
	e.Reset()
	ids = tok.Encode("class Config:\n    def __init__(self", false)
	out = out[:0]
	for logits, err = e.Forward(ids, false); len(out) < 14; logits, err = e.Forward(out[len(out)-1:], false) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int32(argmax(logits)))
	}
	text = tok.Decode(out)
	t.Logf("class Config:\n    def __init__(self%s", text)
	if !strings.HasPrefix(text, ", name: str, value: Any)") {
		t.Fatalf("continuation %q, want the model card's \", name: str, value: Any) ...\"", text)
	}
}

// BenchmarkDecode times one-token forwards of a synthetic F16 model of
// tiny-code's layer shape (hidden 256, 4 layers, 4/2 heads, FFN 704).
func BenchmarkDecode(b *testing.B) {
	s := tinySpec{arch: "qwen2", nEmbd: 256, nLayer: 4, nHead: 4, nHeadKV: 2, nFF: 704, tied: true, wtype: quant.F16, seed: 3}
	e, err := Load(writeTiny(b, b.TempDir(), s), Options{Device: "cpu", Levers: levers.Default()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Forward(prompt, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if e.Pos() >= e.NCtx()-1 {
			e.Reset()
		}
		if _, err := e.Forward([]int32{42}, false); err != nil {
			b.Fatal(err)
		}
	}
}

// offersAll is a CPU backend that offers every fusion, so the CPU executes
// each fused kind it keeps out of its own graphs (the residual MatMulAdd,
// qwen3's q/k-norm QKV tail): the reference a device's fused kernels are
// held to.
type offersAll struct{ *cpu.Backend }

func (offersAll) Name() string { return "cpu-fuses-all" }

// SupportsFused offers every kind the CPU can execute: not the two whose
// node hands a Q8_1 row to the next, nor the decode q/k/v matvec with the
// rope/store folded in (no CPU op has those forms; their bytes are held by
// the kernel emulators and the device tests).
func (offersAll) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return k != graph.FuseNormQ8 && k != graph.FuseAttnQ8 && k != graph.FuseQKVRopeStore
}

// TestFusedEqualsUnfused_EveryFusedKindOnTheCPUReference: with every fusion
// offered and every fusion param on, the CPU runs one MatMulAdd per
// residual add, the fused QKV and FFN, and (qwen3) the q/k-norm QKV tail,
// and its logits are bitwise those of the fully unfused graph, at decode
// and prefill.
func TestFusedEqualsUnfused_EveryFusedKindOnTheCPUReference(t *testing.T) {
	for _, s := range []tinySpec{tinyQwen2, tinyQwen3} {
		t.Run(s.arch, func(t *testing.T) {
			fused, err := Load(writeTiny(t, t.TempDir(), s), Options{Device: "cuda", Threads: 2, Levers: levers.Default(),
				NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) {
					return offersAll{cpu.New(cpu.Options{Threads: 2})}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fused.Close() })
			unfused := loadTiny(t, s, mustEnv(t, "MINFER_NO_FUSE_QKV=1", "MINFER_NO_FUSE_FFN=1", "MINFER_FUSE_RESIDUAL=0", "MINFER_FUSE_QKNORM=0"))
			nl := fused.HParams().NLayer
			for _, nt := range []int{1, 4} {
				p, err := fused.Plan(nt, false)
				if err != nil {
					t.Fatal(err)
				}
				for op, want := range map[graph.Op]int{graph.OpMatMulAdd: 2 * nl, graph.OpAdd: 0, graph.OpFusedQKV: nl,
					graph.OpFusedFFN: nl, graph.OpQkvBiasRopeStore: nl, graph.OpQkNorm: 0} {
					if got := p.G.Count(op); got != want {
						t.Errorf("nt=%d: fused graph has %d %s, want %d", nt, got, op, want)
					}
				}
			}
			sameLogits(t, fused, unfused)
		})
	}
}

// TestGraphParams_FusionLeversAndTheirDeclaredRequirement: the fusion
// levers reach graph.Params, and MINFER_FUSE_QKNORM is on only while the
// registry's requirement (MINFER_NO_FUSE_QKV=0) holds.
func TestGraphParams_FusionLeversAndTheirDeclaredRequirement(t *testing.T) {
	h := HParams{Arch: Qwen3, NVocab: 8, NEmbd: 8, NLayer: 1, NHead: 2, NHeadKV: 1, HeadDim: 4, NFF: 8, QKNorm: true}
	for _, c := range []struct {
		env             []string
		qkv, qkn, resid bool
	}{
		{nil, true, true, true},
		{[]string{"MINFER_FUSE_QKNORM=0"}, true, false, true},
		{[]string{"MINFER_NO_FUSE_QKV=1"}, false, false, true},
		{[]string{"MINFER_FUSE_RESIDUAL=0"}, true, true, false},
	} {
		p := GraphParams(h, 1, 8, false, kv.F32, mustEnv(t, c.env...))
		if p.FuseQKV != c.qkv || p.FuseQKNorm != c.qkn || p.FuseResidual != c.resid {
			t.Errorf("%v: FuseQKV %v FuseQKNorm %v FuseResidual %v, want %v %v %v", c.env, p.FuseQKV, p.FuseQKNorm, p.FuseResidual, c.qkv, c.qkn, c.resid)
		}
	}
}

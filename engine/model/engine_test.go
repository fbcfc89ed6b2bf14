package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
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
		})
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

// sleeps records what the slow_* seams ask to wait, per forward.
func sleeps(t *testing.T, e *Engine, toks ...[]int32) []time.Duration {
	t.Helper()
	var got []time.Duration
	e.sleep = func(d time.Duration) { got = append(got, d) }
	for _, x := range toks {
		e.Reset()
		if _, err := e.Forward(x, false); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// slow_decode adds 2 ms to a one-token forward, and nothing to a prefill.
func TestMutateSlowDecode_AddsTwoMillisecondsToDecodeOnly(t *testing.T) {
	e := loadTiny(t, tinyQwen2, mustEnv(t, "MINFER_TEST_MUTATE=slow_decode"))
	if got := sleeps(t, e, []int32{1}, make([]int32, 8)); !slices.Equal(got, []time.Duration{2 * time.Millisecond}) {
		t.Fatalf("slow_decode waits %v, want [2ms] (decode only)", got)
	}
	if got := sleeps(t, loadTiny(t, tinyQwen2, levers.Default()), []int32{1}); len(got) != 0 {
		t.Fatalf("unmutated engine waits %v", got)
	}
}

// slow_prefill adds nt ms to a prefill of nt tokens, and nothing to decode.
func TestMutateSlowPrefill_AddsNTMillisecondsToPrefillOnly(t *testing.T) {
	e := loadTiny(t, tinyQwen2, mustEnv(t, "MINFER_TEST_MUTATE=slow_prefill"))
	if got := sleeps(t, e, make([]int32, 8), []int32{1}); !slices.Equal(got, []time.Duration{8 * time.Millisecond}) {
		t.Fatalf("slow_prefill waits %v, want [8ms] (prefill only)", got)
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

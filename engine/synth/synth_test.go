package synth

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
)

func writeAndOpen(t *testing.T, opts Options) (*gguf.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), opts.Shape+".gguf")
	if err := Write(path, opts); err != nil {
		t.Fatalf("Write(%+v): %v", opts, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func TestTinyShapes_RoundTripHParamsAndTensorTable(t *testing.T) {
	for _, name := range []string{"qwen2-tiny", "qwen3-tiny"} {
		for _, typ := range []string{"F32", "F16", "Q8_0", "Q4_K_M"} {
			t.Run(name+"/"+typ, func(t *testing.T) {
				qt, mix, err := ParseType(typ)
				if err != nil {
					t.Fatal(err)
				}
				sh, _ := ShapeByName(name)
				f, _ := writeAndOpen(t, Options{Shape: name, Type: qt, Mix: mix, Seed: 7})
				hp, err := model.ReadHParams(f)
				if err != nil {
					t.Fatalf("ReadHParams: %v", err)
				}
				if want := sh.HParams(); hp != want {
					t.Fatalf("hparams\n got %+v\nwant %+v", hp, want)
				}
				p, err := newPlan(Options{Shape: name, Type: qt, Mix: mix})
				if err != nil {
					t.Fatal(err)
				}
				if len(f.Tensors) != len(p.tensors) {
					t.Fatalf("%d tensors, want %d", len(f.Tensors), len(p.tensors))
				}
				for i, ti := range f.Tensors {
					want := p.tensors[i]
					if ti.Name != want.name || !slices.Equal(ti.Dims, want.dims) || ti.Type != want.typ {
						t.Errorf("tensor %d: %s %v %s, want %s %v %s", i, ti.Name, ti.Dims, ti.Type, want.name, want.dims, want.typ)
					}
					if len(ti.Dims) == 1 && ti.Type != quant.F32 {
						t.Errorf("1-D tensor %s is %s", ti.Name, ti.Type)
					}
				}
			})
		}
	}
}

func TestBigShapes_PlanMatchesArchitectureTable(t *testing.T) {
	want := map[string]model.HParams{
		"qwen2-0.5b": {Arch: "qwen2", Name: "qwen2-0.5b", NVocab: 151936, NCtxTrain: 32768, NEmbd: 896, NLayer: 24, NHead: 14, NHeadKV: 2, HeadDim: 64, NFF: 4864,
			RopeTheta: 1e6, RmsEps: 1e-6, RopeNeox: true, QKVBias: true, TiedOutput: true},
		"qwen3-0.6b": {Arch: "qwen3", Name: "qwen3-0.6b", NVocab: 151936, NCtxTrain: 40960, NEmbd: 1024, NLayer: 28, NHead: 16, NHeadKV: 8, HeadDim: 128, NFF: 3072,
			RopeTheta: 1e6, RmsEps: 1e-6, RopeNeox: true, QKNorm: true, TiedOutput: true},
		"qwen2-7b": {Arch: "qwen2", Name: "qwen2-7b", NVocab: 152064, NCtxTrain: 32768, NEmbd: 3584, NLayer: 28, NHead: 28, NHeadKV: 4, HeadDim: 128, NFF: 18944,
			RopeTheta: 1e6, RmsEps: 1e-6, RopeNeox: true, QKVBias: true},
	}
	for name, hp := range want {
		sh, err := ShapeByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := sh.HParams(); got != hp {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, hp)
		}
		p, err := newPlan(Options{Shape: name, Mix: "Q4_K_M"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		specs := hp.Tensors()
		if len(p.tensors) != len(specs) {
			t.Fatalf("%s: %d tensors, want %d", name, len(p.tensors), len(specs))
		}
		byName := map[string]tensor{}
		for _, tt := range p.tensors {
			byName[tt.name] = tt
		}
		for _, s := range specs {
			tt, ok := byName[s.Name]
			if !ok || !slices.Equal(tt.dims, s.Dims) {
				t.Errorf("%s: tensor %s: got %v, want %v", name, s.Name, tt.dims, s.Dims)
			}
		}
		// the converter's vocabulary padding
		var toks []string
		for _, kv := range p.kvs {
			if kv.Key == "tokenizer.ggml.tokens" {
				toks, _ = kv.Value.AsStrings()
			}
		}
		if len(toks) != hp.NVocab {
			t.Errorf("%s: %d tokens, want %d", name, len(toks), hp.NVocab)
		}
	}
	// qwen2-0.5b rows of 896 are not a multiple of 256: Q4_K falls back.
	p, _ := newPlan(Options{Shape: "qwen2-0.5b", Mix: "Q4_K_M"})
	for _, tt := range p.tensors {
		switch tt.name {
		case "blk.0.attn_q.weight":
			if tt.typ != quant.Q5_0 {
				t.Errorf("qwen2-0.5b Q4_K_M attn_q: %s, want Q5_0", tt.typ)
			}
		case "token_embd.weight":
			if tt.typ != quant.Q8_0 {
				t.Errorf("qwen2-0.5b Q4_K_M token_embd: %s, want Q8_0", tt.typ)
			}
		}
	}
}

func fileHash(t *testing.T, opts Options) [32]byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Write(path, opts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestWrite_SameSeedIdenticalBytesDifferentSeedDiffers(t *testing.T) {
	for _, mix := range []string{"", "Q4_K_M"} {
		a := fileHash(t, Options{Shape: "qwen3-tiny", Type: quant.F16, Mix: mix, Seed: 3, Workers: 1})
		b := fileHash(t, Options{Shape: "qwen3-tiny", Type: quant.F16, Mix: mix, Seed: 3, Workers: 4})
		c := fileHash(t, Options{Shape: "qwen3-tiny", Type: quant.F16, Mix: mix, Seed: 4})
		if a != b {
			t.Errorf("mix %q: same seed, different bytes (worker count changed the output)", mix)
		}
		if a == c {
			t.Errorf("mix %q: seeds 3 and 4 gave identical files", mix)
		}
	}
}

func TestByteVocab_LayoutAndSpecials(t *testing.T) {
	v, err := ByteVocab(tinyVocab)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != tinyVocab || len(v.Types) != tinyVocab {
		t.Fatalf("%d tokens / %d types, want %d", len(v.Tokens), len(v.Types), tinyVocab)
	}
	if v.Tokens[0] != "!" || v.Tokens[188] != "Ā" {
		t.Errorf("byte tokens not in GPT-2 order: %q %q", v.Tokens[0], v.Tokens[188])
	}
	seen := map[string]bool{}
	for i, tok := range v.Tokens {
		if seen[tok] {
			t.Errorf("duplicate token %q at %d", tok, i)
		}
		seen[tok] = true
	}
	for _, m := range v.Merges {
		a, b, _ := cut(m)
		if !seen[a] || !seen[b] || !seen[a+b] {
			t.Errorf("merge %q refers to a missing token", m)
		}
	}
	for _, s := range specialTokens {
		id, ok := v.Special[s]
		if !ok || v.Tokens[id] != s || v.Types[id] != TokenControl {
			t.Errorf("special %s: id %d ok %v", s, id, ok)
		}
	}
	if _, err := ByteVocab(100); err == nil {
		t.Error("ByteVocab(100) accepted a vocabulary too small for the byte tokens")
	}
}

func cut(m string) (string, string, bool) {
	for i := 0; i < len(m); i++ {
		if m[i] == ' ' {
			return m[:i], m[i+1:], true
		}
	}
	return m, "", false
}

func TestWrite_BadInputIsOneError(t *testing.T) {
	dir := t.TempDir()
	for _, opts := range []Options{
		{Shape: "llama-tiny"},
		{Shape: "qwen2-tiny", Type: quant.Q8_K},
		{Shape: "qwen2-tiny", Mix: "Q3_K_M"},
		{Shape: "qwen2-tiny", VocabFrom: filepath.Join(dir, "absent.gguf")},
	} {
		if err := Write(filepath.Join(dir, "x.gguf"), opts); err == nil {
			t.Errorf("Write(%+v) succeeded", opts)
		}
	}
	if _, _, err := ParseType("Q9_9"); err == nil {
		t.Error("ParseType(Q9_9) succeeded")
	}
}

func TestVocabFrom_CopiesAndPadsTokenizer(t *testing.T) {
	_, src := writeAndOpen(t, Options{Shape: "qwen2-tiny", Type: quant.F16})
	// qwen2-tiny's 512 tokens fit any big shape; use the plan only (no data).
	p, err := newPlan(Options{Shape: "qwen2-0.5b", Type: quant.Q8_0, VocabFrom: src})
	if err != nil {
		t.Fatal(err)
	}
	var toks []string
	var types []int32
	for _, kv := range p.kvs {
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			toks, _ = kv.Value.AsStrings()
		case "tokenizer.ggml.token_type":
			types, _ = kv.Value.AsInt32s()
		}
	}
	if len(toks) != 151936 || len(types) != 151936 || toks[600] != "[PAD600]" || types[600] != TokenUnused || toks[0] != "!" {
		t.Fatalf("padded vocab: %d tokens %d types", len(toks), len(types))
	}
	// the other way round: a 151936-token vocabulary does not fit a tiny shape
	const tinyCode = "../../../shared/models/tiny-code-f16.gguf"
	if _, err := os.Stat(tinyCode); err != nil {
		t.Logf("skipping the too-big case: %v", err)
		return
	}
	if err := Write(filepath.Join(t.TempDir(), "x.gguf"), Options{Shape: "qwen2-tiny", VocabFrom: tinyCode}); err == nil {
		t.Error("a 151936-token vocabulary was accepted for a 512-token shape")
	}
}

func TestDefaultModel_WritesOnceReusesAndRepairs(t *testing.T) {
	dir := t.TempDir()
	var notified int
	path, err := DefaultModelNotify(dir, func(string) { notified++ })
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "minfer-default-qwen2-tiny-f16-seed1.gguf" || notified != 1 {
		t.Fatalf("path %s, notified %d", path, notified)
	}
	st1, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	if _, err := DefaultModelNotify(dir, func(string) { notified++ }); err != nil || notified != 1 {
		t.Fatalf("second call: err %v, notified %d (want reuse)", err, notified)
	}
	st2, _ := os.Stat(path)
	if !st1.ModTime().Equal(st2.ModTime()) {
		t.Error("default model rewritten although valid")
	}
	good, _ := os.ReadFile(path)
	if err := os.WriteFile(path, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DefaultModelNotify(dir, func(string) { notified++ }); err != nil || notified != 2 {
		t.Fatalf("corrupt file: err %v, notified %d (want regeneration)", err, notified)
	}
	again, _ := os.ReadFile(path)
	if sha256.Sum256(again) != sha256.Sum256(good) {
		t.Error("regenerated default model differs from the first one")
	}
}

func TestWrite_Qwen2_05B_Q8_0_FullFile(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 528 MB file (about 7 s of CPU); skipped with -short")
	}
	f, _ := writeAndOpen(t, Options{Shape: "qwen2-0.5b", Type: quant.Q8_0, Seed: 1})
	hp, err := model.ReadHParams(f)
	if err != nil {
		t.Fatal(err)
	}
	sh, _ := ShapeByName("qwen2-0.5b")
	if hp != sh.HParams() {
		t.Errorf("hparams %+v", hp)
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok || emb.Type != quant.Q8_0 {
		t.Fatalf("token_embd: %v", emb)
	}
	// spot-check the last row: generated values, std ~1
	row := make([]float32, emb.Dims[0])
	rb, _ := emb.Type.RowBytes(int(emb.Dims[0]))
	if err := quant.Dequantize(emb.Type, f.Data(emb)[int(emb.Dims[1]-1)*rb:], row); err != nil {
		t.Fatal(err)
	}
	var ss float64
	for _, v := range row {
		ss += float64(v) * float64(v)
	}
	if rms := ss / float64(len(row)); rms < 0.8 || rms > 1.2 {
		t.Errorf("last embedding row mean square %.3f, want ~1", rms)
	}
}

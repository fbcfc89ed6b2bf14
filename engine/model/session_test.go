package model

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/session"
)

// sessionParams sample with the generator (temperature, top-k, top-p) and
// the repeat penalty, so a restore that lost the generator's state or the
// history would draw other tokens.
var sessionParams = sample.Params{Temp: 0.9, TopK: 40, TopP: 0.95, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 5}

// generate forwards feed, then samples n tokens with history (the context
// before feed) as a generation does: each sampled token is forwarded but
// the last. It returns the tokens and the logits each was drawn from.
func generate(t *testing.T, e *Engine, smp *sample.Sampler, history, feed []int32, n int) ([]int32, [][]float32) {
	t.Helper()
	history = append(slices.Clone(history), feed...)
	var ids []int32
	var rows [][]float32
	logits, err := e.Forward(feed, false)
	for {
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, logits)
		id := smp.Sample(logits, history)
		ids, history = append(ids, id), append(history, id)
		if len(ids) == n {
			return ids, rows
		}
		logits, err = e.Forward([]int32{id}, false)
	}
}

// sessionModels are the models the session tests run: both synthetic
// architectures, and the trained tiny-code model with the real tokenizer
// when ../shared is there.
func sessionModels(t *testing.T) map[string]string {
	dir := t.TempDir()
	ms := map[string]string{"qwen2": writeTiny(t, dir, tinyQwen2), "qwen3": writeTiny(t, dir, tinyQwen3)}
	if _, err := os.Stat(realModel); err == nil {
		ms["tiny-code"] = realModel
	} else {
		t.Logf("real model absent (%s): the synthetic models only", realModel)
	}
	return ms
}

func loadCPU(t *testing.T, path, cacheType string, nCtx int) *Engine {
	t.Helper()
	e, err := Load(path, Options{Device: "cpu", Threads: 2, NCtx: nCtx, Levers: mustEnv(t, "MINFER_CACHE_TYPE="+cacheType)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// kvBytes is the engine's stored KV cells [0, Pos()) of every layer, K then V.
func kvBytes(e *Engine) []byte {
	c := e.Backends()[0].(*cpu.Backend).KV()
	n := e.Pos() * c.RowBytes()
	var out []byte
	for l := 0; l < c.NLayer(); l++ {
		out = append(append(out, c.K(l)[:n]...), c.V(l)[:n]...)
	}
	return out
}

// TestSession_RestoredRunContinuesBitwiseInEveryKVFormat: N tokens in one
// run against K tokens, a save, a restore in a fresh engine and N-K more:
// the same tokens and bitwise the same logits at every step, in every KV
// format, on every model; the restored KV cells are the saved bytes.
func TestSession_RestoredRunContinuesBitwiseInEveryKVFormat(t *testing.T) {
	const n, k = 14, 6
	for name, path := range sessionModels(t) {
		for _, f := range kv.Formats() {
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				prompt := []int32{10, 200, 33, 7, 99, 42, 5}
				if name == "tiny-code" {
					e := loadCPU(t, path, f.String(), 128)
					prompt = e.Tokenizer().Encode("class Config:\n    def __init__(self", false)
				}
				whole := loadCPU(t, path, f.String(), 128)
				want, wantLogits := generate(t, whole, sample.New(sessionParams), nil, prompt, n)

				first := loadCPU(t, path, f.String(), 128)
				smp := sample.New(sessionParams)
				ids, logits := generate(t, first, smp, nil, prompt, k)
				file := filepath.Join(t.TempDir(), "s.session")
				saved := &session.Sampler{Params: sessionParams, RNG: smp.RNG()}
				if err := first.SaveSession(file, Session{Pending: ids[k-1:], Sampler: saved}); err != nil {
					t.Fatal(err)
				}
				stored := kvBytes(first)

				e := loadCPU(t, path, f.String(), 128)
				s, err := e.LoadSession(file)
				if err != nil {
					t.Fatal(err)
				}
				ctx := append(slices.Clone(prompt), ids[:k-1]...)
				if !slices.Equal(e.Tokens(), ctx) || e.Pos() != len(ctx) || !slices.Equal(s.Pending, ids[k-1:]) || s.Sampler == nil || *s.Sampler != *saved {
					t.Fatalf("restored tokens %v pos %d pending %v sampler %+v; want %v, %v, %+v", e.Tokens(), e.Pos(), s.Pending, s.Sampler, ctx, ids[k-1:], saved)
				}
				if !bytes.Equal(kvBytes(e), stored) {
					t.Fatal("restored KV cells differ from the saved engine's")
				}
				smp2 := sample.New(s.Sampler.Params)
				smp2.SetRNG(s.Sampler.RNG)
				more, moreLogits := generate(t, e, smp2, e.Tokens(), s.Pending, n-k)
				got, gotLogits := append(ids, more...), append(logits, moreLogits...)
				if !slices.Equal(got, want) {
					t.Fatalf("tokens %v, the run that never stopped drew %v", got, want)
				}
				for i := range wantLogits {
					for j := range wantLogits[i] {
						if math.Float32bits(gotLogits[i][j]) != math.Float32bits(wantLogits[i][j]) {
							t.Fatalf("step %d logit %d: %g restored, %g never stopped", i, j, gotLogits[i][j], wantLogits[i][j])
						}
					}
				}
			})
		}
	}
}

// noCells hides a backend's graph.KVCells, as a device backend without
// one: a save or restore through it is an error naming the backend.
type noCells struct{ graph.Backend }

func (noCells) Name() string { return "fakedev" }

// A session of another model, KV format or context length is refused
// naming the field and leaves the engine's context as it was; a backend
// without KV cell copies cannot save or restore, and says which backend.
func TestLoadSession_RefusesAnotherModelFormatOrContextAndKeepsTheContext(t *testing.T) {
	dir := t.TempDir()
	q2, q3 := writeTiny(t, dir, tinyQwen2), writeTiny(t, dir, tinyQwen3)
	src := loadCPU(t, q2, "f16", 64)
	if _, err := src.Forward([]int32{1, 2, 3}, false); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "s.session")
	if err := src.SaveSession(file, Session{Pending: []int32{4}}); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, model, cache string
		nCtx               int
		field              string
	}{
		{"another model", q3, "f16", 64, "model_sha256"},
		{"f32 KV", q2, "f32", 64, "kv_format"},
		{"q8_0 KV", q2, "q8_0", 64, "kv_format"},
		{"another context", q2, "f16", 128, "n_ctx"},
	} {
		e := loadCPU(t, c.model, c.cache, c.nCtx)
		if _, err := e.Forward([]int32{9, 8}, false); err != nil {
			t.Fatal(err)
		}
		_, err := e.LoadSession(file)
		var re *session.RefusedError
		if !errors.As(err, &re) || re.Field != c.field || !errors.Is(err, session.ErrRefused) {
			t.Errorf("%s: %v, want a refusal of %s", c.name, err, c.field)
		}
		if e.Pos() != 2 || !slices.Equal(e.Tokens(), []int32{9, 8}) {
			t.Errorf("%s: context now %v", c.name, e.Tokens())
		}
	}
	e := loadCPU(t, q2, "f16", 64)
	if err := e.SessionSupport(); err != nil {
		t.Fatalf("CPU: %v", err)
	}
	e.backends[0] = noCells{e.backends[0]}
	if err := e.SessionSupport(); err == nil || !strings.Contains(err.Error(), "the fakedev backend cannot copy KV cells") {
		t.Errorf("SessionSupport through a backend without KVCells: %v", err)
	}
	if _, err := e.LoadSession(file); err == nil || !strings.Contains(err.Error(), "the fakedev backend cannot copy KV cells") {
		t.Errorf("restore through a backend without KVCells: %v", err)
	}
	if err := e.SaveSession(file, Session{}); err == nil || !strings.Contains(err.Error(), "the fakedev backend cannot copy KV cells") {
		t.Errorf("save through a backend without KVCells: %v", err)
	}
	if now, _ := os.ReadFile(file); !bytes.Equal(now, orig) {
		t.Error("the session file changed")
	}
}

// Tokens follows Forward, Truncate and Reset; a session saved with pending
// tokens that would overflow the context is an error.
func TestTokens_FollowForwardTruncateResetAndSaveChecksTheContext(t *testing.T) {
	e := loadTiny(t, tinyQwen2, levers.Default())
	for _, step := range [][]int32{{5, 6, 7}, {8}} {
		if _, err := e.Forward(step, false); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(e.Tokens(), []int32{5, 6, 7, 8}) {
		t.Fatalf("tokens %v", e.Tokens())
	}
	if err := e.Truncate(2); err != nil || !slices.Equal(e.Tokens(), []int32{5, 6}) {
		t.Fatalf("after Truncate(2): %v %v", e.Tokens(), err)
	}
	if _, err := e.Forward([]int32{1}, false); err != nil || !slices.Equal(e.Tokens(), []int32{5, 6, 1}) {
		t.Fatalf("after a forward: %v %v", e.Tokens(), err)
	}
	if err := e.SaveSession(filepath.Join(t.TempDir(), "s"), Session{Pending: make([]int32, e.NCtx()-2)}); err == nil {
		t.Error("saved more tokens than the context holds")
	}
	e.Reset()
	if len(e.Tokens()) != 0 {
		t.Fatalf("after Reset: %v", e.Tokens())
	}
}

// FillKVZeros leaves the context at the tokens with zero cells (read back
// through the backend) and the engine able to go on; more cells than the
// context is an error.
func TestFillKVZeros_CellsAreZeroAndTheEngineGoesOn(t *testing.T) {
	e := loadTiny(t, tinyQwen2, levers.Default())
	if _, err := e.Forward([]int32{1, 2, 3, 4, 5, 6, 7, 8}, false); err != nil {
		t.Fatal(err)
	}
	toks := []int32{9, 8, 7, 6, 5}
	if err := e.FillKVZeros(toks); err != nil {
		t.Fatal(err)
	}
	if e.Pos() != 5 || !slices.Equal(e.Tokens(), toks) {
		t.Fatalf("pos %d tokens %v", e.Pos(), e.Tokens())
	}
	kc, err := e.kvCells("test")
	if err != nil {
		t.Fatal(err)
	}
	row := kv.RowBytes(e.kvFormat, e.h.NKV())
	buf := make([]byte, 8*row)
	for layer := range e.h.NLayer {
		if err := kc.ReadKVCells(layer, graph.SideV, 0, buf); err != nil {
			t.Fatal(err)
		}
		for i, b := range buf[:5*row] {
			if b != 0 {
				t.Fatalf("layer %d V byte %d = %d after the zero fill", layer, i, b)
			}
		}
		if slices.Equal(buf[5*row:], make([]byte, 3*row)) {
			t.Fatalf("layer %d: cells 5..7 (the earlier forward's) zeroed too", layer)
		}
	}
	if _, err := e.Forward([]int32{1}, false); err != nil || e.Pos() != 6 {
		t.Fatalf("forward after the fill: %v, pos %d", err, e.Pos())
	}
	if err := e.FillKVZeros(make([]int32, e.NCtx()+1)); err == nil {
		t.Error("a fill past the context accepted")
	}
}

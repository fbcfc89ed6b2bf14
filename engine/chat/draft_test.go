package chat

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
	"github.com/minfer-go/minfer/engine/synth"
)

var draftTurns = []string{"def add(a, b):", "Now the same for subtraction, please.", "And multiplication."}

// converse runs draftTurns greedily on e (through dec when it is not nil)
// and returns each answer with the logits of each of its tokens.
func converse(t *testing.T, e *model.Engine, path string, dec *spec.Decoder) ([][]int32, [][][]float32) {
	t.Helper()
	e.Reset()
	c, err := New(e, templateOf(t, path), sample.New(sample.Params{Greedy: true}), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.IgnoreEOG = true // answers run to their limit: long enough to compare
	c.SetDraft(dec)
	var ids [][]int32
	var logits [][][]float32
	for i, user := range draftTurns {
		r, err := c.Turn(user, 20, true, nil)
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		ids, logits = append(ids, r.IDs), append(logits, r.Logits)
		if len(c.Pending()) != 1 || e.Pos() != len(e.Tokens()) {
			t.Fatalf("turn %d: the engine holds %d tokens at position %d, %d pending", i+1, len(e.Tokens()), e.Pos(), len(c.Pending()))
		}
	}
	return ids, logits
}

// A conversation whose answers are decoded with drafts gives the answers
// of one decoded a token at a time, token for token, with bitwise the
// same logits on the CPU, for every drafter; a draft check that accepts
// one wrong token changes an answer.
func TestConversation_DraftedAnswersEqualPlainAnswersBitwise(t *testing.T) {
	dir := t.TempDir()
	for _, shape := range []string{"qwen2-tiny", "qwen3-tiny"} {
		t.Run(shape, func(t *testing.T) {
			paths := map[uint64]string{}
			for _, seed := range []uint64{3, 4} {
				p := filepath.Join(dir, shape+string(rune('0'+seed))+".gguf")
				if err := synth.Write(p, synth.Options{Shape: shape, Type: quant.Q8_0, Seed: seed, Workers: 1}); err != nil {
					t.Fatal(err)
				}
				paths[seed] = p
			}
			target := loadCPU(t, paths[3], "f32")
			plainIDs, plainLogits := converse(t, target, paths[3], nil)
			nv := target.HParams().NVocab
			drafters := map[string]func() spec.Drafter{
				"itself": func() spec.Drafter { return spec.NewModel(loadCPU(t, paths[3], "f32"), "itself") },
				"other":  func() spec.Drafter { return spec.NewModel(loadCPU(t, paths[4], "f32"), "other") },
				"lookup": func() spec.Drafter { return spec.DefaultLookup() },
			}
			for name, mk := range drafters {
				dec, err := spec.New(target, mk(), spec.Options{K: 3, NVocab: nv})
				if err != nil {
					t.Fatal(err)
				}
				ids, logits := converse(t, target, paths[3], dec)
				for turn := range ids {
					if !slices.Equal(ids[turn], plainIDs[turn]) {
						t.Fatalf("%s: turn %d answered %v, plain %v", name, turn+1, ids[turn], plainIDs[turn])
					}
					for i := range logits[turn] {
						for j, v := range logits[turn][i] {
							if math.Float32bits(v) != math.Float32bits(plainLogits[turn][i][j]) {
								t.Fatalf("%s: turn %d token %d logit %d: %v, plain %v", name, turn+1, i, j, v, plainLogits[turn][i][j])
							}
						}
					}
				}
				st := dec.Stats()
				t.Logf("%s: accepted %d of %d, %.2f tokens per forward", name, st.Accepted, st.Drafted, st.TokensPerForward())
				// Drafting for itself it disagrees only where it drafts an
				// end of turn, which IgnoreEOG masks in the target's draws.
				if name == "itself" && st.AcceptanceRate() < 0.9 {
					t.Errorf("the model drafting for itself: acceptance %.2f", st.AcceptanceRate())
				}
			}
			dec, err := spec.New(target, drafters["other"](), spec.Options{K: 3, NVocab: nv, AcceptWrongDraft: true})
			if err != nil {
				t.Fatal(err)
			}
			ids, _ := converse(t, target, paths[3], dec)
			if slices.EqualFunc(ids, plainIDs, slices.Equal) {
				t.Error("a draft check that accepts a wrong token left every answer as it was")
			}
		})
	}
}

package main

import (
	"testing"

	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/sample"
)

// intoRecorder is an lm that records the first element's address of every
// logits row its forwards return.
type intoRecorder struct {
	lm
	rows []*float32
}

func (r *intoRecorder) Forward(tokens []int32, all bool) ([]float32, error) {
	return r.ForwardInto(nil, tokens, all)
}

func (r *intoRecorder) ForwardInto(dst []float32, tokens []int32, all bool) ([]float32, error) {
	out, err := r.lm.ForwardInto(dst, tokens, all)
	if err == nil && len(out) > 0 {
		r.rows = append(r.rows, &out[0])
	}
	return out, err
}

// TestGenerate_DecodeStepsReuseOneLogitsRow: generate's decode steps write
// every step's logits into the row of the step before (the sampler is done
// with it), so a token costs no vocabulary-sized allocation.
func TestGenerate_DecodeStepsReuseOneLogitsRow(t *testing.T) {
	e, err := model.Load(synthModel(t), model.Options{Device: "cpu", Levers: testConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rec := &intoRecorder{lm: e}
	r, err := generateAfter(rec, nil, []int32{1, 2, 3}, sample.New(sample.Params{Greedy: true}), 6, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.decodeSteps < 2 || len(rec.rows) != r.decodeSteps+1 {
		t.Fatalf("%d decode steps, %d forwards recorded", r.decodeSteps, len(rec.rows))
	}
	for i, p := range rec.rows[1:] {
		if p != rec.rows[0] {
			t.Errorf("decode step %d returned a new logits row, not the prefill's", i+1)
		}
	}
}

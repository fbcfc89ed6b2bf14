package cuda

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// Pieces are aligned as the arena aligns them: each starts at the next
// multiple of arenaAlign after the one before.
func TestArenaBytes_AlignsEachPieceAsPieceDoes(t *testing.T) {
	for _, c := range []struct {
		sizes []uint64
		want  uint64
	}{
		{nil, 0},
		{[]uint64{1}, 1},
		{[]uint64{1, 1}, arenaAlign + 1},
		{[]uint64{arenaAlign, 1}, arenaAlign + 1},
		{[]uint64{300, 10, 5}, 2*arenaAlign + 256 + 5},
	} {
		if got := arenaBytes(c.sizes); got != c.want {
			t.Errorf("arenaBytes(%v) = %d, want %d", c.sizes, got, c.want)
		}
	}
}

// The reservation is the memory plan's weights and derived classes: the
// same rules (checked against the driver by the device memory tests) under
// every layout the levers give, so the one reserved chunk holds every
// weight registerWeight places (to within the pieces' alignment).
func TestReserveWeights_PiecesAreThePlansWeightsAndDerivedClasses(t *testing.T) {
	for _, c := range []struct {
		shape    string
		typ      quant.Type
		settings []string
		derived  bool
	}{
		{"qwen2-tiny", quant.Q8_0, nil, false},                          // one copy
		{"qwen2-tiny", quant.Q8_0, []string{"MINFER_ONE_COPY=0"}, true}, // two copies
		{"qwen2-7b", quant.Q8_0, []string{"MINFER_EMBED_HOST=1"}, false},
		{"qwen2-7b", quant.Q6_K, []string{"MINFER_MMQ_ASYNC=1"}, true}, // the default yields: two copies
		{"qwen3-tiny", quant.Q4_K, []string{"MINFER_MMVQ_REPACK=0"}, false},
	} {
		lv, err := levers.Parse(c.settings)
		if err != nil {
			t.Fatal(err)
		}
		p := planOf(t, c.shape, c.typ, 4096, kv.F16, c.settings...)
		ws := planWeights(t, c.shape, c.typ)
		probe := &Backend{lv: lv, mm: MatMulOptions{NoQ80MMVQ: lv.NoQ80MMVQ, NoKQMMVQ: lv.NoKQMMVQ, MMQ: lv.MMQ, NoPrefillGEMM: lv.NoPrefillGEMM, MMVQNT: lv.MMVQNT}}
		own, derived, ok := weightPieces(probe, ws)
		if !ok {
			t.Fatalf("%s %s %v: not reserved", c.shape, c.typ, c.settings)
		}
		var so, sd uint64
		for _, b := range own {
			so += b
		}
		for _, b := range derived {
			sd += b
		}
		if (sd > 0) != c.derived || so != p.Weights || sd != p.Derived {
			t.Errorf("%s %s %v: pieces %d + %d derived, plan %d + %d", c.shape, c.typ, c.settings, so, sd, p.Weights, p.Derived)
		}
		if slack := arenaBytes(own) - so; slack > uint64(len(own))*arenaAlign {
			t.Errorf("%s %s: %d bytes of alignment over %d pieces", c.shape, c.typ, slack, len(own))
		}
	}
}

// A model the backend would refuse a weight of reserves nothing: it goes to
// another backend, and memory set aside here would be held for nothing.
func TestReserveWeights_NothingForAModelThatWillBeRefused(t *testing.T) {
	ws := planWeights(t, "qwen2-tiny", quant.Q8_0)
	lv, _ := levers.Parse(nil)
	probe := &Backend{lv: lv}
	ws = append(slices.Clone(ws), graph.Weight{Name: "odd", Type: quant.Type(250), Dims: []int{32, 4}})
	if own, derived, ok := weightPieces(probe, ws); ok {
		t.Errorf("an unsupported weight: %d + %d pieces reserved", len(own), len(derived))
	}
}

// planWeights are the graph.Weights (no data) of a synthesized shape, as
// the plan's tensors name them.
func planWeights(t *testing.T, shape string, typ quant.Type) []graph.Weight {
	t.Helper()
	_, ts := planTensors(t, shape, typ)
	ws := make([]graph.Weight, len(ts))
	for i, x := range ts {
		ws[i] = graph.Weight{Name: x.Name, Type: x.Type, Dims: x.Dims, Gathered: x.Gathered}
	}
	return ws
}

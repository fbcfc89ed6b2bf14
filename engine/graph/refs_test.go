package graph

import (
	"slices"
	"testing"
)

// Both backends' SupportsOp rest on these: a weight slot or KV op missed
// here would let a plan reach a kernel without its weight or cache.
func TestRefs_WeightNamesSkipEmptySlotsAndKVOpsAreTheFour(t *testing.T) {
	n := &Node{Weight: "w", Weights: []string{"q", "", "v"}, Biases: []string{"", "bk"}}
	if got := n.WeightNames(); !slices.Equal(got, []string{"w", "q", "v", "bk"}) {
		t.Errorf("WeightNames = %q", got)
	}
	kv := map[Op]bool{OpAttn: true, OpKvcacheStore: true, OpKvcacheLoad: true, OpQkvBiasRopeStore: true}
	for o := Op(0); o <= OpFusedFFN; o++ {
		if o.UsesKV() != kv[o] {
			t.Errorf("%v.UsesKV() = %v", o, o.UsesKV())
		}
	}
	for _, c := range []struct {
		n, cell int
		ok      bool
	}{{64, 0, true}, {64, 3, true}, {64, 4, false}, {0, 0, false}, {40, 0, false}, {16, -1, false}} {
		if err := CheckKVCells(c.n, c.cell, 16, 7); (err == nil) != c.ok {
			t.Errorf("CheckKVCells(%d, %d, 16, 7) = %v", c.n, c.cell, err)
		}
	}
}

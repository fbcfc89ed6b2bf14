package model

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model/arch"
)

// skip_bias is a rewrite of the built graph outside the architectures: the
// q projections lose their bias, nothing else changes, and the graph takes
// a UID of its own (a device keys its captures by it).
func TestSkipBias_DropsTheQBiasesOnlyAndTakesAnotherUID(t *testing.T) {
	h := goldenHParams(Qwen2)[0]
	a, err := arch.Lookup(string(h.Arch))
	if err != nil {
		t.Fatal(err)
	}
	p := GraphParams(h, 3, 16, false, kv.F32, levers.Default())
	plain, err := buildGraph(a.Build, p, levers.Default())
	if err != nil {
		t.Fatal(err)
	}
	mut, err := buildGraph(a.Build, p, mustEnv(t, "MINFER_TEST_MUTATE=skip_bias"))
	if err != nil {
		t.Fatal(err)
	}
	if mut.UID == plain.UID {
		t.Error("the mutated graph kept the UID of the plain one")
	}
	dropped := 0
	for i, n := range mut.Nodes {
		was := plain.Nodes[i]
		if n.Bias != was.Bias {
			dropped++
			if n.Op != graph.OpMatMul || n.Bias != "" || !strings.HasSuffix(n.Name, ".attn_q") {
				t.Errorf("node %s: bias %q -> %q", n.Name, was.Bias, n.Bias)
			}
		}
	}
	if dropped != h.NLayer {
		t.Errorf("%d q biases dropped, want one per layer (%d)", dropped, h.NLayer)
	}
}

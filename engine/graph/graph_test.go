package graph_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	"github.com/minfer-go/minfer/engine/quant"
)

func params(nt int) graph.Params {
	return graph.Params{Arch: "qwen2", NVocab: 50, NEmbd: 32, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 8, NFF: 48, NCtx: 32,
		RopeTheta: 1e4, RmsEps: 1e-6, RopeNeox: true, QKVBias: true, TiedOutput: true, NT: nt, KVFormat: kv.F32, FuseQKV: true, FuseFFN: true}
}

// yes accepts every op and fusion (topology tests need no weights).
type yes struct{ graph.Backend }

func (yes) Name() string                                      { return "yes" }
func (yes) SupportsOp(*graph.Node) error                      { return nil }
func (yes) SupportsFused(graph.FuseKind, ...*graph.Node) bool { return true }

func TestBuild_TopologyIsAPureFunctionOfParams(t *testing.T) {
	a, err := qwen2.Build(params(3))
	if err != nil {
		t.Fatal(err)
	}
	b, err := qwen2.Build(params(3))
	if err != nil {
		t.Fatal(err)
	}
	if a.UID != b.UID || a.Dump() != b.Dump() {
		t.Fatal("equal params built different graphs")
	}
	for _, p := range []graph.Params{params(1), func() graph.Params { p := params(3); p.FuseFFN = false; return p }(),
		func() graph.Params { p := params(3); p.KVFormat = kv.Q8_0; return p }()} {
		if p.UID() == a.UID {
			t.Errorf("params %+v share uid %x", p, a.UID)
		}
	}
	if a.UID != params(3).UID() {
		t.Error("uid not stable")
	}
}

func TestFuse_RewritesEveryLayerAndRespectsSupportsFused(t *testing.T) {
	g, err := qwen2.Build(params(2))
	if err != nil {
		t.Fatal(err)
	}
	be := []graph.Backend{yes{}}
	if err := graph.Assign(g, be); err != nil {
		t.Fatal(err)
	}
	n, err := graph.Fuse(g, be)
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 || g.Count(graph.OpFusedQKV) != 2 || g.Count(graph.OpQkvBiasRopeStore) != 2 || g.Count(graph.OpFusedFFN) != 2 || g.Count(graph.OpKvcacheStore) != 0 {
		t.Fatalf("%d rewrites:\n%s", n, g.Dump())
	}
	for _, nd := range g.Nodes {
		for _, in := range nd.Inputs {
			if in >= nd.ID {
				t.Fatalf("node %s reads later node %d", nd.Name, in)
			}
		}
	}
	p := params(2)
	p.FuseQKV, p.FuseFFN = false, false
	g, _ = qwen2.Build(p)
	graph.Assign(g, be)
	if n, _ := graph.Fuse(g, be); n != 0 {
		t.Fatalf("%d rewrites with fusions off", n)
	}
}

// No two nodes that are live at the same time share a slot, and slots are
// reused (fewer slots than buffers).
func TestAlloc_ReusesSlotsWithoutOverlappingLifetimes(t *testing.T) {
	g, _ := qwen2.Build(params(4))
	be := []graph.Backend{yes{}}
	graph.Assign(g, be)
	graph.Fuse(g, be)
	l, err := graph.Alloc(g)
	if err != nil {
		t.Fatal(err)
	}
	root := func(n *graph.Node) *graph.Node {
		for n.Op.IsAlias() {
			n = g.Nodes[n.Alias]
		}
		return n
	}
	last := map[int]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			last[root(g.Nodes[in]).ID] = n.ID
		}
	}
	last[root(g.Nodes[g.Output]).ID] = len(g.Nodes)
	owner := map[int]int{} // slot -> node id holding it
	buffers := 0
	for _, n := range g.Nodes {
		if n.Slot < 0 {
			continue
		}
		buffers++
		if l.SlotLen[n.Slot] != n.Shape.N() {
			t.Fatalf("node %s of %d elements in slot of %d", n.Name, n.Shape.N(), l.SlotLen[n.Slot])
		}
		if prev, ok := owner[n.Slot]; ok && last[prev] >= n.ID && g.Nodes[prev].Op != graph.OpInput {
			t.Fatalf("slot %d: %s (live until %d) and %s (at %d)", n.Slot, g.Nodes[prev].Name, last[prev], n.Name, n.ID)
		}
		owner[n.Slot] = n.ID
	}
	if len(l.SlotLen) >= buffers {
		t.Fatalf("%d slots for %d buffers: no reuse", len(l.SlotLen), buffers)
	}
}

func f32w(name string, vals []float32, dims ...int) graph.Weight {
	buf := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	return graph.Weight{Name: name, Type: quant.F32, Dims: dims, Data: buf}
}

// noSoftmax is a second CPU backend that refuses Softmax, to force splits.
type noSoftmax struct{ *cpu.Backend }

func (noSoftmax) Name() string { return "cpu-nosoftmax" }
func (b noSoftmax) SupportsOp(n *graph.Node) error {
	if n.Op == graph.OpSoftmax {
		return errors.New("no softmax here")
	}
	return b.Backend.SupportsOp(n)
}

// A graph split over two backends stages tensors across the boundary and
// gives the same values as one backend.
func TestScheduler_SplitsStageAcrossBackendsBitwise(t *testing.T) {
	vals := []float32{1, -2, 3, 0.5, 2, 2, -1, 4}
	run := func(backends []graph.Backend) ([]float32, *graph.Plan) {
		for _, b := range backends {
			if err := b.RegisterWeight(f32w("x", vals, 4, 2)); err != nil {
				t.Fatal(err)
			}
		}
		p := graph.Params{NT: 2, NCtx: 4}
		b := graph.NewBuilder(p)
		ids := b.Input(graph.InputTokens, "ids")
		x := b.GetRows("x", "x", 4, ids)
		s := b.Softmax("sm", b.Scale("sc", x, 2), 1)
		y := b.Add("add", s, x)
		b.Output(b.Softmax("sm2", y, 1))
		g, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		pl, err := graph.Compile(g, backends)
		if err != nil {
			t.Fatal(err)
		}
		if err := pl.WriteI32(g.Tokens, []int32{1, 0}); err != nil {
			t.Fatal(err)
		}
		if err := pl.Run(); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 8)
		if err := pl.Read(g.Output, out); err != nil {
			t.Fatal(err)
		}
		return out, pl
	}
	a := cpu.New(cpu.Options{Threads: 1})
	defer a.Close()
	one, pl1 := run([]graph.Backend{a})
	if len(pl1.Splits) != 1 {
		t.Fatalf("%d splits on one backend", len(pl1.Splits))
	}
	b1, b2 := cpu.New(cpu.Options{Threads: 1}), cpu.New(cpu.Options{Threads: 2})
	defer b1.Close()
	defer b2.Close()
	two, pl2 := run([]graph.Backend{noSoftmax{b1}, b2})
	if len(pl2.Splits) != 4 { // gather+scale | softmax | add | softmax
		t.Fatalf("%d splits: %+v", len(pl2.Splits), pl2.Splits)
	}
	for i := range one {
		if math.Float32bits(one[i]) != math.Float32bits(two[i]) {
			t.Fatalf("value %d: %v split vs %v", i, two[i], one[i])
		}
	}
}

func TestAssign_UnsupportedNodeIsAnErrorNamingIt(t *testing.T) {
	g, _ := qwen2.Build(params(1))
	c := cpu.New(cpu.Options{Threads: 1})
	defer c.Close()
	err := graph.Assign(g, []graph.Backend{c})
	if err == nil || !strings.Contains(err.Error(), "token_embd") || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("err = %v", err)
	}
}

func TestBuilder_ShapeErrorsAreErrors(t *testing.T) {
	b := graph.NewBuilder(graph.Params{NT: 2, NCtx: 4})
	ids := b.Input(graph.InputTokens, "ids")
	x := b.GetRows("x", "x", 4, ids)
	b.Reshape("bad", x, graph.Sh(3, 3))
	b.Output(x)
	if _, err := b.Finish(); err == nil {
		t.Fatal("bad reshape accepted")
	}
	if err := (graph.Params{NT: 0}).Validate(); err == nil {
		t.Fatal("nt 0 accepted")
	}
}

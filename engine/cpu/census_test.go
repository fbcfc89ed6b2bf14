package cpu

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// q8w quantizes rows x k random values to a Q8_0 weight.
func q8w(t *testing.T, r *rand.Rand, name string, k, rows int) graph.Weight {
	t.Helper()
	vals := randVals(r, k*rows)
	tr, err := quant.TraitsOf(quant.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := quant.Q8_0.RowBytes(k)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rb*rows)
	for i := range rows {
		tr.Quantize(vals[i*k:(i+1)*k], data[i*rb:(i+1)*rb])
	}
	return graph.Weight{Name: name, Type: quant.Q8_0, Dims: []int{k, rows}, Data: data}
}

// One run of a small graph counts each executed node once under its path
// name, and nothing for the inputs, views and reshapes.
func TestCensus_CountsEveryExecutedNodeByPathName(t *testing.T) {
	const k, m, nt = 32, 32, 2
	r := rand.New(rand.NewPCG(3, 4))
	h := newHarness(t, 2, nt, &graph.KVSpec{Format: kv.F16, NLayer: 1, NCtx: 64, RowLen: m})
	h.be.census = map[censusKey]int64{}
	x := h.operand("x", randVals(r, k*nt), k)
	h.reg(q8w(t, r, "wq", k, m))
	h.reg(f32w("nw", randVals(r, k), k))
	n := h.b.RmsNorm("norm", x, "nw", 1e-6)
	mm := h.b.MatMul("mm", n, "wq", "", m)
	v := h.b.View("view", mm, graph.Sh(m, nt), 0)
	st := h.b.KvcacheStore("st", v, 2, 0, graph.SideK)
	ld := h.b.KvcacheLoad("ld", 2, 0, graph.SideK, m, st)
	rs := h.b.Reshape("rs", ld, graph.Sh(m*64)) // the load is [m, NCtx of the graph]
	h.run(h.b.Add("sum", rs, rs), nil, 0)
	want := map[string]int64{
		"cpu_get_rows": 1, "cpu_rms_norm": 1, "cpu_matmul_q8_0": 1,
		"cpu_kv_store_f16": 1, "cpu_kv_load_f16": 1, "cpu_add": 1,
	}
	if got := h.be.Census(); !maps.Equal(got, want) {
		t.Fatalf("census %v, want %v", got, want)
	}
	if c := New(Options{}).Census(); c != nil {
		t.Fatalf("census off: %v, want nil", c)
	}
}

// The fused nodes are named by their first weight's type; the fused QKV
// tail also counts its K and V stores as the KV-store path, so the KV
// format's liveness name appears whether or not the tail is fused.
func TestCensus_FusedNodesNameTheirWeightTypeAndTheKVStorePath(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	be := New(Options{Threads: 1, Census: true})
	defer be.Close()
	if err := be.AllocKV(graph.KVSpec{Format: kv.Q8_0, NLayer: 1, NCtx: 8, RowLen: 32}); err != nil {
		t.Fatal(err)
	}
	if err := be.RegisterWeight(q8w(t, r, "gate", 32, 32)); err != nil {
		t.Fatal(err)
	}
	if err := be.RegisterWeight(f32w("q", randVals(r, 32*32), 32, 32)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*graph.Node{
		{Op: graph.OpFusedFFN, Weights: []string{"gate", "up"}},
		{Op: graph.OpFusedQKV, Weights: []string{"q", "k", "v"}},
		{Op: graph.OpFusedQKV, Weights: []string{"q", "k", "v"}},
		{Op: graph.OpQkvBiasRopeStore},
		{Op: graph.OpAttn},
		{Op: graph.OpRope},
		{Op: graph.OpInput},
		{Op: graph.OpReshape},
	} {
		be.countNode(n)
	}
	want := map[string]int64{
		"cpu_fused_ffn_q8_0": 1, "cpu_fused_qkv_f32": 2, "cpu_qkv_rope_store_q8_0": 1,
		"cpu_kv_store_q8_0": 2, "cpu_attn": 1, "cpu_rope": 1,
	}
	if got := be.Census(); !maps.Equal(got, want) {
		t.Fatalf("census %v, want %v", got, want)
	}
}

// TestPlantedFailure_FailsOnlyUnderFailDeviceTestMutation is gate 4's
// mutation evidence on the CPU: with MINFER_TEST_MUTATE=fail_device_test
// this package's suite has exactly one failure, this test; without it the
// test runs a real check and passes.
func TestPlantedFailure_FailsOnlyUnderFailDeviceTestMutation(t *testing.T) {
	cfg, err := levers.FromEnv()
	if err != nil {
		t.Fatalf("levers: %v", err)
	}
	if cfg.Mutated(levers.MutateFailDeviceTest) {
		t.Fatal("planted failure: MINFER_TEST_MUTATE=fail_device_test")
	}
	h := newHarness(t, 1, 1, nil)
	x := h.operand("x", []float32{3, 4}, 2)
	h.reg(f32w("w", []float32{1, 1}, 2))
	y := h.run(h.b.RmsNorm("n", x, "w", 0), nil, 0)
	near(t, "rms_norm", y, []float64{3 / 3.5355339059327378, 4 / 3.5355339059327378}, 1e-6)
}

package cuda

// Tests of MINFER_FUSE_FFN_Q8 with MINFER_FUSE_RES_NORM_Q8: an
// FFNMatMulAdd whose FFN reads the Q8_1 row the o-projection's last block
// wrote (Q8In) and whose down projection, reading the FFN's Q8_1 output,
// writes the next norm's Q8_1 row into the scratch (OutNorm). The device
// test skips with a message when no device answers; the others need none.
// The kernels' bytes over two buffers are checked on the CPU by
// scripts/kernel-emu/resn-emu.sh (kernels/emu_test.go).

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// TestFuseFFNQ8ResNormQ8_RouteOffersTheFFNDownProjectionAndTheFFNAsReader:
// the backend offers FuseResNormQ8 with an FFNMatMulAdd as the producer
// (its down projection, GGUF Q4_K or repacked Q6_K, on a one-warp decode
// route with a resn kernel) before a normed fused q/k/v or FFNMatMulAdd,
// and as the reader (its FFN's norm folded) after an o-projection; it
// declines an f16 down projection, two rows, the split form, and an
// FFNMatMulAdd reader whose norm was not folded.
func TestFuseFFNQ8ResNormQ8_RouteOffersTheFFNDownProjectionAndTheFFNAsReader(t *testing.T) {
	const n = 896
	w := func(typ quant.Type, rowLen, rows int, rp driver.DevicePtr) *devWeight {
		return &devWeight{typ: typ, rowLen: rowLen, rows: rows, ptr: 0x1000, rp: rp}
	}
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: 1 << 20}
	b := &Backend{mm: mm, weights: map[string]*devWeight{
		"norm": {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"d4k":  w(quant.Q4_K, 4864, n, 0), "d6kr": w(quant.Q6_K, 4864, n, 0x8000), "df16": w(quant.F16, 4864, n, 0),
		"o50": w(quant.Q5_0, n, n, 0),
	}}
	ffn := func(down string, rows int, norm string) *graph.Node {
		return &graph.Node{ID: 7, Op: graph.OpFFNMatMulAdd, Inputs: []int{6, 6}, Weight: down, Shape: graph.Sh(n, rows),
			Weights: []string{"g", "u"}, Norm: norm}
	}
	qkv := &graph.Node{Op: graph.OpFusedQKV, Inputs: []int{7}, Norm: "norm", Weights: []string{"x", "y", "z"}}
	oproj := &graph.Node{ID: 6, Op: graph.OpAttnMatMulAdd, Weight: "o50", Shape: graph.Sh(n, 1)}
	for _, c := range []struct {
		name string
		m, c *graph.Node
		want bool
	}{
		{"FFN + Q4_K down -> q/k/v", ffn("d4k", 1, "norm"), qkv, true},
		{"FFN + repacked Q6_K down -> q/k/v", ffn("d6kr", 1, "norm"), qkv, true},
		{"o-projection -> FFN + down", oproj, ffn("d4k", 1, "norm"), true},
		{"FFN + down -> FFN + down", ffn("d4k", 1, ""), &graph.Node{Op: graph.OpFFNMatMulAdd, Inputs: []int{7, 7}, Norm: "norm"}, true},
		{"FFN + f16 down", ffn("df16", 1, "norm"), qkv, false},
		{"two rows", ffn("d4k", 2, "norm"), qkv, false},
		{"an FFN reader without a folded norm", oproj, ffn("d4k", 1, ""), false},
	} {
		if got := b.SupportsFused(graph.FuseResNormQ8, c.m, c.c); got != c.want {
			t.Errorf("%s: SupportsFused %v, want %v", c.name, got, c.want)
		}
	}
	split := &Backend{mm: mm, weights: b.weights}
	split.mm.MMVQSplit = true
	if split.SupportsFused(graph.FuseResNormQ8, ffn("d4k", 1, "norm"), qkv) {
		t.Error("offered with MINFER_MMVQ_SPLIT on: the split form has no resn kernel")
	}
}

// TestFuseFFNQ8ResNormQ8_TailWritesTheScratchApartFromTheFFNRowItReads:
// what an FFNMatMulAdd with an OutNorm writes after its down projection
// (resNormOf): the OutNorm's weight and OutEps, not its FFN's Norm and
// Eps, into the Q8_1 scratch (the next Q8In node reads it there), which
// is not the FFN's Q8_1 output the down projection reads; a node without
// an OutNorm writes none. The resn launcher refuses a Q8_1 row that
// starts inside the activation it reads (only the row itself or one apart
// from it is safe), by name.
func TestFuseFFNQ8ResNormQ8_TailWritesTheScratchApartFromTheFFNRowItReads(t *testing.T) {
	const n, nff = 896, 4864
	mm := MatMulOptions{MMQ: true, MMVQNT: true, ActQ8: 0x3000, ActQ8Bytes: ActQ8Bytes(nff, 1)}
	b := &Backend{mm: mm, resnCtr: 0x9000, ffnQ8: 0x100000, ffnQ8Len: nff, weights: map[string]*devWeight{
		"ffn_norm":  {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2000},
		"attn_norm": {typ: quant.F32, rowLen: n, rows: 1, vector: true, ptr: 0x2800},
		"down":      {typ: quant.Q4_K, rowLen: nff, rows: n, ptr: 0x10000},
	}}
	node := &graph.Node{Op: graph.OpFFNMatMulAdd, Weight: "down", Weights: []string{"g", "u"}, Shape: graph.Sh(n, 1),
		Norm: "ffn_norm", Q8In: true, OutNorm: "attn_norm", P: graph.OpParams{Eps: 1e-5, OutEps: 1e-6}}
	d := matmulPlan{w: b.weights["down"]}
	nrm, err := b.resNormOf(node, d)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.ensureFFNQ8(nff) // allocated already: no device call
	if err != nil {
		t.Fatal(err)
	}
	if nrm.W != 0x2800 || nrm.Eps != 1e-6 || nrm.Q8 != mm.ActQ8 || nrm.Q8Bytes != mm.ActQ8Bytes || nrm.Counter != 0x9000 {
		t.Errorf("resNormOf: %+v; want the attn norm's weight 0x2800, eps 1e-6, the scratch %v (%d bytes) and the counter 0x9000",
			nrm, mm.ActQ8, mm.ActQ8Bytes)
	}
	if overlapBytes(nrm.Q8, ActQ8Bytes(n, 1), q.Q8, q.Q8Bytes) {
		t.Errorf("the tail's Q8_1 row %v overlaps the FFN's Q8_1 output %v the down projection reads", nrm.Q8, q.Q8)
	}
	node.OutNorm = ""
	if nrm, err := b.resNormOf(node, d); err != nil || nrm != (ResNorm{}) {
		t.Errorf("no OutNorm: %+v, %v; want no norm written", nrm, err)
	}

	k := &Kernels{dev: &driver.Device{Attr: driver.Attributes{SMCount: 132}}}
	const xq, out, res = driver.DevicePtr(0x40000), driver.DevicePtr(0x20000), driver.DevicePtr(0x30000)
	xqb := ActQ8Bytes(nff, 1)
	r := ResNorm{W: 0x50000, Eps: 1e-6, Q8: xq.Add(36 * 8), Q8Bytes: ActQ8Bytes(n, 1), Counter: 0x60000}
	err = k.MatMulQ8_1ResNorm(nil, out, xq, xqb, 0x10000, quant.Q4_K, 0, res, nff, n, r, false)
	if err == nil || !strings.Contains(err.Error(), "matmul_q8_1_resn") || !strings.Contains(err.Error(), "partly overlaps") {
		t.Errorf("a Q8_1 row 8 blocks into the activation: %v, want a refusal naming the op and the overlap", err)
	}
}

// TestFuseFFNQ8ResNormQ8_MemoryPlanCountsBothAllocations: with both levers
// the memory plan's scratch holds the FFN's Q8_1 output and counters and
// the resn counter, each once (nothing else is allocated for the pair).
func TestFuseFFNQ8ResNormQ8_MemoryPlanCountsBothAllocations(t *testing.T) {
	p := graph.Params{NHead: 14, NHeadKV: 2, HeadDim: 64, NFF: 4864, NCtx: 256}
	off, on := levers.Default(), levers.Default()
	on.FuseFFNQ8, on.FuseResNormQ8 = true, true
	if d, want := MemoryRules(on, 132).Scratch(p, nil, 1)-MemoryRules(off, 132).Scratch(p, nil, 1), FFNQ8OutBytes(4864)+ResnCounterBytes; d != want {
		t.Errorf("the memory plan's scratch grows by %d bytes with both levers, want FFNQ8OutBytes(4864) + the resn counter = %d", d, want)
	}
}

// TestFuseFFNQ8ResNormQ8_SetTogetherIsNotRefused: the registry takes the
// two levers together (the pair composes), while each keeps its own
// Requires: RES_NORM_Q8 without FUSE_NORM_Q8 or with the split matvec,
// FFN_Q8 with the FFN fusion off, are still refused by name.
func TestFuseFFNQ8ResNormQ8_SetTogetherIsNotRefused(t *testing.T) {
	both := []string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1", "MINFER_FUSE_NORM_Q8=1"}
	for _, c := range []struct {
		env         []string
		lever, want string
	}{
		{both, "MINFER_FUSE_RES_NORM_Q8", ""},
		{both, "MINFER_FUSE_FFN_Q8", ""},
		{[]string{"MINFER_FUSE_FFN_Q8=1", "MINFER_FUSE_RES_NORM_Q8=1"}, "MINFER_FUSE_RES_NORM_Q8", "MINFER_FUSE_NORM_Q8=0"},
		{append(append([]string{}, both...), "MINFER_MMVQ_SPLIT=1"), "MINFER_FUSE_RES_NORM_Q8", "MINFER_MMVQ_SPLIT=1"},
		{append(append([]string{}, both...), "MINFER_NO_FUSE_FFN=1"), "MINFER_FUSE_FFN_Q8", "MINFER_NO_FUSE_FFN=1"},
	} {
		lv, err := levers.Parse(c.env)
		if err != nil {
			t.Fatal(err)
		}
		err = optInConflict(lv, c.lever)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v, %s: %v, want a refusal naming %q (none when empty)", c.env, c.lever, err, c.want)
		}
	}
}

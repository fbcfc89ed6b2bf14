package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// f32w makes an F32 weight of dims from vals.
func f32w(name string, vals []float32, dims ...int) graph.Weight {
	buf := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	return graph.Weight{Name: name, Type: quant.F32, Dims: dims, Data: buf}
}

func randVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// harness builds a graph whose f32 operands are rows of registered weights
// gathered by GetRows with ids 0..nt-1 (the token input).
type harness struct {
	t  *testing.T
	be *Backend
	b  *graph.Builder
	nt int
}

func newHarness(t *testing.T, threads, nt int, kvs *graph.KVSpec) *harness {
	t.Helper()
	be := New(Options{Threads: threads})
	t.Cleanup(func() { be.Close() })
	if kvs != nil {
		if err := be.AllocKV(*kvs); err != nil {
			t.Fatal(err)
		}
	}
	p := graph.Params{NT: nt, NCtx: 64}
	h := &harness{t: t, be: be, b: graph.NewBuilder(p), nt: nt}
	h.b.Input(graph.InputTokens, "ids")
	h.b.Input(graph.InputPositions, "pos")
	h.b.Input(graph.InputKVWindow, "kvw")
	return h
}

func (h *harness) reg(w graph.Weight) {
	h.t.Helper()
	if err := h.be.RegisterWeight(w); err != nil {
		h.t.Fatal(err)
	}
}

// operand registers vals as nt rows of n and returns the gathered node.
func (h *harness) operand(name string, vals []float32, n int) int {
	h.reg(f32w(name, vals, n, len(vals)/n))
	return h.b.GetRows(name, name, n, 0)
}

func (h *harness) run(out int, pos []int32, start int) []float32 {
	h.t.Helper()
	h.b.Output(out)
	g, err := h.b.Finish()
	if err != nil {
		h.t.Fatal(err)
	}
	pl, err := graph.Compile(g, []graph.Backend{h.be})
	if err != nil {
		h.t.Fatal(err)
	}
	defer pl.Close()
	ids := make([]int32, h.nt)
	for i := range ids {
		ids[i] = int32(i)
	}
	if pos == nil {
		pos = make([]int32, h.nt)
	}
	for _, w := range []struct {
		id int
		v  []int32
	}{{g.Tokens, ids}, {g.Positions, pos}, {g.KVWindow, []int32{int32(start), int32(start + h.nt)}}} {
		if err := pl.WriteI32(w.id, w.v); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := pl.Run(); err != nil {
		h.t.Fatal(err)
	}
	y := make([]float32, g.Nodes[g.Output].Shape.N())
	if err := pl.Read(g.Output, y); err != nil {
		h.t.Fatal(err)
	}
	return y
}

func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*math.Max(1, math.Abs(want[i])) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, want %v (|diff| %g > %g)", what, i, got[i], want[i], d, tol)
		}
	}
}

func TestRmsNorm_MatchesHandComputedWithin1e6(t *testing.T) {
	h := newHarness(t, 2, 2, nil)
	x := h.operand("x", []float32{1, 2, 3, 4, -1, 0, 0, 1}, 4)
	h.reg(f32w("w", []float32{1, 0.5, 2, -1}, 4))
	y := h.run(h.b.RmsNorm("n", x, "w", 1e-6), nil, 0)
	s1 := 1 / math.Sqrt(30.0/4+1e-6)
	s2 := 1 / math.Sqrt(2.0/4+1e-6)
	near(t, "rms_norm", y, []float64{1 * s1, 2 * s1 * 0.5, 3 * s1 * 2, -4 * s1, -1 * s2, 0, 0, -1 * s2}, 1e-6)
}

func TestRope_NeoxAndInterleavedMatchHandComputedWithin1e6(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	const pos, theta = 3, 100.0
	// angles of pair i: pos * theta^(-2i/4)
	a0, a1 := pos*1.0, pos*math.Pow(theta, -0.5)
	rot := func(x0, x1, a float64) (float64, float64) {
		return x0*math.Cos(a) - x1*math.Sin(a), x0*math.Sin(a) + x1*math.Cos(a)
	}
	// neox pairs (0,2), (1,3)
	n0, n2 := rot(1, 3, a0)
	n1, n3 := rot(2, 4, a1)
	// interleaved pairs (0,1), (2,3)
	i0, i1 := rot(1, 2, a0)
	i2, i3 := rot(3, 4, a1)
	for _, c := range []struct {
		style graph.RopeStyle
		want  []float64
	}{{graph.RopeNeox, []float64{n0, n1, n2, n3}}, {graph.RopeInterleaved, []float64{i0, i1, i2, i3}}} {
		h := newHarness(t, 1, 1, nil)
		q := h.b.Reshape("q", h.operand("x", x, 4), graph.Sh(4, 1, 1))
		y := h.run(h.b.Rope("r", q, 1, theta, c.style), []int32{pos}, 0)
		near(t, "rope", y, c.want, 1e-6)
	}
}

func TestSoftmax_MatchesHandComputedWithin1e6(t *testing.T) {
	h := newHarness(t, 1, 1, nil)
	y := h.run(h.b.Softmax("s", h.operand("x", []float32{1, 2, 3}, 3), 0.5), nil, 0)
	e := []float64{math.Exp(0.5), math.Exp(1), math.Exp(1.5)}
	s := e[0] + e[1] + e[2]
	near(t, "softmax", y, []float64{e[0] / s, e[1] / s, e[2] / s}, 1e-6)
}

func TestSwiGLU_MatchesHandComputedWithin1e6(t *testing.T) {
	h := newHarness(t, 1, 1, nil)
	g := h.operand("g", []float32{-2, 0, 1, 3}, 4)
	u := h.operand("u", []float32{1, 5, 2, -1}, 4)
	y := h.run(h.b.SwiGLU("s", g, u), nil, 0)
	silu := func(x float64) float64 { return x / (1 + math.Exp(-x)) }
	near(t, "swiglu", y, []float64{silu(-2), 0, 2 * silu(1), -silu(3)}, 1e-6)
}

func TestGetRows_Q8_0MatchesDequantizeBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := randVals(r, 64*5)
	buf := make([]byte, 5*34*2)
	if err := quant.Quantize(quant.Q8_0, vals, buf); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(vals))
	if err := quant.Dequantize(quant.Q8_0, buf, want); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 2, 2, nil)
	h.reg(graph.Weight{Name: "e", Type: quant.Q8_0, Dims: []int{64, 5}, Data: buf})
	y := h.run(h.b.GetRows("g", "e", 64, 0), nil, 0)
	for i := range y {
		if y[i] != want[i] {
			t.Fatalf("value %d: %v, want %v", i, y[i], want[i])
		}
	}
}

func TestMatMul_F32AndQ8_0WithBiasWithin1e5(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const k, m, nt = 64, 7, 3
	x, w, bias := randVals(r, k*nt), randVals(r, k*m), randVals(r, m)
	ref := func(wv, x []float32) []float64 {
		out := make([]float64, m*nt)
		for j := 0; j < nt; j++ {
			for i := 0; i < m; i++ {
				s := float64(bias[i])
				for c := 0; c < k; c++ {
					s += float64(wv[i*k+c]) * float64(x[j*k+c])
				}
				out[j*m+i] = s
			}
		}
		return out
	}
	h := newHarness(t, 2, nt, nil)
	h.reg(f32w("w", w, k, m))
	h.reg(f32w("b", bias, m))
	near(t, "matmul f32", h.run(h.b.MatMul("mm", h.operand("x", x, k), "w", "b", m), nil, 0), ref(w, x), 1e-5)

	q := make([]byte, m*2*34)
	if err := quant.Quantize(quant.Q8_0, w, q); err != nil {
		t.Fatal(err)
	}
	wd := make([]float32, len(w))
	if err := quant.Dequantize(quant.Q8_0, q, wd); err != nil {
		t.Fatal(err)
	}
	h = newHarness(t, 2, nt, nil)
	h.reg(graph.Weight{Name: "w", Type: quant.Q8_0, Dims: []int{k, m}, Data: q})
	h.reg(f32w("b", bias, m))
	// the activations are quantized to Q8_0 too: the reference uses both
	// dequantized operands, so only the f32 accumulation differs
	xq := make([]byte, nt*2*34)
	if err := quant.Quantize(quant.Q8_0, x, xq); err != nil {
		t.Fatal(err)
	}
	xd := make([]float32, len(x))
	if err := quant.Dequantize(quant.Q8_0, xq, xd); err != nil {
		t.Fatal(err)
	}
	near(t, "matmul q8_0", h.run(h.b.MatMul("mm", h.operand("x", x, k), "w", "b", m), nil, 0), ref(wd, xd), 1e-5)
}

// attnRef is causal GQA attention in float64 over rows k, v [cell][nkv*hd].
func attnRef(q, k, v []float32, nh, nkv, hd, start, nt int) []float64 {
	out := make([]float64, nh*hd*nt)
	for t := 0; t < nt; t++ {
		for h := 0; h < nh; h++ {
			kh := h / (nh / nkv)
			cell := start + t
			sc := make([]float64, cell+1)
			mx := math.Inf(-1)
			for c := 0; c <= cell; c++ {
				s := 0.0
				for d := 0; d < hd; d++ {
					s += float64(q[(t*nh+h)*hd+d]) * float64(k[c*nkv*hd+kh*hd+d])
				}
				sc[c] = s / math.Sqrt(float64(hd))
				mx = math.Max(mx, sc[c])
			}
			sum := 0.0
			for c := range sc {
				sc[c] = math.Exp(sc[c] - mx)
				sum += sc[c]
			}
			for c := range sc {
				for d := 0; d < hd; d++ {
					out[(t*nh+h)*hd+d] += sc[c] / sum * float64(v[c*nkv*hd+kh*hd+d])
				}
			}
		}
	}
	return out
}

func buildAttn(t *testing.T, threads int, q, k, v []float32, nh, nkv, hd, nt int) []float32 {
	h := newHarness(t, threads, nt, &graph.KVSpec{Format: kv.F32, NLayer: 1, NCtx: 16, RowLen: nkv * hd})
	qn := h.b.Reshape("qh", h.operand("q", q, nh*hd), graph.Sh(hd, nh, nt))
	sk := h.b.KvcacheStore("sk", h.operand("k", k, nkv*hd), 2, 0, graph.SideK)
	sv := h.b.KvcacheStore("sv", h.operand("v", v, nkv*hd), 2, 0, graph.SideV)
	return h.run(h.b.Attn("attn", qn, 2, 0, nkv, 0, sk, sv), nil, 0)
}

func TestAttn_GQACausalMatchesFloat64Within1e5(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const nh, nkv, hd, nt = 4, 2, 8, 5
	q, k, v := randVals(r, nh*hd*nt), randVals(r, nkv*hd*nt), randVals(r, nkv*hd*nt)
	near(t, "attn", buildAttn(t, 2, q, k, v, nh, nkv, hd, nt), attnRef(q, k, v, nh, nkv, hd, 0, nt), 1e-5)
}

// Every kernel computes each output element in one goroutine in a fixed
// order: the results are bitwise identical for 1, 2, 3 and 8 threads.
func TestDeterminism_BitwiseAcrossThreadCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const k, m, nt = 256, 300, 3
	x, w := randVals(r, k*nt), randVals(r, k*m)
	types := []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K}
	const nh, nkv, hd, ant = 6, 2, 16, 7
	q, kk, v := randVals(r, nh*hd*ant), randVals(r, nkv*hd*ant), randVals(r, nkv*hd*ant)
	var ref [][]float32
	for _, threads := range []int{1, 2, 3, 8} {
		var outs [][]float32
		for _, typ := range types {
			nb, err := typ.RowBytes(k * m)
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, nb)
			if err := quant.Quantize(typ, w, data); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			h := newHarness(t, threads, nt, nil)
			h.reg(graph.Weight{Name: "w", Type: typ, Dims: []int{k, m}, Data: data})
			outs = append(outs, h.run(h.b.MatMul("mm", h.operand("x", x, k), "w", "", m), nil, 0))
		}
		outs = append(outs, buildAttn(t, threads, q, kk, v, nh, nkv, hd, ant))
		if ref == nil {
			ref = outs
			continue
		}
		for i := range outs {
			for j := range outs[i] {
				if math.Float32bits(outs[i][j]) != math.Float32bits(ref[i][j]) {
					t.Fatalf("threads %d, case %d, value %d: %v vs %v with 1 thread", threads, i, j, outs[i][j], ref[i][j])
				}
			}
		}
	}
}

func TestExecute_BadInputIsAnErrorNotAPanic(t *testing.T) {
	be := New(Options{Threads: 2})
	defer be.Close()
	if err := be.RegisterWeight(graph.Weight{Name: "w", Type: quant.Q8_0, Dims: []int{33, 2}, Data: make([]byte, 100)}); err == nil {
		t.Error("row of 33 Q8_0 values accepted")
	}
	if err := be.RegisterWeight(graph.Weight{Name: "w", Type: quant.F32, Dims: []int{4, 2}, Data: make([]byte, 8)}); err == nil {
		t.Error("short data accepted")
	}
	n := &graph.Node{Op: graph.OpMatMul, Weight: "missing", Shape: graph.Sh(2, 1)}
	if err := be.SupportsOp(n); err == nil {
		t.Error("matmul of an unregistered weight supported")
	}
	buf, _ := be.Alloc(4)
	if err := be.Execute(n, []graph.Tensor{{Buf: buf, Len: 4}}, graph.Tensor{Buf: buf, Len: 2}); err == nil {
		t.Error("execute with a missing weight: no error")
	}
	if err := be.Execute(&graph.Node{Op: graph.OpAttn, Shape: graph.Sh(4, 1)}, []graph.Tensor{{Buf: buf, Len: 4}, {Buf: 99, Len: 2}}, graph.Tensor{Buf: buf, Len: 4}); err == nil {
		t.Error("execute with an unknown buffer: no error")
	}
	if err := be.Write(buf, 3, []float32{1, 2}); err == nil {
		t.Error("write past the end: no error")
	}
}

func TestPermute_SwapsAxes(t *testing.T) {
	h := newHarness(t, 1, 1, nil)
	x := h.b.Reshape("x23", h.operand("x", []float32{1, 2, 3, 4, 5, 6}, 6), graph.Sh(3, 2))
	y := h.run(h.b.Permute("p", x, [4]int{1, 0, 2, 3}), nil, 0)
	near(t, "permute", y, []float64{1, 4, 2, 5, 3, 6}, 0)
}

// Stored rows come back through KvcacheLoad (f16: exactly the rounded
// values), and CopyKVCells moves them, overlapping ranges included.
func TestKvcache_StoreLoadAndCopyCells(t *testing.T) {
	const rl, nt = 8, 3
	vals := make([]float32, rl*nt)
	for i := range vals {
		vals[i] = float32(i) * 0.25
	}
	h := newHarness(t, 1, nt, &graph.KVSpec{Format: kv.F16, NLayer: 2, NCtx: 64, RowLen: rl})
	st := h.b.KvcacheStore("st", h.operand("v", vals, rl), 2, 1, graph.SideV)
	y := h.run(h.b.KvcacheLoad("ld", 2, 1, graph.SideV, rl, st), nil, 2)
	want := make([]float64, rl*64)
	for i, v := range vals {
		want[2*rl+i] = float64(v) // cells 2..4; values are exact in f16
	}
	near(t, "kv load", y[:5*rl], want[:5*rl], 0)
	if err := h.be.CopyKVCells(2, 3, 3); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, rl)
	reg := h.be.KV().V(1)
	rb := h.be.KV().RowBytes()
	kv.LoadRow(kv.F16, reg[5*rb:6*rb], got)
	near(t, "moved cell", got, want[4*rl:5*rl], 0)
	if err := h.be.CopyKVCells(62, 63, 3); err == nil {
		t.Error("copy past the context: no error")
	}
}

func TestAttn_WindowLimitsTheCellsRead(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const nh, nkv, hd, nt = 2, 1, 4, 4
	q, k, v := randVals(r, nh*hd*nt), randVals(r, nkv*hd*nt), randVals(r, nkv*hd*nt)
	h := newHarness(t, 2, nt, &graph.KVSpec{Format: kv.F32, NLayer: 1, NCtx: 16, RowLen: nkv * hd})
	qn := h.b.Reshape("qh", h.operand("q", q, nh*hd), graph.Sh(hd, nh, nt))
	sk := h.b.KvcacheStore("sk", h.operand("k", k, nkv*hd), 2, 0, graph.SideK)
	sv := h.b.KvcacheStore("sv", h.operand("v", v, nkv*hd), 2, 0, graph.SideV)
	y := h.run(h.b.Attn("attn", qn, 2, 0, nkv, 1, sk, sv), nil, 0)
	// a window of one cell: each query sees only its own V row
	want := make([]float64, len(y))
	for t := 0; t < nt; t++ {
		for hh := 0; hh < nh; hh++ {
			for d := 0; d < hd; d++ {
				want[(t*nh+hh)*hd+d] = float64(v[t*hd+d])
			}
		}
	}
	near(t, "attn window 1", y, want, 1e-6)
}

// The CPU executes the fused nodes it offers, and only those: a FusedQKV or
// FusedFFN node with a folded norm (FuseNormQ8), a per-head q/k norm in the
// QKV tail, a residual MatMulAdd, an attention folded into one
// (FuseAttnQ8) and a fused QKV folded into its rope/store
// (FuseQKVRopeStore) are the CUDA backend's alone.
func TestSupportsFused_OnlyTheFusionsItExecutes(t *testing.T) {
	b := New(Options{})
	for k, want := range map[graph.FuseKind]bool{
		graph.FuseQKV: true, graph.FuseFFN: true, graph.FuseQkvBiasRopeStore: true,
		graph.FuseQkNormRopeStore: false, graph.FuseMatMulAdd: false, graph.FuseNormQ8: false, graph.FuseAttnQ8: false,
		graph.FuseQKVRopeStore: false,
	} {
		if got := b.SupportsFused(k); got != want {
			t.Errorf("SupportsFused(%d) = %v, want %v", k, got, want)
		}
	}
}

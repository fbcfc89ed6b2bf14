package cuda

// The device suite: the CUDA backend against the CPU backend (the numerical
// reference). Every test skips with a message when no device answers, so
// `go test ./...` passes on a CPU machine; on the GPU machine it runs from a
// prebuilt test binary (scripts/device-suite.sh). The fatbin comes from
// MINFER_KERNELS or lies next to the test binary.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// dsLevers parses the environment plus extra MINFER_* settings. When the
// environment sets MINFER_ONE_COPY=1 (an A/B's arm B, the suite gate's
// settings) and a test's own settings route some Q8_0 / Q6_K matmul to a
// kernel that reads GGUF bytes, which the backend refuses beside one copy
// (onecopy.go), the test's settings win: MINFER_ONE_COPY=0 is added and
// logged. A test that sets MINFER_ONE_COPY itself keeps what it set.
func dsLevers(t testing.TB, extra ...string) levers.Config {
	t.Helper()
	env := append(os.Environ(), extra...)
	cfg, err := levers.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	if oneCopyConflict(cfg) != nil && !slices.ContainsFunc(extra, func(s string) bool { return strings.HasPrefix(s, "MINFER_ONE_COPY=") }) {
		t.Logf("MINFER_ONE_COPY=0 for this test: its settings %v need the GGUF bytes (%v)", extra, oneCopyConflict(cfg))
		env = append(env, "MINFER_ONE_COPY=0")
		if cfg, err = levers.Parse(env); err != nil {
			t.Fatal(err)
		}
	}
	// An A/B's suite gate runs every test with arm B's setting of an opt-in
	// attention form; a test that sends that attention to another kernel
	// drops it (as the backend would refuse the pair), unless it pins the
	// lever itself.
	for _, lever := range optInRequires {
		if optInConflict(cfg, lever) == nil || slices.ContainsFunc(extra, func(s string) bool { return strings.HasPrefix(s, lever+"=") }) {
			continue
		}
		t.Logf("%s=0 for this test: its settings %v send the attention elsewhere (%v)", lever, extra, optInConflict(cfg, lever))
		env = append(env, lever+"=0")
		if cfg, err = levers.Parse(env); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// dsBackend opens a CUDA backend or skips the test when no device answers.
func dsBackend(t *testing.T, cfg levers.Config) *Backend {
	t.Helper()
	b, err := New(Options{Levers: cfg, Logf: t.Logf})
	if errors.Is(err, driver.ErrNoDevice) {
		t.Skipf("no CUDA device answers: %v", err)
	}
	if err != nil {
		t.Fatalf("cuda backend (build the kernels with scripts/build-kernels.sh, pass MINFER_KERNELS): %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return b
}

// dsNeedDevice skips when no device answers (for tests that build engines).
func dsNeedDevice(t testing.TB) {
	t.Helper()
	b, err := New(Options{Levers: dsLevers(t)})
	if errors.Is(err, driver.ErrNoDevice) {
		t.Skipf("no CUDA device answers: %v", err)
	}
	if err != nil {
		t.Fatalf("cuda backend: %v", err)
	}
	b.Close()
}

func dsF32Weight(name string, vals []float32, dims ...int) graph.Weight {
	buf := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	return graph.Weight{Name: name, Type: quant.F32, Dims: dims, Data: buf}
}

func dsRand(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// dsQuantWeight quantizes rows x k random values to typ.
func dsQuantWeight(t *testing.T, r *rand.Rand, name string, typ quant.Type, k, rows int) graph.Weight {
	t.Helper()
	vals := dsRand(r, k*rows, 0.5)
	if typ == quant.F32 {
		return dsF32Weight(name, vals, k, rows)
	}
	tr, err := quant.TraitsOf(typ)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := typ.RowBytes(k)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rb*rows)
	for i := range rows {
		tr.Quantize(vals[i*k:(i+1)*k], data[i*rb:(i+1)*rb])
	}
	return graph.Weight{Name: name, Type: typ, Dims: []int{k, rows}, Data: data}
}

// dsCase is one graph run on both backends.
type dsCase struct {
	name    string
	nt      int
	nCtx    int
	kv      *graph.KVSpec
	start   int // KV window start
	weights []graph.Weight
	build   func(b *graph.Builder, ids, pos, kvw int) int
	tol     float64 // max |diff| allowed (relative to max(1, |cpu|))
	// defined is how many leading output values the graph defines (0: all);
	// a KV load leaves the cells past the KV length as the buffer held them.
	defined int
}

// dsRun compiles c on one backend and returns the output.
func dsRun(t *testing.T, c dsCase, be graph.Backend) ([]float32, error) {
	y, _, err := dsRunOn(t, c, be)
	return y, err
}

// dsRunOn compiles c on the backends (the scheduler's order: a node goes to
// the first that supports it) and returns the output and the backend of
// each split in order.
func dsRunOn(t *testing.T, c dsCase, bes ...graph.Backend) ([]float32, []int, error) {
	t.Helper()
	for _, be := range bes {
		for _, w := range c.weights {
			if err := be.RegisterWeight(w); err != nil {
				return nil, nil, err
			}
		}
	}
	be := bes[0]
	if c.kv != nil {
		if err := be.AllocKV(*c.kv); err != nil {
			return nil, nil, err
		}
	}
	nCtx := c.nCtx
	if nCtx == 0 {
		nCtx = 64
	}
	b := graph.NewBuilder(graph.Params{Arch: "test:" + c.name, NT: c.nt, NCtx: nCtx})
	ids := b.Input(graph.InputTokens, "ids")
	pos := b.Input(graph.InputPositions, "pos")
	kvw := b.Input(graph.InputKVWindow, "kvw")
	b.Output(c.build(b, ids, pos, kvw))
	g, err := b.Finish()
	if err != nil {
		return nil, nil, err
	}
	pl, err := graph.Compile(g, bes)
	if err != nil {
		return nil, nil, err
	}
	defer pl.Close()
	var splits []int
	for _, sp := range pl.Splits {
		splits = append(splits, sp.Backend)
	}
	idv := make([]int32, c.nt)
	posv := make([]int32, c.nt)
	for i := range idv {
		idv[i] = int32(i)
		posv[i] = int32(c.start + i*3 + 1)
	}
	for _, w := range []struct {
		id int
		v  []int32
	}{{g.Tokens, idv}, {g.Positions, posv}, {g.KVWindow, []int32{int32(c.start), int32(c.start + c.nt)}}} {
		if w.id < 0 {
			continue
		}
		if err := pl.WriteI32(w.id, w.v); err != nil {
			return nil, nil, err
		}
	}
	pl.SetKVLength(c.start + c.nt) // as the engine's step does (the decode route by depth)
	if err := pl.Run(); err != nil {
		return nil, nil, err
	}
	y := make([]float32, g.Nodes[g.Output].Shape.N())
	if err := pl.Read(g.Output, y); err != nil {
		return nil, nil, err
	}
	return y, splits, nil
}

// dsCheck runs dsCompare and fails the test when the diff is over c.tol.
func dsCheck(t *testing.T, c dsCase) {
	t.Helper()
	if d := dsCompare(t, c); d > c.tol {
		t.Errorf("%s: max |diff| %g > %g", c.name, d, c.tol)
	}
}

// dsCompare runs c on a fresh CUDA backend and a fresh CPU backend and
// returns the largest |diff| relative to max(1, |cpu|).
func dsCompare(t *testing.T, c dsCase) float64 {
	t.Helper()
	dev := dsBackend(t, dsLevers(t))
	host := cpu.New(cpu.Options{Threads: 2})
	defer host.Close()
	want, err := dsRun(t, c, host)
	if err != nil {
		t.Fatalf("%s: cpu: %v", c.name, err)
	}
	got, err := dsRun(t, c, dev)
	if err != nil {
		t.Fatalf("%s: cuda: %v", c.name, err)
	}
	if c.defined > 0 && len(got) >= c.defined && len(want) >= c.defined {
		got, want = got[:c.defined], want[:c.defined]
	}
	return dsMaxDiff(t, c.name, got, want)
}

func dsMaxDiff(t *testing.T, what string, got, want []float32) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) != math.IsNaN(w) {
			t.Fatalf("%s[%d] = %v, cpu %v", what, i, got[i], want[i])
		}
		if math.IsNaN(g) {
			continue
		}
		worst = max(worst, math.Abs(g-w)/math.Max(1, math.Abs(w)))
	}
	return worst
}

// operand registers vals as rows of n gathered by the ids 0..nt-1.
func dsOperand(c *dsCase, name string, vals []float32, n int) func(b *graph.Builder, ids int) int {
	c.weights = append(c.weights, dsF32Weight(name, vals, n, len(vals)/n))
	return func(b *graph.Builder, ids int) int { return b.GetRows(name, name, n, ids) }
}

func TestDeviceOps_ElementwiseNormRopeSoftmaxMatchCPUWithin1e3(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, nt := range []int{1, 3, 9} {
		for _, n := range []int{4, 33, 64, 896, 1000} {
			var c dsCase
			c.nt, c.tol = nt, 1e-3
			a := dsOperand(&c, "a", dsRand(r, n*nt, 1), n)
			bb := dsOperand(&c, "b", dsRand(r, n*nt, 1), n)
			c.weights = append(c.weights, dsF32Weight("nw", dsRand(r, n, 1), n))
			for _, op := range []string{"add", "mul", "add_row", "mul_row", "silu", "swiglu", "scale", "softmax", "rms_norm"} {
				cc := c
				cc.name = fmt.Sprintf("%s/nt%d/n%d", op, nt, n)
				cc.build = func(b *graph.Builder, ids, pos, kvw int) int {
					x, y := a(b, ids), bb(b, ids)
					switch op {
					case "add":
						return b.Add("y", x, y)
					case "mul":
						return b.Mul("y", x, y)
					case "add_row":
						return b.Add("y", x, b.View("row", y, graph.Sh(n), 0))
					case "mul_row":
						return b.Mul("y", x, b.View("row", y, graph.Sh(n), 0))
					case "silu":
						return b.Silu("y", x)
					case "swiglu":
						return b.SwiGLU("y", x, y)
					case "scale":
						return b.Scale("y", x, 0.37)
					case "softmax":
						return b.Softmax("y", x, 0.7)
					case "rms_norm":
						return b.RmsNorm("y", x, "nw", 1e-6)
					}
					return 0
				}
				dsCheck(t, cc)
			}
		}
	}
}

func TestDeviceOps_RopeAndQkNormMatchCPUWithin1e3(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, nt := range []int{1, 5} {
		for _, hd := range []int{6, 64, 128} {
			for _, style := range []graph.RopeStyle{graph.RopeNeox, graph.RopeInterleaved} {
				nh := 3
				var c dsCase
				c.nt, c.tol, c.start = nt, 1e-3, 7
				x := dsOperand(&c, "x", dsRand(r, hd*nh*nt, 1), hd*nh)
				c.weights = append(c.weights, dsF32Weight("qn", dsRand(r, hd, 1), hd))
				c.name = fmt.Sprintf("rope/nt%d/hd%d/style%d", nt, hd, style)
				c.build = func(b *graph.Builder, ids, pos, kvw int) int {
					v := b.Reshape("x3", x(b, ids), graph.Sh(hd, nh, nt))
					v = b.QkNorm("qn", v, "qn", 1e-6)
					return b.Rope("y", v, pos, 1e6, style)
				}
				dsCheck(t, c)
			}
		}
	}
}

func TestDeviceOps_GetRowsEveryTypeMatchesCPUWithin1e6(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, typ := range WeightTypes() {
		for _, k := range []int{256, 512} {
			var c dsCase
			c.nt, c.tol = 5, 1e-6
			c.weights = []graph.Weight{dsQuantWeight(t, r, "emb", typ, k, 11)}
			c.name = fmt.Sprintf("get_rows/%s/k%d", typ, k)
			c.build = func(b *graph.Builder, ids, pos, kvw int) int { return b.GetRows("y", "emb", k, ids) }
			dsCheck(t, c)
		}
	}
}

// TestDeviceOps_MatMulEveryTypeMatchesReferenceWithinItsClass checks every
// weight type and path against a float64 reference of the dequantized
// weights times the f32 activations (what the device computes), per output
// element relative to sum_i |w_i x_i| + |bias|: the mmv path (nt <= 8) is an
// f32 reorder (bar 1e-5), the GEMM path (nt >= 9) rounds each dequantized
// weight to f16 (bar 2^-10), the decode mmvq path (nt = 1, Q8_0 / Q4_0 /
// Q4_1 / Q5_0 / Q5_1 / Q4_K / Q6_K) rounds the activations to Q8_1 (bar 1e-2). Against the CPU backend the bar is the
// activation-quant class (1e-2): the CPU rounds activations to Q8_0/Q8_K
// for quantized weights, the device reads them in f32 (ARCHITECTURE rule 3).
func TestDeviceOps_MatMulEveryTypeMatchesReferenceWithinItsClass(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, typ := range WeightTypes() {
		for _, sh := range []struct{ k, m, nt int }{{256, 33, 1}, {512, 64, 3}, {256, 129, 8}, {256, 70, 9}, {768, 257, 17}, {256, 128, 64}} {
			var c dsCase
			c.nt = sh.nt
			xv := dsRand(r, sh.k*sh.nt, 1)
			x := dsOperand(&c, "x", xv, sh.k)
			w := dsQuantWeight(t, r, "w", typ, sh.k, sh.m)
			bias := dsRand(r, sh.m, 1)
			c.weights = append(c.weights, w, dsF32Weight("bias", bias, sh.m))
			c.name = fmt.Sprintf("mul_mat/%s/k%d/m%d/nt%d", typ, sh.k, sh.m, sh.nt)
			c.build = func(b *graph.Builder, ids, pos, kvw int) int { return b.MatMul("y", x(b, ids), "w", "bias", sh.m) }
			dev := dsBackend(t, dsLevers(t))
			got, err := dsRun(t, c, dev)
			if err != nil {
				t.Fatalf("%s: cuda: %v", c.name, err)
			}
			host := cpu.New(cpu.Options{Threads: 2})
			want, err := dsRun(t, c, host)
			host.Close()
			if err != nil {
				t.Fatalf("%s: cpu: %v", c.name, err)
			}
			wf := make([]float32, sh.k*sh.m)
			if err := quant.Dequantize(typ, w.Data, wf); err != nil {
				t.Fatal(err)
			}
			class := MatMulTolerance(typ, sh.nt, dev.MatMulOptions())
			bar := 1e-5
			switch class {
			case "f16-weight-tile":
				bar = 1.0 / 1024
			case "activation-quantization-q8_1":
				// The decode mmvq path rounds the activations to Q8_1
				// (mmvq_device_test.go checks it against its exact reference).
				bar = 1e-2
			}
			worstRef, worstCPU := 0.0, 0.0
			for tk := range sh.nt {
				for j := range sh.m {
					var ref, mag float64
					for i := range sh.k {
						p := float64(wf[j*sh.k+i]) * float64(xv[tk*sh.k+i])
						ref += p
						mag += math.Abs(p)
					}
					ref += float64(bias[j])
					mag += math.Abs(float64(bias[j])) + 1e-6
					g := float64(got[tk*sh.m+j])
					worstRef = max(worstRef, math.Abs(g-ref)/mag)
					worstCPU = max(worstCPU, math.Abs(g-float64(want[tk*sh.m+j]))/mag)
				}
			}
			t.Logf("%s (%s): max |dev-ref|/sum|wx| %.3g (bar %.3g), max |dev-cpu|/sum|wx| %.3g (bar 1e-2)", c.name, class, worstRef, bar, worstCPU)
			if worstRef > bar || math.IsNaN(worstRef) {
				t.Errorf("%s: max |dev-ref|/sum|wx| %.3g > %.3g (%s)", c.name, worstRef, bar, class)
			}
			if worstCPU > 1e-2 || math.IsNaN(worstCPU) {
				t.Errorf("%s: max |dev-cpu|/sum|wx| %.3g > 1e-2 (activation-quant class)", c.name, worstCPU)
			}
		}
	}
}

// TestDeviceOps_KVStoreLoadAttentionEveryLayoutMatchesCPUWithin1e3 stores
// k and v rows at a window start > 0 and attends over them, for every KV
// format, decode and prefill shapes.
func TestDeviceOps_KVStoreLoadAttentionEveryLayoutMatchesCPUWithin1e3(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, f := range kv.Formats() {
		for _, nt := range []int{1, 6} {
			for _, hd := range []int{64, 128} {
				nh, nkv := 4, 2
				rl := nkv * hd
				var c dsCase
				c.nt, c.start, c.tol = nt, 3, 1e-3
				c.kv = &graph.KVSpec{Format: f, NLayer: 1, NCtx: 64, RowLen: rl}
				q := dsOperand(&c, "q", dsRand(r, hd*nh*nt, 1), hd*nh)
				kk := dsOperand(&c, "k", dsRand(r, rl*nt, 1), rl)
				vv := dsOperand(&c, "v", dsRand(r, rl*nt, 1), rl)
				c.name = fmt.Sprintf("attn/%s/nt%d/hd%d", f, nt, hd)
				c.build = func(b *graph.Builder, ids, pos, kvw int) int {
					sk := b.KvcacheStore("sk", kk(b, ids), kvw, 0, graph.SideK)
					sv := b.KvcacheStore("sv", vv(b, ids), kvw, 0, graph.SideV)
					qq := b.Reshape("q3", q(b, ids), graph.Sh(hd, nh, nt))
					a := b.Attn("y", qq, kvw, 0, nkv, 0, sk, sv)
					ld := b.KvcacheLoad("ld", kvw, 0, graph.SideV, rl, sk, sv)
					_ = ld
					return a
				}
				dsCheck(t, c)
				c.name = fmt.Sprintf("kv_load/%s/nt%d/hd%d", f, nt, hd)
				c.build = func(b *graph.Builder, ids, pos, kvw int) int {
					sk := b.KvcacheStore("sk", kk(b, ids), kvw, 0, graph.SideK)
					return b.KvcacheLoad("y", kvw, 0, graph.SideK, rl, sk)
				}
				// Cells [0, start+nt) are defined: the zeroed cells below
				// the window and the stored rows. The rest of the output
				// is whatever the pool's buffer held (2026-12-02 on the
				// H200: another test's leftovers, compared as a diff of 2-47).
				c.defined = (c.start + nt) * rl
				if d := dsCompare(t, c); d > 1e-6 {
					t.Errorf("%s: max |diff| %g > 1e-6", c.name, d)
				}
			}
		}
	}
}

func TestDeviceOps_PermuteMatchesCPUBitwise(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(11, 12))
	var c dsCase
	c.nt = 4
	x := dsOperand(&c, "x", dsRand(r, 6*5*4, 1), 30)
	c.name = "permute"
	c.build = func(b *graph.Builder, ids, pos, kvw int) int {
		v := b.Reshape("x3", x(b, ids), graph.Sh(6, 5, 4))
		return b.Permute("y", v, [4]int{1, 2, 0, 3})
	}
	if d := dsCompare(t, c); d != 0 {
		t.Errorf("permute: max |diff| %g, want 0", d)
	}
}

// dsKVBytes runs a KV store of nt rows at start on both backends and
// returns both regions' bytes (layer 0, K).
func TestKVLayouts_StoreBytesAndCellMovesMatchCPUBitwise(t *testing.T) {
	dsNeedDevice(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, f := range kv.Formats() {
		rl, nCtx, nt := 64, 32, 12
		spec := graph.KVSpec{Format: f, NLayer: 2, NCtx: nCtx, RowLen: rl}
		var c dsCase
		c.nt, c.start, c.kv, c.nCtx = nt, 2, &spec, nCtx
		x := dsOperand(&c, "x", dsRand(r, rl*nt, 1), rl)
		c.name = "kvstore/" + f.String()
		c.build = func(b *graph.Builder, ids, pos, kvw int) int {
			s := b.KvcacheStore("s", x(b, ids), kvw, 1, graph.SideK)
			return b.KvcacheLoad("y", kvw, 1, graph.SideK, rl, s)
		}
		dev := dsBackend(t, dsLevers(t))
		host := cpu.New(cpu.Options{Threads: 2})
		if _, err := dsRun(t, c, host); err != nil {
			t.Fatal(err)
		}
		if _, err := dsRun(t, c, dev); err != nil {
			t.Fatal(err)
		}
		check := func(what string) {
			t.Helper()
			got, err := dev.ReadKV(1, graph.SideK)
			if err != nil {
				t.Fatal(err)
			}
			want := host.KV().K(1)
			if string(got) != string(want[:len(got)]) {
				t.Errorf("%s %s: device KV bytes differ from the CPU's", f, what)
			}
		}
		check("store")
		for _, mv := range [][3]int{{2, 5, 8}, {6, 1, 9}, {0, 20, 12}} {
			if err := host.CopyKVCells(mv[0], mv[1], mv[2]); err != nil {
				t.Fatal(err)
			}
			if err := dev.CopyKVCells(mv[0], mv[1], mv[2]); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("move %v", mv))
		}
		host.Close()
	}
}

func TestPool_RoundTripExactReuseAndGeneration(t *testing.T) {
	b := dsBackend(t, dsLevers(t))
	r := rand.New(rand.NewPCG(15, 16))
	id, err := b.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	vals := dsRand(r, 1000, 1)
	if err := b.Write(id, 0, vals); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 1000)
	if err := b.Read(id, 0, got); err != nil {
		t.Fatal(err)
	}
	if d := dsMaxDiff(t, "round trip", got, vals); d != 0 {
		t.Fatalf("round trip differs: %g", d)
	}
	if err := b.Free(id); err != nil {
		t.Fatal(err)
	}
	gen := b.PoolGeneration()
	id2, err := b.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	if id2 != id || b.PoolGeneration() != gen {
		t.Errorf("exact-size alloc after free: id %d (want %d), generation %d -> %d (want unchanged)", id2, id, gen, b.PoolGeneration())
	}
	if _, err := b.Alloc(1001); err != nil {
		t.Fatal(err)
	}
	if b.PoolGeneration() == gen {
		t.Errorf("a new allocation did not move the pool generation")
	}
	_, err = b.Alloc(1 << 40)
	if err == nil || !strings.Contains(err.Error(), "1099511627776 elements") {
		t.Errorf("OOM: got %v, want an error naming the request of 1099511627776 elements", err)
	}
	t.Logf("OOM error: %v", err)
	if err := b.Free(graph.Buffer(999)); err == nil {
		t.Errorf("free of an unknown buffer: no error")
	}
}

func TestReadback_PinnedAndPageableRoundTripBitwise(t *testing.T) {
	for _, extra := range [][]string{nil, {"MINFER_NO_PINNED_READBACK=1"}} {
		b := dsBackend(t, dsLevers(t, extra...))
		r := rand.New(rand.NewPCG(17, 18))
		for _, n := range []int{1, 7, 64 << 10, 3 << 20} { // small, ring-slot, above a slot, above the readback minimum
			id, err := b.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			vals := dsRand(r, n, 1)
			for i := 0; i < 3; i++ { // several writes: the pinned ring turns over
				if err := b.Write(id, 0, vals); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]float32, n)
			if err := b.Read(id, 0, got); err != nil {
				t.Fatal(err)
			}
			if d := dsMaxDiff(t, fmt.Sprintf("%v n=%d", extra, n), got, vals); d != 0 {
				t.Errorf("%v n=%d: readback differs", extra, n)
			}
		}
		st := b.stage
		t.Logf("%v: pinned writes %d, pageable writes %d, readbacks %d", extra, st.pinnedWrites, st.pageableWrites, st.readbacks)
	}
}

// Whole-model tests.

var dsModels sync.Map // spec -> path

// dsSynth writes (once per process) a synthetic model.
func dsSynth(t testing.TB, shape, typ string) string {
	t.Helper()
	key := shape + "/" + typ
	if p, ok := dsModels.Load(key); ok {
		return p.(string)
	}
	dir := os.Getenv("SUITE_TMP")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("minfer-suite-%s-%s.gguf", shape, typ))
	qt, mix, err := synth.ParseType(typ)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Write(path, synth.Options{Shape: shape, Type: qt, Mix: mix, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	dsModels.Store(key, path)
	return path
}

func dsEngine(t testing.TB, path, device string, nCtx int, extra ...string) *model.Engine {
	t.Helper()
	cfg := dsLevers(t, extra...)
	opts := model.Options{Device: device, NCtx: nCtx, Levers: cfg, Logf: t.Logf}
	if device == "cuda" {
		opts.NewDevice = func(lv levers.Config, logf func(string, ...any)) (graph.Backend, error) {
			return New(Options{Levers: lv, Logf: logf})
		}
	}
	e, err := model.Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if device == "cuda" && e.Backend() != "cuda" {
		t.Fatalf("engine runs on %s, want cuda", e.Backend())
	}
	return e
}

func dsDeviceBackend(t testing.TB, e *model.Engine) *Backend {
	t.Helper()
	b, ok := e.Backends()[0].(*Backend)
	if !ok {
		t.Fatalf("engine's first backend is %s", e.Backends()[0].Name())
	}
	return b
}

// dsDecodeCensus runs prefill (dsPrompt) and steps decode steps with the
// census on and returns every step's logits, the decode steps' launches and
// the backend.
func dsDecodeCensus(t *testing.T, p string, steps int, extra ...string) ([][]float32, map[string]int64, *Backend) {
	t.Helper()
	e := dsEngine(t, p, "cuda", 256, append([]string{"MINFER_LAUNCH_CENSUS=1"}, extra...)...)
	b := dsDeviceBackend(t, e)
	l, err := e.Forward(dsPrompt, false)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{l}
	census := mfCensusDelta(b, func() {
		for i := range steps {
			if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
	})
	return out, census, b
}

func dsArgmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// dsTop2Margin is the gap between the largest and the second largest logit
// of v: an accumulation-order change may swap a top-1 only where it is
// small (the class's margin bar, 0.1).
func dsTop2Margin(v []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, x := range v {
		switch f := float64(x); {
		case f > a:
			a, b = f, a
		case f > b:
			b = f
		}
	}
	return a - b
}

// dsClassFlipMargin is the top-2 margin of ref above which a top-1 flip
// fails a class whose max |diff| bar is rel x max |ref|: each logit may
// move by that much, so a margin up to twice it can close, and never less
// than the class's fixed 0.2. The fixed 0.2 alone does not scale: on the
// random-weight 24-layer shapes max |ref| is ~10-20, and flips at margins
// of 0.3-0.4 came with rel L2 0.024 and max |diff| 0.025 of max |ref|
// (H200, 2026-11-29), inside the class.
func dsClassFlipMargin(ref []float32, rel float64) float64 {
	scale := 0.0
	for _, x := range ref {
		scale = max(scale, math.Abs(float64(x)))
	}
	return max(0.2, 2*rel*scale)
}

// dsLogitDiff is max |diff| / max |cpu logit|.
func dsLogitDiff(got, want []float32) float64 {
	worst, scale := 0.0, 1e-9
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
		scale = max(scale, math.Abs(float64(want[i])))
	}
	return worst / scale
}

var dsPrompt = []int32{11, 22, 33, 44, 55, 66, 77}

// TestWholeModel_SynthLogitsMatchCPUWithinTheirClass: prefill then decode
// on the device and on the CPU. F32/F16 weights (f32 activations on both
// backends): every logit within 1e-5 of the largest CPU logit. Quantized
// weights: within 5e-2 (the activation-quant class: the CPU rounds every
// matmul's activations to Q8_0/Q8_K, the device reads f32; measured
// 1-2.4% on these synthetic models), and the argmax equal on all steps but
// at most one (synthetic near-ties). The float rows' bar follows the KV
// format both engines store (MINFER_CACHE_TYPE, which an A/B's arm B may
// set): 1e-5 with f32 KV, the KV-rounding class's 1e-4 with f16 or q8_0
// (TestKVLayouts_WholeModelEveryFormatMatchesCPUWithinItsClass).
func TestWholeModel_SynthLogitsMatchCPUWithinTheirClass(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ string }{
		{"qwen2-tiny", "F32"}, {"qwen2-tiny", "BF16"}, {"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q4_K_M"},
		{"qwen3-tiny", "F16"}, {"qwen3-tiny", "Q4_K_M"},
		{"qwen2-0.5b", "Q8_0"}, {"qwen3-0.6b", "Q8_0"},
	} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			dev := dsEngine(t, path, "cuda", 256)
			host := dsEngine(t, path, "cpu", 256)
			steps := [][]int32{dsPrompt, {5}, {6}, {7}, {8}}
			bar := 5e-2
			if m.typ == "F32" || m.typ == "F16" || m.typ == "BF16" {
				// BF16 joins the float rows' bar (issue 23 item 4: the
				// whole-model BF16 test); a miss here is a finding about
				// the BF16 path, not a bar to widen unexplained.
				bar = 1e-5
				if dev.KVFormat() != "f32" || host.KVFormat() != "f32" {
					bar = 1e-4 // a last-bit difference may cross an f16 / int8 step
				}
			}
			agree := 0
			for i, toks := range steps {
				g, err := dev.Forward(toks, false)
				if err != nil {
					t.Fatal(err)
				}
				w, err := host.Forward(toks, false)
				if err != nil {
					t.Fatal(err)
				}
				d := dsLogitDiff(g, w)
				t.Logf("step %d (nt=%d): max |diff| / max |logit| = %.3g, argmax %d / %d", i, len(toks), d, dsArgmax(g), dsArgmax(w))
				if d > bar {
					t.Errorf("step %d: relative logit diff %.3g > %g", i, d, bar)
				}
				if dsArgmax(g) == dsArgmax(w) {
					agree++
				}
			}
			if agree < len(steps)-1 {
				t.Errorf("argmax agreed on %d of %d steps", agree, len(steps))
			}
		})
	}
}

func dsTinyCode(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TINY_CODE_GGUF"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TINY_CODE_GGUF: %v", err)
		}
		return p
	}
	// ../shared beside the checkout here; on the device the bundle's Q8_0
	// copy in bin/ (scripts/device-bundle.sh TINY=Q8_0).
	for _, p := range []string{
		filepath.Join("..", "..", "shared", "models", "tiny-code-f16.gguf"),
		filepath.Join("..", "bin", "tiny-code-Q8_0.gguf"),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("tiny-code model absent (no ../shared/models/tiny-code-f16.gguf, no bin/tiny-code-Q8_0.gguf); set TINY_CODE_GGUF")
	return ""
}

func dsGreedy(t *testing.T, e *model.Engine, prompt []int32, n int) []int32 {
	t.Helper()
	logits, err := e.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for range n {
		tok := int32(dsArgmax(logits))
		out = append(out, tok)
		if logits, err = e.Forward([]int32{tok}, false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestTinyCode_Greedy32IdenticalToCPU(t *testing.T) {
	dsNeedDevice(t)
	path := dsTinyCode(t)
	dev := dsEngine(t, path, "cuda", 512)
	host := dsEngine(t, path, "cpu", 512)
	prompt := host.Tokenizer().Encode("class Config:\n    def __init__(self", false)
	want := dsGreedy(t, host, prompt, 32)
	got := dsGreedy(t, dev, prompt, 32)
	t.Logf("cpu : %q", host.Tokenizer().Decode(want))
	t.Logf("cuda: %q", host.Tokenizer().Decode(got))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("greedy tokens differ:\ncuda %v\ncpu  %v", got, want)
	}
	dsCaptureStats(t, dsDeviceBackend(t, dev))
}

// dsSteps runs a prefill and n decode steps (tokens fixed) and returns every
// step's logits.
func dsSteps(t *testing.T, e *model.Engine, n int) [][]float32 {
	t.Helper()
	out, err := dsStepsErr(e, n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dsStepsErr is dsSteps for other goroutines (no t.Fatal there).
func dsStepsErr(e *model.Engine, n int) ([][]float32, error) {
	var out [][]float32
	l, err := e.Forward(dsPrompt, false)
	if err != nil {
		return nil, err
	}
	out = append(out, l)
	for i := range n {
		if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// dsReplayedStepCensus runs prefill and 4 decode steps of the model at
// path with the census on (the decode split is captured at the 3rd), then
// one more decode step (a replay); it returns the census before and after
// that step and the backend. Graphs are pinned on (dsGraphsOn), extra after.
func dsReplayedStepCensus(t *testing.T, path string, extra ...string) (before, after map[string]int64, b *Backend) {
	t.Helper()
	e := dsEngine(t, path, "cuda", 64, append(append([]string{"MINFER_LAUNCH_CENSUS=1"}, dsGraphsOn...), extra...)...)
	b = dsDeviceBackend(t, e)
	dsSteps(t, e, 4)
	before = b.Kernels().Census()
	if _, err := e.Forward([]int32{9}, false); err != nil {
		t.Fatal(err)
	}
	return before, b.Kernels().Census(), b
}

func dsBitwise(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("%s: step %d logit %d: %v, want %v (bitwise)", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// dsCaptureStats is b's capture stats, logged: the capture tests log them
// before holding them to their bar.
func dsCaptureStats(t *testing.T, b *Backend) CaptureStats {
	t.Helper()
	st := b.CaptureStats()
	t.Logf("capture stats: %+v", st)
	return st
}

// TestCaptureReplay_DecodeBitwiseEqualsDirectLaunches: decode steps with
// CUDA graphs (captured at the 3rd step, replayed after, each step with new
// tokens and positions written into the same buffers) give bitwise the
// logits of direct launches. Graphs are pinned on (dsGraphsOn).
func TestCaptureReplay_DecodeBitwiseEqualsDirectLaunches(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	direct := dsSteps(t, dsEngine(t, path, "cuda", 128, "MINFER_NO_CUDA_GRAPH=1"), 8)
	e := dsEngine(t, path, "cuda", 128, dsGraphsOn...)
	graphs := dsSteps(t, e, 8)
	st := dsCaptureStats(t, dsDeviceBackend(t, e))
	if st.Captures < 1 || st.Replays < 5 {
		t.Errorf("captures %d, replays %d: want a capture and >= 5 replays", st.Captures, st.Replays)
	}
	dsBitwise(t, "graphs vs direct", graphs, direct)
}

// TestCaptureReplay_PrefillBitwiseEqualsDirectLaunches: the same prompt
// forwarded repeatedly (reset between) captures the prefill split at the
// 3rd run; replays give bitwise the direct logits. Graphs and prefill
// capture are pinned on (an A/B's arm B may turn either off).
func TestCaptureReplay_PrefillBitwiseEqualsDirectLaunches(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen3-tiny", "Q4_K_M")
	run := func(e *model.Engine) [][]float32 {
		var out [][]float32
		for i := range 5 {
			e.Reset()
			p := append([]int32(nil), dsPrompt...)
			p[0] = int32(200 + i) // fresh token ids each run
			l, err := e.Forward(p, false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	direct := run(dsEngine(t, path, "cuda", 128, "MINFER_NO_CUDA_GRAPH=1"))
	e := dsEngine(t, path, "cuda", 128, append([]string{"MINFER_NO_PREFILL_CAPTURE=0"}, dsGraphsOn...)...)
	graphs := run(e)
	st := dsCaptureStats(t, dsDeviceBackend(t, e))
	if st.Captures < 1 || st.Replays < 2 {
		t.Errorf("captures %d, replays %d: want a prefill capture and replays", st.Captures, st.Replays)
	}
	dsBitwise(t, "prefill graphs vs direct", graphs, direct)
	e2 := dsEngine(t, path, "cuda", 128, "MINFER_NO_PREFILL_CAPTURE=1")
	run(e2)
	if st := dsDeviceBackend(t, e2).CaptureStats(); st.Captures != 0 {
		t.Errorf("MINFER_NO_PREFILL_CAPTURE=1: %d prefill captures", st.Captures)
	}
}

// TestCapture_RecapturesAfterPoolGrowth: a new pool allocation between
// steps invalidates the captured decode graph; the key warms up again,
// recaptures, and the logits stay bitwise those of direct launches.
// Graphs are pinned on (dsGraphsOn).
func TestCapture_RecapturesAfterPoolGrowth(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	direct := dsSteps(t, dsEngine(t, path, "cuda", 128, "MINFER_NO_CUDA_GRAPH=1"), 10)
	e := dsEngine(t, path, "cuda", 128, dsGraphsOn...)
	b := dsDeviceBackend(t, e)
	var got [][]float32
	l, err := e.Forward(dsPrompt, false)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, l)
	for i := range 10 {
		if i == 5 {
			before := b.CaptureStats()
			if before.Captures < 1 {
				t.Fatalf("no capture after 5 decode steps: %+v", before)
			}
			if _, err := b.Alloc(12345); err != nil { // pool growth
				t.Fatal(err)
			}
		}
		if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
			t.Fatal(err)
		}
		got = append(got, l)
	}
	st := dsCaptureStats(t, b)
	if st.Invalidations < 1 || st.Captures < 2 {
		t.Errorf("after pool growth: invalidations %d, captures %d; want >= 1 and >= 2", st.Invalidations, st.Captures)
	}
	dsBitwise(t, "recapture vs direct", got, direct)
}

// TestCapture_AbortsOnInjectedNodeErrorAndDisablesGraphs: a launch failing
// inside the capture window (MINFER_TEST_CALL_FAIL on the rms_norm kernel,
// the capture opened at the first execution) aborts the capture, surfaces
// the error naming the node and turns graphs off for the session. Graphs
// are pinned on (with them off there is no window to abort).
func TestCapture_AbortsOnInjectedNodeErrorAndDisablesGraphs(t *testing.T) {
	dsNeedDevice(t)
	b := dsBackend(t, dsLevers(t, append([]string{"MINFER_TEST_CALL_FAIL=cuLaunchKernel:minfer_rms_norm_f32"}, dsGraphsOn...)...))
	b.cap.warmup = 0
	r := rand.New(rand.NewPCG(19, 20))
	var c dsCase
	c.nt, c.name = 1, "abort"
	x := dsOperand(&c, "x", dsRand(r, 64, 1), 64)
	c.weights = append(c.weights, dsF32Weight("nw", dsRand(r, 64, 1), 64))
	c.build = func(bb *graph.Builder, ids, pos, kvw int) int {
		return bb.Silu("y", bb.RmsNorm("norm_node", x(bb, ids), "nw", 1e-6))
	}
	_, err := dsRun(t, c, b)
	t.Logf("error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "norm_node") || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("want a capture-abort error naming node norm_node, got %v", err)
	}
	st := b.CaptureStats()
	if st.Aborts != 1 || !st.Disabled || st.Captures != 0 {
		t.Errorf("stats %+v: want 1 abort, graphs disabled, no capture", st)
	}
}

// TestTwoEngines_ConcurrentBitwiseEqualToEachAlone: two engines on two
// goroutines (each its own stream) give bitwise the logits each gives alone.
func TestTwoEngines_ConcurrentBitwiseEqualToEachAlone(t *testing.T) {
	dsNeedDevice(t)
	pa := dsSynth(t, "qwen2-tiny", "Q8_0")
	pb := dsSynth(t, "qwen3-tiny", "Q4_K_M")
	aloneA := dsSteps(t, dsEngine(t, pa, "cuda", 128), 6)
	aloneB := dsSteps(t, dsEngine(t, pb, "cuda", 128, "MINFER_CACHE_TYPE=q8_0"), 6)
	ea := dsEngine(t, pa, "cuda", 128)
	eb := dsEngine(t, pb, "cuda", 128, "MINFER_CACHE_TYPE=q8_0")
	var wg sync.WaitGroup
	var ga, gb [][]float32
	var erra, errb error
	wg.Add(2)
	go func() { defer wg.Done(); ga, erra = dsStepsErr(ea, 6) }()
	go func() { defer wg.Done(); gb, errb = dsStepsErr(eb, 6) }()
	wg.Wait()
	if err := errors.Join(erra, errb); err != nil {
		t.Fatal(err)
	}
	dsBitwise(t, "engine A concurrent vs alone", ga, aloneA)
	dsBitwise(t, "engine B concurrent vs alone", gb, aloneB)
}

// dsNoMMVQ turns the decode mmvq path off (every type back to the f32
// mmv kernels that nt 2..8 run).
var dsNoMMVQ = []string{"MINFER_NO_Q80_MMVQ=1", "MINFER_NO_Q40_MMVQ=1", "MINFER_NO_KQ_MMVQ=1"}

// dsMMVQ turns the decode MMVQ path on for every type (the converse of
// dsNoMMVQ): the suite gate runs the device tests under an A/B's arm B
// settings, which may send a type's decode to the f32 mmv kernels; a test
// that counts MMVQ launches (or the quantizes, repacked copies and fused
// forms that come with them) sets these.
var dsMMVQ = []string{"MINFER_NO_Q80_MMVQ=0", "MINFER_NO_Q40_MMVQ=0", "MINFER_NO_KQ_MMVQ=0"}

// dsOneWarpDecode pins decode matmuls to the one-warp MMVQ kernels
// (dsMMVQ's MMVQ path on, no split form). The suite gate runs the device
// tests under an A/B's arm B settings, which may route decode elsewhere; a
// test that names the decode kernel it expects in its census sets these
// (split has tests of its own).
var dsOneWarpDecode = []string{"MINFER_NO_Q80_MMVQ=0", "MINFER_NO_Q40_MMVQ=0", "MINFER_NO_KQ_MMVQ=0", "MINFER_MMVQ_SPLIT=0"}

// dsTwoCopies pins MINFER_ONE_COPY off: a test whose census names the GGUF
// kernels of Q8_0 / Q6_K matrices (prefill MMQ, mmvq_nt, the gather) or
// counts the repacked copy as derived memory sets it (onecopy_device_test.go
// tests the one-copy routes).
var dsTwoCopies = []string{"MINFER_ONE_COPY=0"}

// dsGraphsOn pins CUDA graphs on: a test that counts captures or replays
// sets it, since an A/B's arm B (the suite gate's settings) may set
// MINFER_NO_CUDA_GRAPH=1. A test of prefill captures also pins
// MINFER_NO_PREFILL_CAPTURE=0.
var dsGraphsOn = []string{"MINFER_NO_CUDA_GRAPH=0"}

// TestForward_NT3BitwiseEqualsThreeNT1: with the mmvq levers set, nt = 1
// and nt = 3 go through the same mmv kernels (nt <= 8) and the same
// attention kernel, so a 3-token forward gives bitwise the logits of three
// 1-token forwards (all-logits rows). (With mmvq on, nt = 1 rounds the
// activations to Q8_1: TestMMVQFused_WholeModelLeversOnVsOffWithinActivationClass
// holds that path to its class.)
func TestForward_NT3BitwiseEqualsThreeNT1(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ string }{{"qwen2-tiny", "Q8_0"}, {"qwen3-tiny", "Q4_K_M"}} {
		path := dsSynth(t, m.shape, m.typ)
		e3 := dsEngine(t, path, "cuda", 64, dsNoMMVQ...)
		e1 := dsEngine(t, path, "cuda", 64, dsNoMMVQ...)
		toks := []int32{17, 29, 31}
		all, err := e3.Forward(toks, true)
		if err != nil {
			t.Fatal(err)
		}
		nv := len(all) / 3
		for i, tok := range toks {
			l, err := e1.Forward([]int32{tok}, false)
			if err != nil {
				t.Fatal(err)
			}
			for j := range l {
				if math.Float32bits(l[j]) != math.Float32bits(all[i*nv+j]) {
					t.Fatalf("%s/%s token %d logit %d: nt=1 %v, nt=3 %v (bitwise)", m.shape, m.typ, i, j, l[j], all[i*nv+j])
				}
			}
		}
	}
}

// TestKVLayouts_WholeModelEveryFormatMatchesCPUWithinItsClass: f32/f16/
// q8_0 KV through the engine on an F16 model (f32 activations on both
// backends; for equal inputs both store the same KV bytes, which
// TestKVLayouts_StoreBytesAndCellMovesMatchCPUBitwise proves), device
// against the CPU with the same format. f32 KV: 1e-5 of the largest logit.
// f16 / q8_0 KV: 1e-4 (the KV-rounding class: the f32 rows reaching the
// store differ from the CPU's in the last bits (reduction order of
// rms_norm and the matmuls), and a last-bit difference can move a value
// across an f16 / int8 rounding boundary, a whole f16 / q8 step; measured
// 1.4e-5 for f16, 4e-7 for q8_0 on the H200).
func TestKVLayouts_WholeModelEveryFormatMatchesCPUWithinItsClass(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen3-tiny", "F16")
	// An A/B's arm B may route decode over an f16 cache to the tensor cores
	// (MINFER_ATTN_DECODE_TC): that route is judged by its own class (taken
	// where any step's kv_len, at most the 128-cell context, reaches
	// MINFER_ATTN_DECODE_TC_FROM).
	lv := dsLevers(t)
	tcDecode := attnFamily(1, 128, lv, kv.F16) == attnDecodeTC
	for _, f := range []string{"f32", "f16", "q8_0"} {
		dev := dsSteps(t, dsEngine(t, path, "cuda", 128, "MINFER_CACHE_TYPE="+f), 4)
		host := dsSteps(t, dsEngine(t, path, "cpu", 128, "MINFER_CACHE_TYPE="+f), 4)
		for i := range host {
			d := dsLogitDiff(dev[i], host[i])
			t.Logf("KV %s step %d: relative logit diff %.3g", f, i, d)
			bar := 1e-5
			if f != "f32" {
				bar = 1e-4
			}
			if f == "f16" && tcDecode {
				// The tensor-core decode rounds Q and P to f16 as well
				// (f16-attention-tile): one more f16 rounding (2^-11) on each
				// side of the products. Session 30 measured 1.4e-4 here.
				bar = 1e-3
			}
			if d > bar {
				t.Errorf("KV %s step %d: relative logit diff %.3g > %g", f, i, d, bar)
			}
		}
	}
}

// TestCensus_ReplayCountsEveryCapturedKernel: with the census on, a replay
// adds each captured kernel's launches once per replay. The norms are
// pinned unfused (MINFER_FUSE_NORM_Q8=0: an A/B's arm B may set it).
func TestCensus_ReplayCountsEveryCapturedKernel(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	c1, c2, b := dsReplayedStepCensus(t, path, "MINFER_FUSE_NORM_Q8=0")
	rms := c2["minfer_rms_norm_f32"] - c1["minfer_rms_norm_f32"]
	want := int64(2*2 + 1) // qwen2-tiny: 2 layers x 2 norms + the output norm
	if rms != want || b.CaptureStats().Replays < 1 {
		t.Errorf("one replayed decode step added %d rms_norm launches (want %d); stats %+v", rms, want, b.CaptureStats())
	}
}

// TestMain keeps one device handle open for the whole run when a device
// answers, so the primary context is retained between the tests' backends
// (each opens and closes its own) instead of being torn down and
// re-created for every one.
func TestMain(m *testing.M) {
	cfg, err := levers.FromEnv()
	var keep *driver.Device
	if err == nil && !cfg.DisableCUDA {
		if d, err := driver.Open(driver.Options{}); err == nil {
			keep = d
		}
	}
	code := m.Run()
	if keep != nil {
		keep.Close()
	}
	os.Exit(code)
}

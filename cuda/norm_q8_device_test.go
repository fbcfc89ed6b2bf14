package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// Tests of MINFER_NORM_Q8: the decode rms_norm that also writes the Q8_1
// activation of the MMVQ matmuls reading it (minfer_rms_norm_q8_1,
// norm_q8.go). The device tests skip with a message when no device answers;
// the record's rule tests are host-only.

// TestNormQ8Device_KernelBitwiseNormAndQuantize: for rows of 896, 3584,
// 1024, 64 and 4864 (past the register-resident 4096: the kernel's tail
// loop) values (one row; 896 also three rows), with and without a
// weight, x with all-zero blocks, one-spike blocks and exact rounding ties:
// minfer_rms_norm_q8_1's f32 output is bitwise minfer_rms_norm_f32's, and
// its Q8_1 bytes are minfer_quantize_q8_1's of that output (and
// quant.Quantize(Q8_1)'s on the host). A row of 5 values (not a multiple
// of 32) is refused by the launcher (the backend takes the plain kernel
// for it: TestNormQ8_ShapeChoice).
func TestNormQ8Device_KernelBitwiseNormAndQuantize(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(47))
	const eps = 1e-6
	for _, c := range []struct{ n, rows int }{{896, 1}, {896, 3}, {3584, 1}, {1024, 1}, {64, 1}, {4864, 1}} {
		for _, weighted := range []bool{true, false} {
			name := fmt.Sprintf("n=%d rows=%d weight=%v", c.n, c.rows, weighted)
			var x []float32
			for range c.rows {
				x = append(x, mmvqActivation(rng, c.n, true)...)
			}
			w := make([]float32, c.n)
			for i := range w {
				w[i] = 0.5 + rng.Float32()
			}
			qb := ActQ8Bytes(c.n, c.rows)
			ref, got := make([]float32, len(x)), make([]float32, len(x))
			refQ, gotQ := make([]byte, qb), make([]byte, qb)
			err := ms.dev.Do(func() error {
				px, err := ms.upload(driver.Float32Bytes(x))
				if err != nil {
					return err
				}
				var pw driver.DevicePtr
				if weighted {
					if pw, err = ms.upload(driver.Float32Bytes(w)); err != nil {
						return err
					}
				}
				o1, err := ms.upload(make([]byte, 4*len(x)))
				if err != nil {
					return err
				}
				o2, err := ms.upload(make([]byte, 4*len(x)))
				if err != nil {
					return err
				}
				q1, err := ms.upload(make([]byte, qb))
				if err != nil {
					return err
				}
				q2, err := ms.upload(make([]byte, qb))
				if err != nil {
					return err
				}
				// 0xff where the new kernel writes: anything unwritten is a NaN / a byte mismatch.
				if err := ms.s.MemsetD8(o2, 0xff, uint64(4*len(x))); err != nil {
					return err
				}
				if err := ms.s.MemsetD8(q2, 0xff, qb); err != nil {
					return err
				}
				if err := ms.k.RmsNorm(ms.s, o1, px, pw, c.rows, c.n, eps); err != nil {
					return err
				}
				if err := ms.k.QuantizeQ8_1(ms.s, q1, o1, c.n, c.rows); err != nil {
					return err
				}
				if err := ms.k.RmsNormQ8_1(ms.s, o2, q2, px, pw, qb, c.rows, c.n, eps); err != nil {
					return err
				}
				for _, cp := range []struct {
					dst []byte
					src driver.DevicePtr
				}{{driver.Float32Bytes(ref), o1}, {driver.Float32Bytes(got), o2}, {refQ, q1}, {gotQ, q2}} {
					if err := ms.s.CopyDtoH(cp.dst, cp.src); err != nil {
						return err
					}
				}
				return ms.s.Synchronize()
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			bad, worst := 0, 0.0
			for i := range ref {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					if bad < 3 {
						t.Errorf("%s: out[%d] = %v (%#08x), minfer_rms_norm_f32 %v (%#08x)", name, i, got[i],
							math.Float32bits(got[i]), ref[i], math.Float32bits(ref[i]))
					}
					bad++
					worst = max(worst, math.Abs(float64(got[i])-float64(ref[i])))
				}
			}
			firstDiff := func(a, b []byte) int {
				for i := range a {
					if a[i] != b[i] {
						return i
					}
				}
				return -1
			}
			if i := firstDiff(gotQ, refQ); i >= 0 {
				t.Errorf("%s: Q8_1 bytes differ from minfer_quantize_q8_1 of the f32 output first at byte %d (block %d, offset %d)",
					name, i, i/q8_1BlockBytes, i%q8_1BlockBytes)
			}
			host := make([]byte, qb)
			rb := int(ActQ8Bytes(c.n, 1))
			for r := range c.rows {
				if err := quant.Quantize(quant.Q8_1, ref[r*c.n:(r+1)*c.n], host[r*rb:(r+1)*rb]); err != nil {
					t.Fatal(err)
				}
			}
			if i := firstDiff(gotQ, host); i >= 0 {
				t.Errorf("%s: Q8_1 bytes differ from quant.Quantize(Q8_1) of the f32 output first at byte %d (block %d, offset %d)",
					name, i, i/q8_1BlockBytes, i%q8_1BlockBytes)
			}
			t.Logf("%s: %d of %d f32 values differ (max |diff| %g); Q8_1 %d bytes equal: %v", name, bad, len(ref), worst,
				qb, bytes.Equal(gotQ, refQ))
		}
	}
	// n not a multiple of 32: refused, nothing launched.
	err := ms.dev.Do(func() error {
		p, err := ms.upload(make([]byte, 256))
		if err != nil {
			return err
		}
		return ms.k.RmsNormQ8_1(ms.s, p, p.Add(64), p.Add(128), 0, 128, 1, 5, eps)
	})
	if err == nil || !strings.Contains(err.Error(), "multiple of 32") {
		t.Errorf("rms_norm_q8_1 of a row of 5: err %v, want a refusal naming the multiple of 32", err)
	}
}

// nqCensus runs prefill then 8 decode steps on an engine with the census on
// and returns the logits of every step and the launches of the decode
// steps, the backend and the model's layer count.
func nqCensus(t *testing.T, path string, lever string) ([][]float32, map[string]int64, *Backend, int) {
	t.Helper()
	e := dsEngine(t, path, "cuda", 256, "MINFER_LAUNCH_CENSUS=1", "MINFER_NO_CUDA_GRAPH=0",
		"MINFER_MMVQ_INLINE_Q8=0", "MINFER_NORM_Q8="+lever)
	b := dsDeviceBackend(t, e)
	l, err := e.Forward(dsPrompt, false)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{l}
	census := mfCensusDelta(b, func() {
		for i := range 8 {
			if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
	})
	return out, census, b, e.HParams().NLayer
}

// TestNormQ8Device_LogitsBitwiseAndFewerQuantizeLaunches: synthetic
// qwen2-tiny Q8_0, qwen2-0.5b Q8_0 and Q4_K_M, prefill then 8 decode steps
// with CUDA graphs on (direct warmup, capture, replays), MINFER_NORM_Q8=1
// against =0: logits bitwise equal at every step. Census of the decode
// steps: with the lever on, minfer_rms_norm_q8_1 launches (every norm of
// the step takes it: as many norm launches in all as with the lever off)
// and at least 2 minfer_quantize_q8_1 fewer per layer and step (the fused
// QKV and FFN inputs); with it off, no minfer_rms_norm_q8_1.
func TestNormQ8Device_LogitsBitwiseAndFewerQuantizeLaunches(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ string }{
		{"qwen2-tiny", "Q8_0"}, {"qwen2-0.5b", "Q8_0"}, {"qwen2-0.5b", "Q4_K_M"},
	} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			gOff, cOff, _, nLayer := nqCensus(t, path, "0")
			gOn, cOn, bOn, _ := nqCensus(t, path, "1")
			for i := range gOff {
				if bad := mxDiff(t, fmt.Sprintf("step %d logits", i), gOn[i], gOff[i]); bad != 0 {
					t.Errorf("step %d: %d of %d logits differ between MINFER_NORM_Q8=1 and =0", i, bad, len(gOff[i]))
				}
			}
			st := bOn.CaptureStats()
			if st.Captures < 1 || st.Replays < 3 {
				t.Errorf("lever on: capture stats %+v: want a decode capture and replays", st)
			}
			const steps = 8
			total := func(c map[string]int64) (n int64) {
				for _, v := range c {
					n += v
				}
				return n
			}
			qOff, qOn := qactMerged(cOff)[quantizeQ8_1Kernel], qactMerged(cOn)[quantizeQ8_1Kernel]
			nOff, nOn := cOff["minfer_rms_norm_f32"], cOn["minfer_rms_norm_f32"]
			q8Off, q8On := cOff[rmsNormQ8Kernel], cOn[rmsNormQ8Kernel]
			t.Logf("per decode step: lever off %.1f launches (%.1f quantize, %.1f rms_norm_f32, %.1f rms_norm_q8_1); on %.1f launches (%.1f quantize, %.1f rms_norm_f32, %.1f rms_norm_q8_1); %d layers; capture stats %+v",
				float64(total(cOff))/steps, float64(qOff)/steps, float64(nOff)/steps, float64(q8Off)/steps,
				float64(total(cOn))/steps, float64(qOn)/steps, float64(nOn)/steps, float64(q8On)/steps, nLayer, st)
			if q8Off != 0 {
				t.Errorf("lever off: %d minfer_rms_norm_q8_1 launches, want 0", q8Off)
			}
			if q8On < int64(2*nLayer*steps) || q8On+nOn != nOff {
				t.Errorf("lever on: %d rms_norm_q8_1 + %d rms_norm_f32 launches, lever off %d norm launches: want >= %d q8 ones, the same total",
					q8On, nOn, nOff, 2*nLayer*steps)
			}
			if qOff-qOn < int64(2*nLayer*steps) {
				t.Errorf("quantize launches: %d with the lever on, %d off over %d steps: want at least %d fewer (2 per layer and step)",
					qOn, qOff, steps, 2*nLayer*steps)
			}
			if total(cOn) >= total(cOff) {
				t.Errorf("lever on launched %d kernels, off %d: want fewer", total(cOn), total(cOff))
			}
		})
	}
}

// TestNormQ8_RecordRule (host): the plan-time record of the Q8_1 scratch
// under node sequences, applied as Execute applies it (before each node,
// the node's own quantization plan, after it). A consumer launches its
// quantize unless the record holds its input.
func TestNormQ8_RecordRule(t *testing.T) {
	const (
		S  = driver.DevicePtr(0x1000) // the scratch
		S2 = driver.DevicePtr(0x9000) // a replaced scratch
		P  = driver.DevicePtr(0x20000)
		Y  = driver.DevicePtr(0x30000)
		O  = driver.DevicePtr(0x40000)
		k  = 896
	)
	type step struct {
		node actQ8Node
		// prod: the node is the producer (sets the record to its output);
		// quant: the node plans a quantization of its input into scratch.
		prod, quant bool
		scratch     driver.DevicePtr
		launch      bool // want: the quantization launches
	}
	norm := func(out driver.DevicePtr) step {
		return step{node: actQ8Node{op: graph.OpRmsNorm, x: O + 0x8000, xLen: k, out: out, outLen: k}, prod: true}
	}
	use := func(op graph.Op, x driver.DevicePtr, xLen int, out driver.DevicePtr, outLen int, launch bool) step {
		return step{node: actQ8Node{op: op, x: x, xLen: xLen, out: out, outLen: outLen}, quant: true, scratch: S, launch: launch}
	}
	other := func(op graph.Op, x, out driver.DevicePtr) step {
		return step{node: actQ8Node{op: op, x: x, xLen: k, out: out, outLen: k}}
	}
	cases := []struct {
		name  string
		steps []step
		want  actQ8Record // after the last step
	}{
		{"producer -> fused qkv keeps", []step{norm(P), use(graph.OpFusedQKV, P, k, O, 1152, false)},
			actQ8Record{S, P, k}},
		{"producer -> view -> reshape -> fused ffn keeps", []step{norm(P), other(graph.OpView, P, P), other(graph.OpReshape, P, P),
			use(graph.OpFusedFFN, P, k, O, 4864, false)}, actQ8Record{S, P, k}},
		{"producer -> two consumers of P keep", []step{norm(P), use(graph.OpFusedQKV, P, k, O, 1152, false),
			use(graph.OpMatMul, P, k, O+0x10000, 64, false)}, actQ8Record{S, P, k}},
		{"producer -> add -> consumer clears", []step{norm(P), other(graph.OpAdd, Y, Y), use(graph.OpFusedQKV, P, k, O, 1152, true)},
			actQ8Record{S, P, k}},
		{"producer -> kv store -> consumer clears", []step{norm(P), {node: actQ8Node{op: graph.OpKvcacheStore, x: Y, xLen: 128}},
			use(graph.OpFusedFFN, P, k, O, 4864, true)}, actQ8Record{S, P, k}},
		{"producer -> another norm -> consumer of P", []step{norm(P), {node: actQ8Node{op: graph.OpRmsNorm, x: Y, xLen: k, out: O, outLen: k}},
			use(graph.OpFusedQKV, P, k, O+0x10000, 1152, true)}, actQ8Record{S, P, k}},
		{"producer -> quantize of another x replaces", []step{norm(P), use(graph.OpMatMul, Y, k, O, 64, true),
			use(graph.OpMatMul, Y, k, O+0x10000, 64, false)}, actQ8Record{S, Y, k}},
		{"consumer writing over P clears", []step{norm(P), use(graph.OpMatMul, P, k, P+64, 64, true),
			use(graph.OpMatMul, P, k, O, 64, true)}, actQ8Record{S, P, k}},
		{"own quantization then writing over x does not survive", []step{use(graph.OpMatMul, Y, k, Y, 64, true),
			use(graph.OpMatMul, Y, k, O, 64, true)}, actQ8Record{S, Y, k}},
		{"two tokens of P is not P's row", []step{norm(P), use(graph.OpMatMul, P, 2*k, O, 128, true)},
			actQ8Record{S, P, 2 * k}},
		{"another scratch", []step{norm(P), {node: actQ8Node{op: graph.OpMatMul, x: P, xLen: k, out: O, outLen: 64}, quant: true, scratch: S2, launch: true}},
			actQ8Record{S2, P, k}},
		{"producer alone", []step{norm(P)}, actQ8Record{S, P, k}},
		{"producer -> softmax clears", []step{norm(P), other(graph.OpSoftmax, Y, O)}, actQ8Record{}},
	}
	for _, c := range cases {
		var r actQ8Record
		for i, s := range c.steps {
			r = r.before(s.node)
			switch {
			case s.prod:
				r = actQ8Record{scratch: S, x: s.node.out, k: s.node.outLen}
			case s.quant:
				var launch bool
				launch, r = r.quantize(s.scratch, s.node.x, s.node.xLen)
				if launch != s.launch {
					t.Errorf("%s: step %d (%s of %#x): quantize launches %v, want %v", c.name, i, s.node.op, uint64(s.node.x), launch, s.launch)
				}
			}
			r = r.after(s.node)
		}
		if r != c.want {
			t.Errorf("%s: record %+v, want %+v", c.name, r, c.want)
		}
	}
}

// TestNormQ8_ShapeChoice (host): which rms_norm takes minfer_rms_norm_q8_1
// (a shape choice: otherwise the plain kernel, never an error), and that
// with the lever off no record is kept and every quantization launches.
func TestNormQ8_ShapeChoice(t *testing.T) {
	on := &Backend{lv: levers.Config{NormQ8: true}, mm: MatMulOptions{ActQ8: 0x1000, ActQ8Bytes: ActQ8Bytes(4864, 1)}}
	for _, c := range []struct {
		b         *Backend
		op        graph.Op
		rows, dim int
		want      bool
	}{
		{on, graph.OpRmsNorm, 1, 896, true},
		{on, graph.OpRmsNorm, 1, 4864, true},
		{on, graph.OpRmsNorm, 1, 4896, false}, // scratch too small
		{on, graph.OpRmsNorm, 1, 5, false},    // not a multiple of 32
		{on, graph.OpRmsNorm, 7, 896, false},  // prefill
		{on, graph.OpQkNorm, 1, 64, false},    // per-head norm
		{&Backend{lv: levers.Config{NormQ8: false}, mm: on.mm}, graph.OpRmsNorm, 1, 896, false},
		{&Backend{lv: on.lv}, graph.OpRmsNorm, 1, 896, false}, // no scratch
	} {
		if got := c.b.normQ8(c.op, c.rows, c.dim); got != c.want {
			t.Errorf("lever %v scratch %d bytes, %s %d rows of %d: Q8 path %v, want %v", c.b.lv.NormQ8, c.b.mm.ActQ8Bytes,
				c.op, c.rows, c.dim, got, c.want)
		}
	}
	off := &Backend{mm: on.mm}
	for range 2 {
		if !off.planActQ8(0x20000, 896) || off.q8 != (actQ8Record{}) {
			t.Errorf("lever off: planActQ8 skipped a launch or kept a record %+v", off.q8)
		}
	}
	if !on.planActQ8(0x20000, 896) || on.planActQ8(0x20000, 896) || !on.planActQ8(0x30000, 896) {
		t.Errorf("lever on: a repeated quantization of one row must launch once, another row again")
	}
}

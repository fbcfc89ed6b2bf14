package cuda

// Weight registrations against captured graphs on the device (issue 23
// item 5, the design's section 7.1): a registration from another goroutine
// while a decode capture window is open waits for the window and
// invalidates nothing; an unrelated weight registered again at another
// size leaves the captured decode graph replaying; a weight the graph
// reads, registered again, invalidates it and the key captures again with
// the new values (capture.go, staleReason). The CPU tests of the same rule
// are in capture_weights_test.go.

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model"
)

// cwdSteps is dsSteps' sequence (dsPrompt, then decode tokens 100+7i)
// with before(i) called before decode step i (nil: none). Every Forward
// runs on the test goroutine.
func cwdSteps(t *testing.T, e *model.Engine, n int, before func(i int)) [][]float32 {
	t.Helper()
	l, err := e.Forward(dsPrompt, false)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]float32{l}
	for i := range n {
		if before != nil {
			before(i)
		}
		if l, err = e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
			t.Fatalf("decode step %d: %v", i, err)
		}
		out = append(out, l)
	}
	return out
}

// cwdRegister registers w on b or fails the test (test goroutine only).
func cwdRegister(t *testing.T, b *Backend, w graph.Weight) {
	t.Helper()
	if err := b.RegisterWeight(w); err != nil {
		t.Fatalf("register %s: %v", w.Name, err)
	}
}

// TestCaptureWindow_ConcurrentRegistrationEndsWithoutInvalidationAndReplaysBitwise:
// while the decode split's capture window is open (its recorded launches
// issued, the capture not yet ended), another goroutine registers a new
// weight the graph does not read. The registration waits for the window
// (it found the backend's lock held), the capture ends and instantiates,
// the registration then succeeds, and every later decode step replays the
// graph: no invalidation, no abort, the same captures and replays as a run
// without the registration, and bitwise its logits.
// With MINFER_PIN_STEP=1 the whole step holds the lock (Pin), so the
// registration waits for the step instead of the window: the same outcome.
// Graphs are pinned on (dsGraphsOn): the test needs a capture window.
func TestCaptureWindow_ConcurrentRegistrationEndsWithoutInvalidationAndReplaysBitwise(t *testing.T) {
	dsNeedDevice(t)
	for _, pin := range []string{"MINFER_PIN_STEP=0", "MINFER_PIN_STEP=1"} {
		t.Run(pin, func(t *testing.T) {
			defer pinWatchdog(t.Name(), 3*time.Minute)()
			cwdConcurrentRegistration(t, pin)
		})
	}
}

func cwdConcurrentRegistration(t *testing.T, pin string) {
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	const steps = 8
	ref := dsEngine(t, path, "cuda", 128, append([]string{pin}, dsGraphsOn...)...)
	want := cwdSteps(t, ref, steps, nil)
	refSt := dsDeviceBackend(t, ref).CaptureStats()

	e := dsEngine(t, path, "cuda", 128, append([]string{pin}, dsGraphsOn...)...)
	b := dsDeviceBackend(t, e)
	r := rand.New(rand.NewPCG(23, 5))
	w := dsF32Weight("test.concurrent.matrix", dsRand(r, 32*4, 1), 32, 4) // k=32: the Q8_1 scratch does not grow
	waitedBefore := b.registrationsWaited()
	regErr := make(chan error, 1)
	var fired, overlapped atomic.Bool
	// The hook runs on the device thread inside the window: no t.* call,
	// no driver call; it only starts the registration and waits until the
	// registration is blocked on the backend's lock.
	b.cap.windowHook = func(_ graph.SplitKey, nt int) {
		if nt > 1 || fired.Swap(true) {
			return
		}
		go func() { regErr <- b.RegisterWeight(w) }()
		deadline := time.Now().Add(5 * time.Second)
		for b.registrationsWaited() == waitedBefore && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		overlapped.Store(b.registrationsWaited() > waitedBefore)
	}
	var afterReg *CaptureStats
	got := cwdSteps(t, e, steps, func(i int) {
		if !fired.Load() || afterReg != nil {
			return
		}
		// The capturing step has returned: the registration may now run.
		select {
		case err := <-regErr:
			if err != nil {
				t.Fatalf("the concurrent registration failed: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the concurrent registration has not returned 30 s after the capture window closed")
		}
		st := b.CaptureStats()
		afterReg = &st
	})
	b.cap.windowHook = nil
	if !fired.Load() || afterReg == nil {
		t.Fatalf("no decode capture window opened in %d decode steps (stats %+v)", steps, b.CaptureStats())
	}
	if !overlapped.Load() {
		t.Errorf("the registration never waited on the backend's lock while the window was open (it ran unordered with the capture)")
	}
	if dw := b.weights[w.Name]; dw == nil || dw.rowLen != 32 || dw.rows != 4 {
		t.Errorf("weight %s after the registration: %+v, want registered as 32 x 4", w.Name, dw)
	}
	st := b.CaptureStats()
	t.Logf("capture stats: %+v (reference %+v; after the registration %+v)", st, refSt, *afterReg)
	if st.Invalidations != 0 || st.Aborts != 0 || st.Disabled || st.Fallbacks != 0 {
		t.Errorf("stats %+v: want no invalidation, abort or fallback and graphs on", st)
	}
	if st.Captures != refSt.Captures || st.DecodeCaptures != refSt.DecodeCaptures || st.Replays != refSt.Replays {
		t.Errorf("captures %d (decode %d), replays %d; the run without the registration: %d (%d), %d",
			st.Captures, st.DecodeCaptures, st.Replays, refSt.Captures, refSt.DecodeCaptures, refSt.Replays)
	}
	if st.DecodeReplays <= afterReg.DecodeReplays {
		t.Errorf("no decode replay after the registration: %d before, %d after", afterReg.DecodeReplays, st.DecodeReplays)
	}
	dsBitwise(t, "concurrent registration vs none", got, want)
}

// TestCapture_UnrelatedWeightRegisteredAgainAtAnotherSizeStillReplays: a
// vector and a matrix the decode graph does not read are registered before
// the capture and again, at another size, after it; the next decode step
// is a replay (not an invalidation or a capture), the pool generation has
// not moved, and the logits are bitwise those of a run without them.
// Graphs are pinned on (dsGraphsOn).
func TestCapture_UnrelatedWeightRegisteredAgainAtAnotherSizeStillReplays(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	const steps, again = 8, 5 // captured at decode step 2, replayed at 3 and 4
	want := cwdSteps(t, dsEngine(t, path, "cuda", 128, dsGraphsOn...), steps, nil)

	e := dsEngine(t, path, "cuda", 128, dsGraphsOn...)
	b := dsDeviceBackend(t, e)
	r := rand.New(rand.NewPCG(23, 6))
	cwdRegister(t, b, dsF32Weight("test.unrelated.vector", dsRand(r, 64, 1), 64))
	cwdRegister(t, b, dsF32Weight("test.unrelated.matrix", dsRand(r, 32*4, 1), 32, 4))
	var before CaptureStats
	var gen uint64
	got := cwdSteps(t, e, steps, func(i int) {
		switch i {
		case again:
			before = b.CaptureStats()
			if before.DecodeCaptures < 1 || before.DecodeReplays < 1 {
				t.Fatalf("before registering again: stats %+v, want a decode capture and a replay", before)
			}
			gen = b.PoolGeneration()
			cwdRegister(t, b, dsF32Weight("test.unrelated.vector", dsRand(r, 96, 1), 96))
			cwdRegister(t, b, dsF32Weight("test.unrelated.matrix", dsRand(r, 32*8, 1), 32, 8))
			if v, m := b.weights["test.unrelated.vector"], b.weights["test.unrelated.matrix"]; v.rowLen != 96 || m.rows != 8 {
				t.Fatalf("the weights were not registered again: vector of %d, matrix of %d rows", v.rowLen, m.rows)
			}
			if g := b.PoolGeneration(); g != gen {
				t.Errorf("registering the weights again moved the pool generation %d -> %d", gen, g)
			}
		case again + 1:
			st := b.CaptureStats()
			if st.DecodeReplays != before.DecodeReplays+1 || st.DecodeCaptures != before.DecodeCaptures || st.Invalidations != before.Invalidations {
				t.Errorf("the step after registering again: stats %+v, before %+v; want one more decode replay, no capture, no invalidation", st, before)
			}
		}
	})
	st := b.CaptureStats()
	t.Logf("capture stats: %+v", st)
	if st.Invalidations != 0 || st.DecodeCaptures != before.DecodeCaptures {
		t.Errorf("stats %+v: want no invalidation and no capture after the first", st)
	}
	dsBitwise(t, "unrelated weights registered again vs none", got, want)
}

// TestCapture_UsedWeightRegisteredAgainInvalidatesAndRecapturesBitwise:
// the converse. output_norm.weight, which the decode graph reads, is
// registered again (new values, another data size) after the capture: the
// next step invalidates the graph for that weight (never a replay of the
// old pointer), the key warms up and captures again, and every step's
// logits are bitwise those of direct launches (MINFER_NO_CUDA_GRAPH=1)
// doing the same registration; they differ from a run that keeps the old
// weight, so a stale replay would be seen. Graphs are pinned on
// (dsGraphsOn) in the runs with graphs.
func TestCapture_UsedWeightRegisteredAgainInvalidatesAndRecapturesBitwise(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	const steps, again, name = 10, 5, "output_norm.weight"
	run := func(e *model.Engine) ([][]float32, *Backend, CaptureStats) {
		b := dsDeviceBackend(t, e)
		var before CaptureStats
		out := cwdSteps(t, e, steps, func(i int) {
			if i != again {
				return
			}
			old := b.weights[name]
			if old == nil || !old.vector {
				t.Fatalf("%s is not a registered vector: %+v", name, old)
			}
			before = b.CaptureStats()
			r := rand.New(rand.NewPCG(23, 7))
			vals := dsRand(r, old.rowLen+1, 1) // one value more than the vector: another data size
			for j := range vals {
				vals[j] = 1 + float32(math.Abs(float64(vals[j])))
			}
			w := dsF32Weight(name, vals, old.rowLen)
			cwdRegister(t, b, w)
			if nw := b.weights[name]; nw == old || nw.ptr == old.ptr {
				t.Fatalf("%s registered again kept its devWeight or pointer", name)
			}
		})
		return out, b, before
	}
	direct, _, _ := run(dsEngine(t, path, "cuda", 128, "MINFER_NO_CUDA_GRAPH=1"))
	keep := cwdSteps(t, dsEngine(t, path, "cuda", 128, dsGraphsOn...), steps, nil)
	got, b, before := run(dsEngine(t, path, "cuda", 128, dsGraphsOn...))
	st := b.CaptureStats()
	t.Logf("capture stats: %+v (before registering again: %+v)", st, before)
	if before.DecodeCaptures < 1 || before.DecodeReplays < 1 {
		t.Fatalf("before registering again: stats %+v, want a decode capture and a replay", before)
	}
	if st.WeightInvalidations != before.WeightInvalidations+1 || st.Invalidations != before.Invalidations+1 {
		t.Errorf("invalidations %d (for a weight %d), before %d (%d): want one more, for the weight",
			st.Invalidations, st.WeightInvalidations, before.Invalidations, before.WeightInvalidations)
	}
	if st.DecodeCaptures < before.DecodeCaptures+1 || st.DecodeReplays <= before.DecodeReplays {
		t.Errorf("stats %+v, before %+v: want the decode graph captured again and replayed", st, before)
	}
	dsBitwise(t, "graphs vs direct launches, both with the weight registered again", got, direct)
	same := true
	for j := range keep[1+again] {
		if math.Float32bits(keep[1+again][j]) != math.Float32bits(got[1+again][j]) {
			same = false
			break
		}
	}
	if same {
		t.Errorf("the step after registering %s again has the logits of the old weight: the test cannot tell a stale replay", name)
	}
}

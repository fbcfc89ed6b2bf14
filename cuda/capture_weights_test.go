package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
)

// The validity rule of a captured graph against weight registrations
// (capture.go, staleReason; pool.go, movesGeneration), without a device:
// the pool's bookkeeping (pool.account) and the weight table are driven the
// way registerWeight drives them after its upload, and the captured graph's
// weights are recorded through b.weight / b.vector the way its nodes
// resolve them. The device tests (capture_weights_device_test.go) check the
// same rule through real captures and replays.

// cwBackend is a Backend with a device-less pool whose allocation rule is
// moves (movesGeneration, or a planted one).
func cwBackend(moves func(MemClass) bool) *Backend {
	p := newPool(nil)
	p.moves = moves
	return &Backend{pool: p, weights: map[string]*devWeight{}}
}

// cwRegister books what registerWeight books for a new registration of
// name (a new allocation of the weight's class, a new devWeight) and
// returns the devWeight.
func cwRegister(b *Backend, name string, n int) *devWeight {
	ptr := driver.DevicePtr(0x1000_0000 + uint64(len(b.pool.extra))*0x10000)
	b.pool.account(MemWeights, ptr, uint64(4*n))
	dw := &devWeight{name: name, srcBytes: 4 * n, dims: []int{n}, rowLen: n, rows: 1, ptr: ptr, vector: true}
	b.setWeight(dw)
	return dw
}

// cwCapture records a capture whose nodes resolve weights a (a matrix's
// lookup) and b (a vector's) and keeps it as captured at the backend's
// state now.
func cwCapture(t *testing.T, b *Backend) *captured {
	t.Helper()
	b.cap.recording, b.cap.used = true, map[string]*devWeight{}
	if _, err := b.weight("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.vector("b", b.weights["b"].rowLen); err != nil {
		t.Fatal(err)
	}
	e := &captured{gen: b.pool.gen, kvStamp: b.kvStamp, weights: b.cap.used, reregistered: b.reregistered}
	b.cap.recording, b.cap.used = false, nil
	if len(e.weights) != 2 || e.weights["a"] == nil || e.weights["b"] == nil {
		t.Fatalf("recorded weights %v, want a and b", e.weights)
	}
	return e
}

// cwUnusedScenario: weights a, b, c registered; a graph reading a and b is
// captured; c is registered again at another size and a new weight d is
// registered. It returns staleReason of the graph after that.
func cwUnusedScenario(t *testing.T, moves func(MemClass) bool) string {
	t.Helper()
	b := cwBackend(moves)
	cwRegister(b, "a", 64)
	cwRegister(b, "b", 64)
	cwRegister(b, "c", 64)
	e := cwCapture(t, b)
	if r := b.staleReason(e); r != "" {
		t.Fatalf("right after its capture the graph is stale: %s", r)
	}
	cwRegister(b, "c", 96) // again, at another size
	cwRegister(b, "d", 32) // a new weight
	return b.staleReason(e)
}

// TestCaptureValidity_RegisteringAnUnusedWeightKeepsTheGraphValid: a graph
// reading {a, b} stays valid when c is registered again at another size
// and a new weight d is registered (the bar of issue 23 item 5: "a weight
// registered again at another size leaves a captured graph valid").
func TestCaptureValidity_RegisteringAnUnusedWeightKeepsTheGraphValid(t *testing.T) {
	if r := cwUnusedScenario(t, movesGeneration); r != "" {
		t.Errorf("graph reading {a, b} is stale after registering c again and d: %s", r)
	}
}

// TestCaptureValidity_OldEveryAllocationRuleFailsTheUnusedWeightBar: the
// planted defect, the old rule (every allocation, weights included, moves
// the pool generation), makes the same scenario stale: the test above
// tells the two rules apart.
func TestCaptureValidity_OldEveryAllocationRuleFailsTheUnusedWeightBar(t *testing.T) {
	r := cwUnusedScenario(t, func(MemClass) bool { return true })
	if !strings.Contains(r, "pool generation") {
		t.Errorf("with every allocation moving the generation the graph should be stale by generation, got %q", r)
	}
}

// TestCaptureValidity_ReregisteringAUsedWeightInvalidatesTheGraph: a graph
// reading {a, b} is stale once a (or b) is registered again at another
// size, naming the weight: it never replays the old pointer.
func TestCaptureValidity_ReregisteringAUsedWeightInvalidatesTheGraph(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		b := cwBackend(movesGeneration)
		cwRegister(b, "a", 64)
		cwRegister(b, "b", 64)
		e := cwCapture(t, b)
		old := e.weights[name].ptr
		nw := cwRegister(b, name, 128)
		if nw.ptr == old {
			t.Fatalf("the new registration of %s kept the pointer: the scenario is broken", name)
		}
		if r := b.staleReason(e); !strings.Contains(r, "weight "+name) {
			t.Errorf("%s registered again: staleReason %q, want it to name weight %s", name, r, name)
		}
	}
}

// TestCaptureValidity_ActivationScratchAndKVChangesStillInvalidate: what
// the rule keeps from the generation: a new activation, workspace or KV
// allocation (the Q8_1 scratch a registration may grow included) or a new
// KV layout makes every graph stale; a weight's derived copy does not.
func TestCaptureValidity_ActivationScratchAndKVChangesStillInvalidate(t *testing.T) {
	for c := MemClass(0); c < numMemClasses; c++ {
		b := cwBackend(movesGeneration)
		cwRegister(b, "a", 64)
		cwRegister(b, "b", 64)
		e := cwCapture(t, b)
		b.pool.account(c, 0x9000_0000, 256)
		r := b.staleReason(e)
		want := c != MemWeights && c != MemDerived
		if (r != "") != want {
			t.Errorf("a new %s allocation: staleReason %q, want stale %v", c, r, want)
		}
	}
	b := cwBackend(movesGeneration)
	cwRegister(b, "a", 64)
	cwRegister(b, "b", 64)
	e := cwCapture(t, b)
	b.kvStamp++
	if r := b.staleReason(e); !strings.Contains(r, "KV layout") {
		t.Errorf("a new KV layout: staleReason %q, want stale by KV layout", r)
	}
}

// TestCaptureValidity_OnlyARecordingNotesWeights: direct executions do not
// record the weights they resolve (nothing is captured from them).
func TestCaptureValidity_OnlyARecordingNotesWeights(t *testing.T) {
	b := cwBackend(movesGeneration)
	cwRegister(b, "a", 64)
	b.cap.used = map[string]*devWeight{}
	if _, err := b.weight("a"); err != nil {
		t.Fatal(err)
	}
	if len(b.cap.used) != 0 {
		t.Errorf("a direct execution noted %v", b.cap.used)
	}
}

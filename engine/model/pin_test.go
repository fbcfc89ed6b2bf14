package model

import (
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
)

// pinDevice is a device backend that records which of its calls ran inside
// Pin (the CUDA backend's device thread).
type pinDevice struct {
	*cpu.Backend
	pins, inside, outside int
	in                    bool
}

func (d *pinDevice) Name() string { return "pindev" }

func (d *pinDevice) Pin(fn func() error) error {
	d.pins++
	d.in = true
	defer func() { d.in = false }()
	return fn()
}

func (d *pinDevice) Execute(n *graph.Node, in []graph.Tensor, out graph.Tensor) error {
	if d.in {
		d.inside++
	} else {
		d.outside++
	}
	return d.Backend.Execute(n, in, out)
}

var _ StepPinner = (*pinDevice)(nil)

// MINFER_PIN_STEP=1 runs every forward's backend work inside one Pin (one
// handoff to the device thread a step) and changes no logit; off, Pin is
// never called.
func TestPinStep_EachForwardRunsInOnePinAndTheLogitsAreBitwiseTheSame(t *testing.T) {
	run := func(lv levers.Config) ([]float32, *pinDevice) {
		dev := &pinDevice{Backend: cpu.New(cpu.Options{Threads: 1})}
		e, err := Load(writeTiny(t, t.TempDir(), tinyQwen2), Options{Levers: lv,
			NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) { return dev, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		var all []float32
		for _, toks := range [][]int32{prompt, {40}, {41}} {
			l, err := e.Forward(toks, false)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, l...)
		}
		return all, dev
	}
	on, pinned := run(mustEnv(t, "MINFER_PIN_STEP=1"))
	off, plain := run(levers.Default())
	if pinned.pins != 3 || pinned.outside != 0 || pinned.inside == 0 {
		t.Errorf("pinned: %d Pins for 3 forwards, %d executions inside, %d outside", pinned.pins, pinned.inside, pinned.outside)
	}
	if plain.pins != 0 || plain.inside != 0 {
		t.Errorf("lever off: %d Pins, %d executions inside", plain.pins, plain.inside)
	}
	for i := range on {
		if on[i] != off[i] {
			t.Fatalf("logit %d: pinned %v, plain %v", i, on[i], off[i])
		}
	}
}

// ForwardInto writes into dst when it holds the logits (no allocation: the
// result is dst) and gives Forward's logits bitwise; a dst too small is
// not written and a new slice comes back.
func TestForwardInto_ReusesABufferThatHoldsTheLogitsAndMatchesForwardBitwise(t *testing.T) {
	ref := loadTiny(t, tinyQwen2, levers.Default())
	e := loadTiny(t, tinyQwen2, levers.Default())
	nv := e.HParams().NVocab
	buf := make([]float32, nv)
	small := make([]float32, 3)
	for i, toks := range [][]int32{prompt, {40}, {41}} {
		want, err := ref.Forward(toks, false)
		if err != nil {
			t.Fatal(err)
		}
		dst := buf
		if i == 2 {
			dst = small
		}
		got, err := e.ForwardInto(dst, toks, false)
		if err != nil {
			t.Fatal(err)
		}
		if aliased := &got[0] == &dst[0]; aliased != (i < 2) {
			t.Errorf("forward %d: result aliases dst %v, want %v", i, aliased, i < 2)
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("forward %d logit %d: %v, Forward %v", i, j, got[j], want[j])
			}
		}
	}
	if small[0] != 0 || small[1] != 0 || small[2] != 0 {
		t.Errorf("a dst too small was written: %v", small)
	}
}

// A decode step through ForwardInto allocates nothing on the CPU engine
// (the planned graph reused, the logits written into the buffer): GC work a
// token is the backend's, not the engine's.
func TestForwardInto_ACPUDecodeStepAllocatesNothing(t *testing.T) {
	e := loadTiny(t, tinyQwen2, levers.Default())
	buf := make([]float32, e.HParams().NVocab)
	if _, err := e.ForwardInto(buf, prompt, false); err != nil {
		t.Fatal(err)
	}
	ids := []int32{40}
	if n := testing.AllocsPerRun(50, func() {
		if _, err := e.ForwardInto(buf, ids, false); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a decode step, want 0", n)
	}
}

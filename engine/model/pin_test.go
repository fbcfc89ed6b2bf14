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

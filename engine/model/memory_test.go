package model

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
)

// memDevice is a device backend that plans its memory (memplan.Planner)
// with free bytes free, records every allocation it is asked for, and
// can fail its KV allocation or its n-th buffer allocation for want of
// memory.
type memDevice struct {
	*cpu.Backend
	free      uint64
	allocs    []string
	closed    bool
	failKV    bool
	failW     bool // RegisterWeight is out of memory
	failAlloc int  // the n-th Alloc (1-based) fails; 0: none
}

func (d *memDevice) Name() string { return "memdev" }

func (d *memDevice) MemoryRules() memplan.Rules { return memplan.Rules{Backend: "memdev"} }

func (d *memDevice) FreeMemory() (uint64, uint64, error) { return d.free, 2 * d.free, nil }

func (d *memDevice) RegisterWeight(w graph.Weight) error {
	d.allocs = append(d.allocs, "weight "+w.Name)
	if d.failW {
		return fmt.Errorf("memdev: weight %s: %w", w.Name, graph.ErrOutOfMemory)
	}
	return d.Backend.RegisterWeight(w)
}

func (d *memDevice) Alloc(n int) (graph.Buffer, error) {
	d.allocs = append(d.allocs, fmt.Sprintf("buffer %d", n))
	if d.failAlloc > 0 && len(d.allocs) >= d.failAlloc {
		return 0, fmt.Errorf("memdev: %d elements: %w", n, graph.ErrOutOfMemory)
	}
	return d.Backend.Alloc(n)
}

func (d *memDevice) AllocKV(s graph.KVSpec) error {
	d.allocs = append(d.allocs, "kv")
	if d.failKV {
		return fmt.Errorf("memdev: KV of %d cells: %w", s.NCtx, graph.ErrOutOfMemory)
	}
	return d.Backend.AllocKV(s)
}

func (d *memDevice) Close() error {
	d.closed = true
	return d.Backend.Close()
}

func loadOn(t *testing.T, dev *memDevice, nCtx int, logf func(string, ...any)) (*Engine, error) {
	t.Helper()
	return Load(writeTiny(t, t.TempDir(), tinyQwen2), Options{NCtx: nCtx, Levers: levers.Config{}, Logf: logf,
		NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) { return dev, nil }})
}

// A plan that does not fit the free memory is refused before the first
// allocation: the device saw no weight, no buffer and no KV, and was
// closed; the error is the one-line refusal and matches ErrOutOfMemory.
func TestLoad_PlanThatDoesNotFitIsRefusedBeforeAnyAllocation(t *testing.T) {
	dev := &memDevice{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 10}
	_, err := loadOn(t, dev, 256, nil)
	var r *memplan.Refusal
	if !errors.As(err, &r) || !errors.Is(err, graph.ErrOutOfMemory) {
		t.Fatalf("load with 1 KiB free: %v, want a refusal", err)
	}
	if len(dev.allocs) != 0 || !dev.closed {
		t.Fatalf("refused after allocating %v (closed %v)", dev.allocs, dev.closed)
	}
	if line := err.Error(); strings.Contains(line, "\n") || !strings.Contains(line, "free on memdev") {
		t.Errorf("refusal is not one line naming the backend: %q", line)
	}
	// The same model with room for it loads, its plan kept.
	ok := &memDevice{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 40}
	e, err := loadOn(t, ok, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if p, have := e.MemoryPlan(); !have || p.Backend != "memdev" || p.NCtx != 256 || len(ok.allocs) == 0 {
		t.Errorf("plan %+v (%v), allocations %d", p, have, len(ok.allocs))
	}
}

// An allocation that fails for want of memory although the plan fit (the
// KV at load, a buffer of a forward later) is an *memplan.OOMError with
// the plan, matching ErrOutOfMemory; at load the device is closed (what
// it allocated is freed).
func TestLoad_OutOfMemoryAfterThePlanFreesAndCarriesThePlan(t *testing.T) {
	dev := &memDevice{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 40, failKV: true}
	_, err := loadOn(t, dev, 256, nil)
	var oom *memplan.OOMError
	if !errors.As(err, &oom) || !errors.Is(err, graph.ErrOutOfMemory) || !dev.closed {
		t.Fatalf("KV out of memory: %v (closed %v), want an OOMError and the device closed", err, dev.closed)
	}
	if !strings.Contains(err.Error(), "ran out of memory") || !strings.Contains(err.Error(), "the plan: ") {
		t.Errorf("error does not carry the plan: %v", err)
	}

	// A weight out of memory is no refusal of the weight: the model does
	// not move to the CPU behind the user's back.
	w := &memDevice{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 40, failW: true}
	if e, err := loadOn(t, w, 256, nil); !errors.As(err, &oom) || !w.closed {
		if e != nil {
			t.Errorf("engine runs on %s", e.Backend())
			e.Close()
		}
		t.Fatalf("weight out of memory: %v (closed %v), want an OOMError", err, w.closed)
	}

	late := &memDevice{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 40}
	e, err := loadOn(t, late, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	late.failAlloc = len(late.allocs) + 1
	_, err = e.Forward(prompt, false)
	if !errors.As(err, &oom) || !errors.Is(err, graph.ErrOutOfMemory) {
		t.Fatalf("forward out of memory: %v, want an OOMError", err)
	}
}

// A context beyond the trained length (256 in the tiny file) is allowed
// with exactly one warning line; at the trained length there is none.
func TestLoad_ContextBeyondTrainingWarnsOnceAndRuns(t *testing.T) {
	for _, c := range []struct {
		nCtx     int
		warnings int
	}{{256, 0}, {1024, 1}} {
		var warned []string
		logf := func(format string, args ...any) {
			if s := fmt.Sprintf(format, args...); strings.Contains(s, "beyond the trained context") {
				warned = append(warned, s)
			}
		}
		dev := &memDevice{Backend: cpu.New(cpu.Options{Threads: 1}), free: 1 << 40}
		e, err := loadOn(t, dev, c.nCtx, logf)
		if err != nil {
			t.Fatalf("-c %d: %v", c.nCtx, err)
		}
		if _, err := e.Forward(prompt, false); err != nil {
			t.Fatalf("-c %d: %v", c.nCtx, err)
		}
		e.Close()
		if len(warned) != c.warnings {
			t.Errorf("-c %d: %d warnings %q, want %d", c.nCtx, len(warned), warned, c.warnings)
		}
		if c.warnings == 1 && (!strings.Contains(warned[0], "-c 1024") || !strings.Contains(warned[0], "256 tokens")) {
			t.Errorf("warning does not name the context and the trained length: %s", warned[0])
		}
	}
}

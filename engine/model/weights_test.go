package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// picky is a preferred backend that refuses one weight type.
type picky struct {
	*cpu.Backend
	refuse quant.Type
}

func (p picky) Name() string { return "picky" }
func (p picky) RegisterWeight(w graph.Weight) error {
	if w.Type == p.refuse {
		return fmt.Errorf("no kernel for %s: %w", w.Type, graph.ErrUnsupportedWeight)
	}
	return p.Backend.RegisterWeight(w)
}

func tinyWeights(t *testing.T, s tinySpec) []graph.Weight {
	t.Helper()
	f, err := gguf.Open(writeTiny(t, t.TempDir(), s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	h, err := ReadHParams(f)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := GraphWeights(f, h)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != len(h.Tensors()) {
		t.Fatalf("%d weights for %d tensors", len(ws), len(h.Tensors()))
	}
	return ws
}

// A preferred backend that cannot consume one weight gets none of the model:
// everything goes to the CPU and the log names the weight and the reason.
func TestPlaceWeights_OneRefusedWeightKeepsTheWholeModelOnCPU(t *testing.T) {
	ws := tinyWeights(t, withType(tinyQwen2, quant.Q8_0))
	dev := picky{cpu.New(cpu.Options{Threads: 1}), quant.Q8_0}
	host := cpu.New(cpu.Options{Threads: 1})
	defer dev.Close()
	defer host.Close()
	var log []string
	i, err := PlaceWeights(ws, []graph.Backend{dev, host}, func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	if i != 1 {
		t.Fatalf("placed on backend %d", i)
	}
	if len(log) == 0 || !strings.Contains(log[0], "token_embd.weight") || !strings.Contains(log[0], "Q8_0") || !strings.Contains(log[0], "no kernel") {
		t.Fatalf("log %q does not name the weight, type and reason", log)
	}
	// a backend that takes every type gets the model
	if i, err := PlaceWeights(ws, []graph.Backend{picky{cpu.New(cpu.Options{Threads: 1}), quant.Q4_K}, host}, nil); err != nil || i != 0 {
		t.Fatalf("placed on %d, %v", i, err)
	}
	if _, err := PlaceWeights(ws, []graph.Backend{dev}, nil); !errors.Is(err, graph.ErrUnsupportedWeight) {
		t.Fatalf("no backend holds the model: %v", err)
	}
}

// failing is a preferred backend whose upload of one weight fails (a
// driver call, not a refusal).
type failing struct{ picky }

func (f failing) RegisterWeight(w graph.Weight) error {
	if w.Type == f.refuse {
		return errors.New("cuMemcpyHtoDAsync_v2: CUDA_ERROR_UNKNOWN (999)")
	}
	return f.Backend.RegisterWeight(w)
}

// A failed upload is an error that names its cause; the model does not
// move to the next backend as it does for a refused weight (the device
// call sweep found the failure hidden behind the CPU fallback).
func TestPlaceWeights_AFailedUploadIsAnErrorNotAFallback(t *testing.T) {
	ws := tinyWeights(t, withType(tinyQwen2, quant.Q8_0))
	dev := failing{picky{cpu.New(cpu.Options{Threads: 1}), quant.Q8_0}}
	host := cpu.New(cpu.Options{Threads: 1})
	defer dev.Close()
	defer host.Close()
	var log []string
	i, err := PlaceWeights(ws, []graph.Backend{dev, host}, func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) })
	if err == nil || !strings.Contains(err.Error(), "cuMemcpyHtoDAsync_v2") || !strings.Contains(err.Error(), "token_embd.weight") {
		t.Fatalf("placed on backend %d, err %v: want the failed upload named", i, err)
	}
	if len(log) != 0 {
		t.Errorf("a failure logged as a fallback: %q", log)
	}
}

// Registering the same weights twice is a no-op (no second copy).
func TestRegisterWeight_SameNameAndSizeIsANoOp(t *testing.T) {
	ws := tinyWeights(t, tinyQwen3)
	c := cpu.New(cpu.Options{Threads: 1})
	defer c.Close()
	for k := 0; k < 2; k++ {
		if _, err := PlaceWeights(ws, []graph.Backend{c}, nil); err != nil {
			t.Fatal(err)
		}
	}
	e := loadTiny(t, tinyQwen3, levers.Default())
	if e.Backend() != "cpu" || e.KVFormat() != "f32" {
		t.Fatalf("backend %s, kv %s", e.Backend(), e.KVFormat())
	}
}

// reserving records what PlaceWeights hands a graph.WeightReserver and
// when, and fails its reservation on request.
type reserving struct {
	*cpu.Backend
	calls []string
	fail  error
}

func (r *reserving) ReserveWeights(ws []graph.Weight) error {
	r.calls = append(r.calls, fmt.Sprintf("reserve %d", len(ws)))
	return r.fail
}

func (r *reserving) RegisterWeight(w graph.Weight) error {
	r.calls = append(r.calls, "register")
	return r.Backend.RegisterWeight(w)
}

// A backend that reserves its weight memory gets every weight once before
// the first registration; a failed reservation (out of memory) is an error
// of that backend, never a move to the next one.
func TestPlaceWeights_ReserverGetsEveryWeightFirstAndItsFailureIsAnError(t *testing.T) {
	ws := tinyWeights(t, tinyQwen3)
	dev := &reserving{Backend: cpu.New(cpu.Options{Threads: 1})}
	defer dev.Close()
	if _, err := PlaceWeights(ws, []graph.Backend{dev}, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("reserve %d", len(ws))}
	for range ws {
		want = append(want, "register")
	}
	if !slices.Equal(dev.calls, want) {
		t.Errorf("calls %v, want one reserve of %d weights, then %d registrations", dev.calls, len(ws), len(ws))
	}
	oom := &reserving{Backend: cpu.New(cpu.Options{Threads: 1}), fail: fmt.Errorf("cuMemAlloc: %w", graph.ErrOutOfMemory)}
	host := cpu.New(cpu.Options{Threads: 1})
	defer oom.Close()
	defer host.Close()
	i, err := PlaceWeights(ws, []graph.Backend{oom, host}, nil)
	if !errors.Is(err, graph.ErrOutOfMemory) || i != 0 || len(oom.calls) != 1 {
		t.Errorf("placed on %d, err %v, calls %v: want the reservation's out-of-memory, no registration", i, err, oom.calls)
	}
}

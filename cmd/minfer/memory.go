package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/minfer-go/minfer/cuda"
	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/schema"
)

// planDoc is the document of a memory plan checked against free bytes
// (free 0: not checked, no free memory known).
func planDoc(p memplan.Plan, free uint64) *schema.MemoryPlan {
	d := &schema.MemoryPlan{Model: p.Model, Backend: p.Backend, NCtx: p.NCtx, KVFormat: p.KVFormat.String(),
		WeightsBytes: p.Weights, DerivedBytes: p.Derived, KVBytes: p.KV, ScratchBytes: p.Scratch, OverheadBytes: p.Overhead,
		TotalBytes: p.Total(), NeedBytes: p.Need(), MappedWeights: p.MappedWeights, HostMappedBytes: p.HostMapped}
	if free > 0 {
		fits := p.Fits(free)
		d.FreeBytes, d.Fits, d.MaxCtx = free, &fits, p.MaxCtx(free)
	}
	return d
}

// deviceMemoryDoc is bench's device_memory of a CUDA backend's memory m
// and the engine's plan (nil when it planned nothing).
func deviceMemoryDoc(m cuda.DeviceMemory, plan *schema.MemoryPlan) *schema.DeviceMemory {
	return &schema.DeviceMemory{
		Backend: "cuda",
		Classes: schema.DeviceMemoryByKind{Weights: m.Weights, DerivedWeights: m.Derived, KVCache: m.KV,
			Activations: m.Activations, Workspace: m.Workspace, HostMapped: m.HostMapped, ArenaSlack: m.ArenaSlack},
		TotalBytes: m.Counted(),
		Driver:     schema.DriverMemory{FreeAtOpenBytes: m.FreeAtOpen, FreeBytes: m.Free, TotalBytes: m.Total, UsedSinceOpenBytes: m.DriverUsed()},
		Plan:       plan,
	}
}

// benchDeviceMemory is the device_memory of an engine running on the CUDA
// backend; nil on the CPU.
func benchDeviceMemory(e lm) (*schema.DeviceMemory, error) {
	be, ok := e.(interface{ Backends() []graph.Backend })
	if !ok {
		return nil, nil
	}
	for _, b := range be.Backends() {
		c, ok := b.(*cuda.Backend)
		if !ok {
			continue
		}
		m, err := c.DeviceMemory()
		if err != nil {
			return nil, err
		}
		var plan *schema.MemoryPlan
		if pe, ok := e.(interface {
			MemoryPlan() (memplan.Plan, bool)
			MemoryFree() uint64
		}); ok {
			if p, ok := pe.MemoryPlan(); ok {
				plan = planDoc(p, pe.MemoryFree())
			}
		}
		return deviceMemoryDoc(m, plan), nil
	}
	return nil, nil
}

// infoPlan is the memory plan of the model in f on device ("cpu" or
// "cuda") at nCtx cells (0: the engine's default), checked against the
// free memory the backend reports; on "cuda" without a device it is the
// plan alone, and note says why it was not checked.
func (a *app) infoPlan(f *gguf.File, device string, nCtx int) (plan memplan.Plan, free uint64, note string, err error) {
	h, err := model.ReadHParams(f)
	if err != nil {
		return plan, 0, "", err
	}
	if nCtx <= 0 {
		nCtx = model.DefaultNCtx(h)
	}
	ts, err := model.MemoryTensors(f, h)
	if err != nil {
		return plan, 0, "", err
	}
	var freeMem func() (uint64, error)
	var rules memplan.Rules
	switch device {
	case "cpu":
		c := cpu.New(cpu.Options{})
		defer c.Close()
		rules = c.MemoryRules()
		freeMem = func() (uint64, error) { free, _, err := c.FreeMemory(); return free, err }
	case "cuda":
		// The device alone (its context), not the backend: no kernels are
		// loaded (or compiled) to answer what is free.
		d, err := driver.Open(driver.Options{Disable: a.cfg.DisableCUDA})
		switch {
		case errors.Is(err, driver.ErrNoDevice):
			rules, note = cuda.MemoryRules(a.cfg, 0), fmt.Sprintf("not checked: %v", err)
		case err != nil:
			return plan, 0, "", err
		default:
			defer d.Close()
			rules = cuda.MemoryRules(a.cfg, d.Attr.SMCount)
			freeMem = func() (free uint64, err error) {
				err = d.Do(func() error {
					var err error
					free, _, err = d.MemInfo()
					return err
				})
				return free, err
			}
		}
	default:
		return plan, 0, "", usagef("info --device %q: want cpu or cuda", device)
	}
	kvf, err := model.KVFormatFor(h, device == "cuda", a.cfg.CacheType)
	if err != nil {
		return plan, 0, "", err
	}
	if plan, err = model.PlanMemory(h, ts, nCtx, kvf, a.cfg, rules); err != nil {
		return plan, 0, "", err
	}
	if freeMem != nil {
		if free, err = freeMem(); err != nil {
			free, note = 0, fmt.Sprintf("not checked: %v", err)
		}
	}
	return plan, free, note, nil
}

// printPlan writes the plan as info's text: each class, the total, what
// must be free, and the answer (fits, or the refusal line).
func printPlan(w io.Writer, p memplan.Plan, free uint64, note string) {
	gib := func(b uint64) string {
		if b < 1<<30 {
			return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
		}
		return memplan.GiB(b) + " GiB"
	}
	fmt.Fprintf(w, "memory plan    %s on %s at -c %d, KV %s\n", p.Model, p.Backend, p.NCtx, p.KVFormat)
	weights := gib(p.Weights)
	if p.MappedWeights {
		weights += " (mapped from the file: not held against the free memory)"
	}
	fmt.Fprintf(w, "  weights      %s\n", weights)
	if p.Derived > 0 {
		what := ""
		if p.DerivedLever != "" {
			what = " (" + p.DerivedLever + " drops them)"
		}
		fmt.Fprintf(w, "  derived      %s%s\n", gib(p.Derived), what)
	}
	if p.HostMapped > 0 {
		fmt.Fprintf(w, "  host-mapped  %s (page-locked host memory the device reads: not device memory, not in the total)\n", gib(p.HostMapped))
	}
	fmt.Fprintf(w, "  KV cache     %s (%d bytes a cell)\n", gib(p.KV), p.KVPerCell)
	fmt.Fprintf(w, "  scratch      %s (prefill of %d tokens)\n", gib(p.Scratch), p.Prefill)
	if p.Overhead > 0 {
		fmt.Fprintf(w, "  %-12s %s\n", p.OverheadWhat, gib(p.Overhead))
	}
	fmt.Fprintf(w, "  total        %s, of which %s must be free\n", gib(p.Total()), gib(p.Need()))
	if wn := p.BeyondTraining(); wn != "" {
		fmt.Fprintf(w, "  %s\n", wn)
	}
	switch {
	case free == 0:
		fmt.Fprintf(w, "  free         %s\n", note)
	case p.Fits(free):
		fmt.Fprintf(w, "  free         %s: fits (the largest context that fits is about %s)\n", gib(free), memplan.FormatCtx(p.MaxCtx(free)))
	default:
		fmt.Fprintf(w, "  free         %s: does not fit: %v\n", gib(free), p.Check(free))
	}
}

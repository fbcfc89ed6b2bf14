package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/minfer-go/minfer/cuda"
	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/spec"
	"github.com/minfer-go/minfer/schema"
)

// deviceState remembers the backends this process opened, for the
// instrumentation printed at exit (MINFER_LAUNCH_CENSUS, MINFER_OP_TIMING):
// the CUDA backends and the engines' CPU backends (whose census counts the
// nodes that ran on the CPU: the whole model there, or its CPU splits).
type deviceState struct {
	backends []*cuda.Backend
	cpus     []*cpu.Backend
	// decoders are the speculative decoders opened (--draft): their
	// counts join the census as spec_* names, MINFER_DRAFT's liveness.
	decoders []*spec.Decoder
}

// noteEngine records the CPU backends of an opened engine.
func (d *deviceState) noteEngine(e lm) {
	be, ok := e.(interface{ Backends() []graph.Backend })
	if !ok {
		return
	}
	for _, b := range be.Backends() {
		if c, ok := b.(*cpu.Backend); ok {
			d.cpus = append(d.cpus, c)
		}
	}
}

// census sums the launch census of every backend the process opened: CUDA
// kernel launches (a graph replay counts each kernel it holds) and CPU
// node executions (cpu_* names); they never share a name. The speculative
// decoders' counts join as spec_* names (levers.CensusSpec*). Each CUDA
// backend adds one pseudo-entry naming where its kernels came from,
// kernels_file or kernels_nvrtc (levers.CensusKernels*: MINFER_KERNELS's
// liveness); a constant, so a bench's timed-window difference drops it.
// Empty, not nil, when nothing ran.
func (d *deviceState) census() map[string]int64 {
	total := map[string]int64{}
	for _, b := range d.backends {
		c := b.Kernels().Census()
		for k, n := range c {
			total[k] += n
		}
		if c != nil {
			total[b.Kernels().Origin()]++
		}
		if n := b.PinnedSteps(); n > 0 {
			total[levers.CensusPinnedSteps] += n
		}
	}
	for _, c := range d.cpus {
		for k, n := range c.Census() {
			total[k] += n
		}
	}
	for _, dec := range d.decoders {
		st := dec.Stats()
		for k, n := range map[string]int{levers.CensusSpecForward: st.Forwards, levers.CensusSpecDrafted: st.Drafted, levers.CensusSpecAccepted: st.Accepted} {
			if n > 0 {
				total[k] += int64(n)
			}
		}
	}
	return total
}

// modelOptions wires the CUDA backend into the engine for --device cuda and
// auto. MINFER_DISABLE_CUDA (presence) keeps every device on the CPU, said
// once on stderr.
func (a *app) modelOptions(device string, nCtx int) model.Options {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "minfer: "+format+"\n", args...) }
	opts := model.Options{Device: device, NCtx: nCtx, Levers: a.cfg, Logf: logf}
	if device == "cpu" {
		return opts
	}
	if a.cfg.DisableCUDA {
		logf("MINFER_DISABLE_CUDA is set: running on the CPU")
		opts.Device = "cpu"
		return opts
	}
	opts.NewDevice = func(lv levers.Config, logf func(string, ...any)) (graph.Backend, error) {
		b, err := cuda.New(cuda.Options{Levers: lv, Logf: logf})
		if errors.Is(err, driver.ErrNoDevice) {
			// The engine's automatic device falls back to the CPU on
			// this error alone.
			return nil, noDevice{err}
		}
		if err != nil {
			return nil, err
		}
		a.dev.backends = append(a.dev.backends, b)
		return b, nil
	}
	return opts
}

// kernelsDoc is the kernels file the process's CUDA backend loaded, for
// the bench document (nil without one). Its stamp was checked at load.
func (a *app) kernelsDoc() (*schema.Kernels, error) {
	if len(a.dev.backends) == 0 {
		return nil, nil
	}
	path, st := a.dev.backends[0].Kernels().File()
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, fmt.Errorf("kernels file: %w", err)
	}
	return &schema.Kernels{Path: path, SHA256: sum, Source: st.Source, Compiler: st.Compiler, Flags: st.Flags}, nil
}

// noDevice is the CUDA backend's "no usable device" as the engine knows
// it (graph.ErrNoDevice), with the driver's words.
type noDevice struct{ error }

func (e noDevice) Is(target error) bool { return target == graph.ErrNoDevice }
func (e noDevice) Unwrap() error        { return e.error }

// deviceReport writes the instrumentation the gate runner reads, each as one
// JSON line on w (the schema package's exit lines):
//   - schema.CensusLine with the census on, even when nothing ran: CUDA
//     kernel launches (a graph replay counts every captured kernel once)
//     and CPU node executions by path name (engine/cpu/census.go), merged;
//   - schema.GraphsLine with the census and a CUDA backend;
//   - schema.OpTimingLine with MINFER_OP_TIMING and a CUDA backend (event
//     times of direct launches only: captured and replayed launches are not
//     timed).
func (a *app) deviceReport(w io.Writer) {
	if a.cfg.LaunchCensus {
		writeLine(w, schema.CensusLine{LaunchCensus: a.dev.census()})
	}
	if len(a.dev.backends) == 0 {
		return
	}
	if a.cfg.LaunchCensus {
		// What the graph machinery did: the liveness evidence of
		// MINFER_NO_CUDA_GRAPH (kernels are the same either way).
		stats := make([]cuda.CaptureStats, len(a.dev.backends))
		for i, b := range a.dev.backends {
			stats[i] = b.CaptureStats()
		}
		writeLine(w, schema.GraphsLine{CUDAGraphs: graphsDoc(stats)})
	}
	if a.cfg.OpTiming {
		var times []cuda.OpTime
		for _, b := range a.dev.backends {
			times = append(times, b.Kernels().OpTimes()...)
		}
		writeLine(w, schema.OpTimingLine{OpTiming: opTimingDoc(times)})
	}
}

// graphsDoc sums the capture statistics of every CUDA backend. Its
// pdl_launches stays 0: MINFER_PDL, whose evidence it was, is retired
// (reports/MINFER_PDL/NOTE.md); the field is kept for the JSON contract.
func graphsDoc(stats []cuda.CaptureStats) schema.CUDAGraphs {
	var g schema.CUDAGraphs
	for _, s := range stats {
		g.Captured += s.Captures
		g.Replayed += s.Replays
		g.Invalidated += s.Invalidations
		g.Aborted += s.Aborts
		g.Disabled = g.Disabled || s.Disabled
		g.Fallbacks += s.Fallbacks
	}
	return g
}

// opTimingDoc is the op_timing document of the backends' event times.
func opTimingDoc(times []cuda.OpTime) schema.OpTiming {
	t := schema.OpTiming{
		DirectLaunchesOnly: true,
		Note:               "per-kernel device time of direct launches, measured with events; launches inside CUDA graphs are not timed",
	}
	for _, o := range times {
		t.Kernels = append(t.Kernels, schema.OpKernel{Kernel: o.Kernel, Count: o.Count, TotalNS: float64(o.Total.Nanoseconds())})
	}
	return t
}

// writeLine writes v as one JSON line; the exit lines are best effort (the
// run's result is already decided), so a failure is dropped.
func writeLine(w io.Writer, v any) {
	if line, err := json.Marshal(v); err == nil {
		fmt.Fprintln(w, string(line))
	}
}

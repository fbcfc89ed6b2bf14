package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/minfer-go/minfer/cuda"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
)

// deviceState remembers the CUDA backends this process opened, for the
// instrumentation printed at exit (MINFER_LAUNCH_CENSUS, MINFER_OP_TIMING).
type deviceState struct {
	backends []*cuda.Backend
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
		if err != nil {
			return nil, err
		}
		a.dev.backends = append(a.dev.backends, b)
		return b, nil
	}
	return opts
}

// deviceReport writes the instrumentation the gate runner reads, each as one
// JSON line on w: {"launch_census":{kernel: launches}} (graph replays count
// every captured kernel once per replay), {"cuda_graphs":{"captured":N,
// "replayed":M,...}} with the census, and {"op_timing":{...}} (event
// times of direct launches only: captured and replayed launches are not
// timed).
func (a *app) deviceReport(w io.Writer) {
	if len(a.dev.backends) == 0 {
		if a.cfg.LaunchCensus {
			fmt.Fprintln(w, `{"launch_census":{}}`)
		}
		return
	}
	if a.cfg.LaunchCensus {
		total := map[string]int64{}
		for _, b := range a.dev.backends {
			for k, n := range b.Kernels().Census() {
				total[k] += n
			}
		}
		if line, err := json.Marshal(map[string]any{"launch_census": total}); err == nil {
			fmt.Fprintln(w, string(line))
		}
		// What the graph machinery did: the liveness evidence of
		// MINFER_NO_CUDA_GRAPH (kernels are the same either way).
		var g cuda.CaptureStats
		var pdl int64
		for _, b := range a.dev.backends {
			pdl += b.Kernels().PDLLaunches()
			s := b.CaptureStats()
			g.Captures += s.Captures
			g.Replays += s.Replays
			g.Invalidations += s.Invalidations
			g.Aborts += s.Aborts
			g.Disabled = g.Disabled || s.Disabled
		}
		line, err := json.Marshal(map[string]any{"cuda_graphs": map[string]any{
			"captured": g.Captures, "replayed": g.Replays, "invalidated": g.Invalidations,
			"aborted": g.Aborts, "disabled": g.Disabled, "pdl_launches": pdl,
		}})
		if err == nil {
			fmt.Fprintln(w, string(line))
		}
	}
	if a.cfg.OpTiming {
		var times []cuda.OpTime
		for _, b := range a.dev.backends {
			times = append(times, b.Kernels().OpTimes()...)
		}
		line, err := json.Marshal(map[string]any{"op_timing": map[string]any{
			"direct_launches_only": true,
			"note":                 "per-kernel device time of direct launches, measured with events; launches inside CUDA graphs are not timed",
			"kernels":              times,
		}})
		if err == nil {
			fmt.Fprintln(w, string(line))
		}
	}
}

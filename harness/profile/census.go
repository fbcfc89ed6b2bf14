package profile

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/schema"
)

// Census is the engine's launch census (MINFER_LAUNCH_CENSUS=1): kernel name
// (CUDA) or op path (the CPU backend's "cpu_*" names) -> launches in the
// process.
type Census map[string]int

// The CUDA backend prints its instrumentation at exit, each as ONE JSON line
// on stderr (other stderr lines, log messages and panics included, are
// tolerated and ignored); the lines are declared in the schema package:
//
//	{"launch_census":{"minfer_mmv_q8_0":123,...}}  MINFER_LAUNCH_CENSUS=1: kernel -> launches, graph replays included
//	{"cuda_graphs":{"captured":N,"replayed":M}}    the graphs the backend captured and replayed
//	{"op_timing":{"direct_launches_only":true,"kernels":[{"kernel":..,"count":..,"total_ns":..}]}}  MINFER_OP_TIMING=1
//
// Each parser takes the last line that carries its key.

// lastLine returns the payload under key of the last line of out that is a
// JSON object with that key.
func lastLine(out, key string) (json.RawMessage, bool) {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") || !strings.Contains(l, `"`+key+`"`) {
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(l), &obj) != nil {
			continue
		}
		if raw, ok := obj[key]; ok {
			return raw, true
		}
	}
	return nil, false
}

// ParseCensus reads the {"launch_census":{kernel: launches}} line.
func ParseCensus(out string) (Census, error) {
	raw, ok := lastLine(out, schema.LaunchCensusKey)
	if !ok {
		return nil, fmt.Errorf(`launch census: no {"launch_census":{...}} line in the output (is MINFER_LAUNCH_CENSUS=1 honoured by this backend?)`)
	}
	var c Census
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("launch census: %w", err)
	}
	if c == nil {
		c = Census{}
	}
	for k, n := range c {
		if n < 0 {
			return nil, fmt.Errorf("launch census: %s has %d launches", k, n)
		}
	}
	return c, nil
}

// Graphs is the backend's CUDA graph count: graphs captured (and
// instantiated) and graph replays. It is schema.CUDAGraphs field for field
// (ParseGraphs converts one into the other) with the reports' tags: zero
// optional counts are left out of a report.
type Graphs struct {
	Captured    int  `json:"captured"`
	Replayed    int  `json:"replayed"`
	Invalidated int  `json:"invalidated,omitempty"` // optional fields of the backend's line
	Aborted     int  `json:"aborted,omitempty"`
	Disabled    bool `json:"disabled,omitempty"`
	Fallbacks   int  `json:"fallbacks,omitempty"` // graph failures run on with direct launches
	// PDLLaunches counts launches issued with programmatic dependent launch
	// (MINFER_PDL's evidence; a captured graph's launches count once).
	PDLLaunches int64 `json:"pdl_launches,omitempty"`
}

// ParseGraphs reads the {"cuda_graphs":{"captured":N,"replayed":M}} line;
// ok is false when the output has none.
func ParseGraphs(out string) (Graphs, bool, error) {
	raw, ok := lastLine(out, schema.CUDAGraphsKey)
	if !ok {
		return Graphs{}, false, nil
	}
	var g schema.CUDAGraphs
	if err := json.Unmarshal(raw, &g); err != nil {
		return Graphs{}, false, fmt.Errorf("cuda_graphs: %w", err)
	}
	// captured and replayed are required: a line without them is no count.
	var required struct{ Captured, Replayed *int }
	if json.Unmarshal(raw, &required) != nil || required.Captured == nil || required.Replayed == nil {
		return Graphs{}, false, fmt.Errorf(`cuda_graphs: want {"captured":N,"replayed":M}, got %s`, raw)
	}
	return Graphs(g), true, nil
}

// OpKernel is one kernel of the engine's own event timing.
type OpKernel = schema.OpKernel

// OpTiming is the MINFER_OP_TIMING=1 line; ParseOpTiming sorts its kernels
// by total time (largest first).
type OpTiming = schema.OpTiming

// ParseOpTiming reads the {"op_timing":{...}} line.
func ParseOpTiming(out string) (OpTiming, error) {
	raw, ok := lastLine(out, schema.OpTimingKey)
	if !ok {
		return OpTiming{}, fmt.Errorf(`op timing: no {"op_timing":{...}} line in the output`)
	}
	var t OpTiming
	if err := json.Unmarshal(raw, &t); err != nil {
		return OpTiming{}, fmt.Errorf("op timing: %w", err)
	}
	sort.SliceStable(t.Kernels, func(i, j int) bool { return t.Kernels[i].TotalNS > t.Kernels[j].TotalNS })
	return t, nil
}

// CensusDiff is one kernel whose launches differ between two arms.
type CensusDiff struct {
	Kernel string `json:"kernel"`
	A      int    `json:"a"`
	B      int    `json:"b"`
}

// Diff lists the kernels whose counts differ, sorted by name.
func Diff(a, b Census) []CensusDiff {
	names := map[string]bool{}
	for k := range a {
		names[k] = true
	}
	for k := range b {
		names[k] = true
	}
	var out []CensusDiff
	for k := range names {
		if a[k] != b[k] {
			out = append(out, CensusDiff{Kernel: k, A: a[k], B: b[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kernel < out[j].Kernel })
	return out
}

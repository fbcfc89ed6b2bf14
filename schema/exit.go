package schema

// The JSON lines minfer prints on stderr at exit, one object a line, each
// under one key. A reader takes the last line carrying its key and ignores
// every other stderr line (log messages, panics).
const (
	LaunchCensusKey = "launch_census" // MINFER_LAUNCH_CENSUS=1
	CUDAGraphsKey   = "cuda_graphs"   // MINFER_LAUNCH_CENSUS=1 and a CUDA backend
	OpTimingKey     = "op_timing"     // MINFER_OP_TIMING=1 and a CUDA backend
)

// CensusLine is {"launch_census":{name: launches}}: CUDA kernel launches
// (a graph replay counts every captured kernel) and CPU node executions
// by path name (cpu_*), merged; {} when nothing ran.
type CensusLine struct {
	LaunchCensus LaunchCensus `json:"launch_census"`
}

// LaunchCensus is kernel or CPU op path -> launches in the process.
type LaunchCensus map[string]int64

// GraphsLine is {"cuda_graphs":{...}}.
type GraphsLine struct {
	CUDAGraphs CUDAGraphs `json:"cuda_graphs"`
}

// CUDAGraphs is what the CUDA graph machinery did over the process (the
// liveness evidence of MINFER_NO_CUDA_GRAPH and MINFER_PDL).
type CUDAGraphs struct {
	Captured    int  `json:"captured"`    // graphs captured and instantiated
	Replayed    int  `json:"replayed"`    // splits answered by a replay
	Invalidated int  `json:"invalidated"` // dropped for a pool-generation or KV-layout change
	Aborted     int  `json:"aborted"`     // capture windows aborted by a node error
	Disabled    bool `json:"disabled"`    // graphs were off for the session
	// Fallbacks: graph failures that were not a node's (end of capture,
	// instantiation, graph launch); graphs went off and the splits ran with
	// direct launches. Absent when none happened.
	Fallbacks int `json:"fallbacks,omitempty"`
	// PDLLaunches counts launches issued with programmatic dependent
	// launch (a captured graph's launches count once).
	PDLLaunches int64 `json:"pdl_launches"`
}

// OpTimingLine is {"op_timing":{...}}.
type OpTimingLine struct {
	OpTiming OpTiming `json:"op_timing"`
}

// OpTiming is the per-kernel device time of direct launches, measured with
// events; launches inside CUDA graphs are not timed.
type OpTiming struct {
	DirectLaunchesOnly bool       `json:"direct_launches_only"`
	Note               string     `json:"note,omitempty"`
	Kernels            []OpKernel `json:"kernels"`
}

// OpKernel is one kernel of OpTiming.
type OpKernel struct {
	Kernel string `json:"kernel"`
	Count  int64  `json:"count"`
	// TotalNS: whole nanoseconds on the wire (a time.Duration), a float
	// for the readers that average and format it.
	TotalNS float64 `json:"total_ns"`
}

// AvgNS is the mean time per launch.
func (k OpKernel) AvgNS() float64 {
	if k.Count == 0 {
		return 0
	}
	return k.TotalNS / float64(k.Count)
}

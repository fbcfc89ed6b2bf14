package schema

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Bench is the document of `minfer bench --format json`. Every sample is
// kept; the meaning of each test is in cmd/minfer/bench.go.
type Bench struct {
	Model       string `json:"model"`
	ModelSHA256 string `json:"model_sha256"`
	Backend     string `json:"backend"`   // cpu or cuda
	KVFormat    string `json:"kv_format"` // f32, f16, q8_0
	Threads     int    `json:"threads"`
	NPrompt     int    `json:"n_prompt"`
	NGen        int    `json:"n_gen"`
	// Depth: tokens in the KV cache before each test (-d); absent at 0 so
	// that -d 0 prints what bench printed before the flag existed.
	Depth int `json:"depth,omitempty"`
	// DepthFill is how the depth got into the KV cache (with depth > 0):
	// "prefill" (computed) or "zeros" (cells written as zeros, untimed
	// either way).
	DepthFill string `json:"depth_fill,omitempty"`
	// Turns: the conversation's turns under --turns (its tests are
	// "turn1".."turnN", no pp/tg); absent otherwise.
	Turns     int               `json:"turns,omitempty"`
	Reps      int               `json:"reps"`
	Warmup    BenchWarmup       `json:"warmup"`
	Tests     []BenchTest       `json:"tests"`
	Levers    map[string]string `json:"levers"`
	GoVersion string            `json:"go_version"`
	Date      string            `json:"date"` // RFC 3339, UTC
	// KernelSources is the hash of the kernel sources minfer embeds;
	// Kernels the file a CUDA run loaded (absent on the CPU).
	KernelSources string   `json:"kernel_sources_sha256,omitempty"`
	Kernels       *Kernels `json:"kernels,omitempty"`
	// DeviceMemory is the device's memory by class and the driver's view
	// at the end of the run (a CUDA run; absent on the CPU).
	DeviceMemory *DeviceMemory `json:"device_memory,omitempty"`
}

// BenchWarmup is the untimed warmup bench ran in-process before its tests.
type BenchWarmup struct {
	// BudgetMS is MINFER_BENCH_WARMUP_MS: whole milliseconds on the wire,
	// a float so that the readers' formatting (%.0f) stays as it was.
	BudgetMS   float64 `json:"budget_ms"`
	Iterations int     `json:"iterations"`
	ElapsedMS  float64 `json:"elapsed_ms"`
}

// BenchTest is one timed test: pp<P> or tg<N>, "@d<D>" at depth D.
type BenchTest struct {
	Name       string    `json:"name"`
	NTokens    int       `json:"n_tokens"`
	SamplesMS  []float64 `json:"samples_ms"`
	TokS       []float64 `json:"tok_s"`
	MeanTokS   float64   `json:"mean_tok_s"`
	StddevTokS float64   `json:"stddev_tok_s"` // sample standard deviation (n-1)

	// A turn of --turns (named "turn<k>"): n_tokens are its decode steps
	// after the first answer token, samples_ms and tok_s their time and
	// rate; TTFTMS is each repetition's time to the first answer token
	// (the turn's prefill and first draw), PromptTokens the tokens the
	// turn forwarded. Absent in pp and tg tests.
	TTFTMS       []float64 `json:"ttft_ms,omitempty"`
	PromptTokens int       `json:"prompt_tokens,omitempty"`

	// Device time of each repetition's timed window and the rate over it;
	// absent where the backend does not time its work (the CPU).
	DeviceMS   []float64 `json:"device_ms,omitempty"`
	DeviceTokS []float64 `json:"device_tok_s,omitempty"`

	// Launch census of the timed windows (MINFER_LAUNCH_CENSUS=1), absent
	// without it; pointers so that a measured 0 (no graph replays) is
	// still written.
	LaunchesPerToken     *float64           `json:"launches_per_token,omitempty"`
	GraphReplaysPerToken *float64           `json:"graph_replays_per_token,omitempty"`
	KernelsPerToken      map[string]float64 `json:"kernels_per_token,omitempty"`

	// Speculative: a tg test run with --draft (its tok_s are generated
	// tokens per second); absent otherwise.
	Speculative *Speculative `json:"speculative,omitempty"`
}

// Value is the test's tok/s for one round: the median of its repetitions
// (robust to one slow repetition), or the mean when no samples are listed.
func (t BenchTest) Value() float64 {
	if len(t.TokS) == 0 {
		return t.MeanTokS
	}
	return median(t.TokS)
}

// DeviceValue is the round's device-timed tok/s (the median of the
// repetitions), ok false when the test carries no device time.
func (t BenchTest) DeviceValue() (float64, bool) {
	if len(t.DeviceTokS) == 0 || len(t.DeviceTokS) != len(t.TokS) {
		return 0, false
	}
	v := median(t.DeviceTokS)
	return v, v > 0 && !math.IsInf(v, 0)
}

// Test returns the first test whose name starts with prefix ("pp", "tg").
func (b Bench) Test(prefix string) (BenchTest, bool) {
	for _, t := range b.Tests {
		if strings.HasPrefix(t.Name, prefix) {
			return t, true
		}
	}
	return BenchTest{}, false
}

// Turn returns the test of turn k (from 1) of a --turns document.
func (b Bench) Turn(k int) (BenchTest, bool) {
	name := "turn" + strconv.Itoa(k)
	for _, t := range b.Tests {
		if t.Name == name {
			return t, true
		}
	}
	return BenchTest{}, false
}

// TTFTValue is a turn's time to first token for one round in ms: the
// median of its repetitions; ok false for a test without ttft_ms (pp, tg).
func (t BenchTest) TTFTValue() (float64, bool) {
	if len(t.TTFTMS) == 0 {
		return 0, false
	}
	return median(t.TTFTMS), true
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

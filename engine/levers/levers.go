// Package levers is the one registry of every MINFER_* environment gate.
// The environment is read once at start into a typed Config; nothing else in
// the engine calls os.Getenv for a MINFER_* name.
package levers

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Kind says how a lever's value is read.
type Kind int

const (
	// OptOut: unset or any value other than "0" is on; "0" is off.
	OptOut Kind = iota
	// OptIn: "1" is on; unset or "0" is off.
	OptIn
	// Presence: set (to anything) is on.
	Presence
	// Enum: one of Values.
	Enum
	// Int: a non-negative integer.
	Int
	// Path: a file or directory path.
	Path
)

func (k Kind) String() string {
	return [...]string{"opt-out", "opt-in", "presence", "enum", "int", "path"}[k]
}

// Lever describes one MINFER_* gate.
type Lever struct {
	Name    string   `json:"name"`
	Kind    Kind     `json:"-"`
	KindS   string   `json:"kind"`
	Default string   `json:"default"`
	Values  []string `json:"values"`
	Doc     string   `json:"doc"`
	Backend string   `json:"backend"` // cpu, cuda, any
	Path    string   `json:"path"`    // the code path it switches
	Issue   string   `json:"issue"`   // the issue that added it
	// Arms are the A (baseline) and B (candidate) settings abtest uses when
	// the lever is run without explicit values; empty for levers that are
	// not A/B-able (instrumentation, test seams).
	ArmA string `json:"arm_a,omitempty"`
	ArmB string `json:"arm_b,omitempty"`
	// Tolerance names the lever's declared tolerance class for the A-vs-B
	// parity gate; empty means bitwise.
	Tolerance string `json:"tolerance,omitempty"`
	// Reserved is non-empty while the path the lever names is not built:
	// the name is kept (users know it) and parsed, but it switches nothing,
	// and abtest refuses to run it. The text says why and where it is going.
	Reserved string `json:"reserved,omitempty"`
	// Workload is the workload the lever's path needs, when the default one
	// (abtest's --model / --pp; nightly: qwen2-0.5b Q8_0, pp512) never runs
	// it, so its liveness gate would fail there by construction. Grammar:
	// space-separated terms, each at most once, in any order:
	//   SHAPE:TYPE  the model `minfer synth --shape SHAPE --type TYPE` writes
	//               (a shape of engine/synth, a weight type or mix it takes);
	//   ppN         a prefill of N tokens (N >= 1).
	// "qwen3-0.6b:Q8_0", "pp5", "qwen2-0.5b:Q4_0 pp512". Empty: the default.
	// The harness parses it (harness.ParseWorkload: it reads the registry
	// from the binary); harness/workload_test.go checks every declaration.
	Workload string `json:"workload,omitempty"`
}

// Mutation sites of the test seam (MINFER_TEST_MUTATE).
const (
	MutatePerturbLogit = "perturb_logit"
	MutateSkipBias     = "skip_bias"
	MutateSlowDecode   = "slow_decode"
	MutateSlowPrefill  = "slow_prefill"
)

var registry = []Lever{
	{Name: "MINFER_DISABLE_CUDA", Kind: Presence, Default: "unset", Values: []string{"unset", "1"}, Backend: "any", Path: "backend selection", Issue: "#4",
		Doc: "presence disables the CUDA backend (the CPU runs)"},
	{Name: "MINFER_CACHE_TYPE", Kind: Enum, Default: "auto", Values: []string{"auto", "f32", "f16", "q8_0"}, Backend: "any", Path: "KV cache storage", Issue: "#3",
		Doc: "KV storage per engine: f32, f16, q8_0 (auto: f32, f16 for 7B-class dims on the GPU)", ArmA: "f32", ArmB: "f16",
		Tolerance: "kv-precision: max|diff| <= 0.5, top-1 equal at every position"},
	{Name: "MINFER_NO_CUDA_GRAPH", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "CUDA graph capture/replay", Issue: "#4",
		Doc: "1: direct launches, no capture/replay", ArmA: "1", ArmB: "0"},
	{Name: "MINFER_NO_PREFILL_CAPTURE", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill graph capture", Issue: "#4",
		Doc: "1: prefill-shaped graphs are not captured", ArmA: "1", ArmB: "0"},
	{Name: "MINFER_NO_PINNED_READBACK", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "logits readback", Issue: "#4",
		Doc: "1: pageable logits readback", ArmA: "1", ArmB: "0"},
	{Name: "MINFER_MMQ", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill quantized matmul", Issue: "#6",
		Doc: "0: int8 tensor-core MMQ prefill off, f16 tensor-core GEMM instead", ArmA: "0", ArmB: "1",
		// MMQ quantizes the activations to Q8_1 (int8 per 32 values) where
		// the GEMM carries them to ~22 bits: the class of the MMVQ levers.
		Tolerance: "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"},
	{Name: "MINFER_NO_PREFILL_GEMM", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill matmul", Issue: "#4",
		Doc: "1: per-type matmul kernels for prefill too", ArmA: "1", ArmB: "0",
		// With MMQ on (the default) every quantized prefill matmul runs
		// minfer_mmq_<type>; only F32/F16/BF16 weights reach the GEMM.
		Workload: "qwen2-0.5b:F16",
		// The GEMM rounds each dequantized weight to f16 in its tiles
		// (cuda.MatMulTolerance: "f16-weight-tile"); the per-type kernels
		// read it in f32, so A and B differ at nt above the mmv limit.
		Tolerance: "f16-weight-tile: max|diff| <= 0.5, top-1 equal at every position"},
	{Name: "MINFER_SMALL_M_GEMM", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "small-batch matmul", Issue: "#6",
		Doc: "1: nt 2..8 through the GEMM path instead of multi-token MMVQ", ArmA: "0", ArmB: "1",
		Reserved: "issue #6: nt 2..8 run the per-type kernels; the GEMM route for them is not built"},
	{Name: "MINFER_NO_KQ_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "K-quant decode matmul", Issue: "#6",
		Doc: "1: K-quant decode through the f32-activation kernels", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q4_K_M",
		Tolerance: "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"},
	{Name: "MINFER_NO_Q40_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "legacy 32-value quants decode matmul (Q4_0, Q4_1, Q5_0, Q5_1)", Issue: "#6",
		Doc: "1: Q4_0 / Q4_1 / Q5_0 / Q5_1 decode through the f32-activation kernels", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q4_0",
		Tolerance: "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"},
	{Name: "MINFER_NO_Q80_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "Q8_0 decode matmul", Issue: "#6",
		Doc: "1: Q8_0 decode through the f32-activation kernels", ArmA: "1", ArmB: "0",
		Tolerance: "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"},
	{Name: "MINFER_NO_FA_PREFILL", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill attention", Issue: "#6",
		Doc: "1: the plain attention kernel for prefill", ArmA: "1", ArmB: "0",
		// The tiled kernel sums in f32 in another order (online softmax per
		// 64-cell tile, expf): f32 rounding only.
		Tolerance: "accumulation-order: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared"},
	{Name: "MINFER_NO_SPLITK_ATTN", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode attention", Issue: "#6",
		Doc: "1: decode (nt <= 8) attention through the plain one-block-per-(token, head) kernel instead of the split-K kernel", ArmA: "1", ArmB: "0",
		// The split-K kernel sums scores, exponentials and V in another
		// order (per-warp partials merged with rescaling): f32 rounding only.
		Tolerance: "accumulation-order: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared"},
	{Name: "MINFER_PDL", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "kernel launch (programmatic dependent launch)", Issue: "#6",
		Doc: "1: every kernel is launched with programmatic dependent launch (each waits for its predecessor in griddepcontrol.wait); off by default: it measured slower on the H200 (reports/MINFER_PDL/NOTE.md)", ArmA: "0", ArmB: "1"},
	{Name: "MINFER_MMVQ_INLINE_Q8", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode matmul activation quantization", Issue: "#6",
		Doc: "1: each decode MMVQ block quantizes the activation into shared memory itself (same bytes) instead of a separate minfer_quantize_q8_1 launch; off by default: it measured slower on the H200 (reports/MINFER_MMVQ_INLINE_Q8/NOTE.md)", ArmA: "0", ArmB: "1"},
	{Name: "MINFER_MMVQ_REPACK", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode matmul weight layout (Q8_0 / Q6_K)", Issue: "#6",
		Doc: "0: no 16-byte-aligned copy of the Q8_0 / Q6_K weights: the decode MMVQ kernels read the GGUF layout (on by default since reports/MINFER_MMVQ_REPACK: tg128 +8.8%)", ArmA: "0", ArmB: "1"},
	{Name: "MINFER_NORM_Q8", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode rms_norm Q8_1 activation", Issue: "#6",
		Doc: "1: decode rms_norm also writes the Q8_1 activation of the MMVQ matmuls that read it (no quantize launch)", ArmA: "0", ArmB: "1"},
	{Name: "MINFER_ATTN_DECODE_V2", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode attention (lean split-K)", Issue: "#6",
		Doc: "0: decode attention through the v1 split-K kernels instead of the lean ones (q in registers, lanes over the head dimension; on by default since reports/MINFER_ATTN_DECODE_V2: tg128 +5.9%)", ArmA: "0", ArmB: "1",
		// Per-lane partial dots reduced by a shuffle tree, per-slot online
		// softmax merged with rescaling: f32 rounding only.
		Tolerance: "accumulation-order: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared"},
	{Name: "MINFER_FA_PREFILL_V2", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill attention (tiled v2)", Issue: "#6",
		Doc: "0: prefill attention through the v1 tiled kernels instead of v2 (more blocks in flight; on by default since reports/MINFER_FA_PREFILL_V2: pp512 +14.1%)", ArmA: "0", ArmB: "1",
		// Same per-row algorithm as the tiled v1 kernel with 16-lane (not
		// 8-lane) max / sum trees: f32 rounding only.
		Tolerance: "accumulation-order: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared"},
	{Name: "MINFER_FUSE_RESIDUAL", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode matmul + residual add", Issue: "#6",
		Doc: "0: the decode matmul feeding the residual add writes W a and a separate add launch sums it (on by default since reports/MINFER_FUSE_RESIDUAL: tg128 +4.5%)", ArmA: "0", ArmB: "1"},
	{Name: "MINFER_MMVQ_NT", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "small-batch matmul (nt 2..8)", Issue: "#6",
		Doc: "0: matmuls of 2..8 tokens through the f32-activation per-type kernels instead of multi-token MMVQ over Q8_1 activations (per token bitwise the nt = 1 kernel; on by default since reports/MINFER_MMVQ_NT: pp5 x2.23)", ArmA: "0", ArmB: "1", Workload: "pp5",
		Tolerance: "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"},
	{Name: "MINFER_MMVQ_SPLIT", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode matmul (few rows, long K)", Issue: "#6",
		Doc: "1: decode MMVQ matmuls with few rows (ceil(rows / 4) < 12 x SMs: 7B o-proj, ffn_down, q/k/v) run 4 warps per output row (minfer_mmvq*_s_*) instead of one, for more loads in flight", ArmA: "0", ArmB: "1",
		// The row's units are summed by 4 warps and the 4 partials added in
		// a fixed order: f32 rounding only per matmul, but the reordered
		// outputs round later Q8_1 activations the other way now and then
		// (qwen2-0.5b: logits moved by up to 1.9% of max |logit|).
		Tolerance: "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"},
	{Name: "MINFER_QUANTIZE_X4", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "activation Q8_1 quantize", Issue: "#6",
		Doc: "0: the Q8_1 activation quantize runs one block per warp (minfer_quantize_q8_1) instead of four per warp with float4 loads (the same bytes; on by default since reports/MINFER_QUANTIZE_X4: pp512 +7.0%)", ArmA: "0", ArmB: "1"},
	{Name: "MINFER_FUSE_QKNORM", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "qwen3 q/k norm + rope + KV store", Issue: "#6",
		Doc: "0: qwen3's per-head q/k RMS norms, both ropes and both KV stores of a layer run as six launches instead of one minfer_qkv_norm_rope_store (bitwise the same; on by default since reports/MINFER_FUSE_QKNORM: qwen3 tg128 +15.2%)", ArmA: "0", ArmB: "1",
		Workload: "qwen3-0.6b:Q8_0"},
	{Name: "MINFER_NO_FUSE_FFN", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "FFN fusion pass", Issue: "#3",
		Doc: "1: unfused FFN chains", ArmA: "1", ArmB: "0"},
	{Name: "MINFER_NO_FUSE_QKV", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "QKV fusion pass", Issue: "#3",
		Doc: "1: unfused QKV chains", ArmA: "1", ArmB: "0"},
	{Name: "MINFER_NO_W16CACHE", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "f16 weight cache for MMQ-off prefill", Issue: "#6",
		Doc: "1: no persistent f16 weight cache for the MMQ-off prefill path", ArmA: "1", ArmB: "0",
		Reserved: "issue #6: the persistent f16 weight cache is not built (the GEMM dequantizes tiles on the fly)"},
	{Name: "MINFER_BENCH_WARMUP_MS", Kind: Int, Default: "2000", Values: []string{"<ms>"}, Backend: "any", Path: "minfer bench warmup", Issue: "#3",
		Doc: "untimed warmup budget of minfer bench in milliseconds (at least 3 iterations)"},
	{Name: "MINFER_OP_TIMING", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "instrumentation", Issue: "#4",
		Doc: "1: per-kernel device time with events (direct launches only)"},
	{Name: "MINFER_LAUNCH_CENSUS", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "instrumentation", Issue: "#4",
		Doc: "1: per-kernel launch counts at exit, as JSON"},
	{Name: "MINFER_GRAPH_DUMP", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "instrumentation", Issue: "#3",
		Doc: "1: dump node outputs to MINFER_DUMP_DIR (instrumented runs are never timed runs)"},
	{Name: "MINFER_DUMP_DIR", Kind: Path, Default: "", Values: []string{"<dir>"}, Backend: "any", Path: "instrumentation", Issue: "#3",
		Doc: "directory for MINFER_GRAPH_DUMP output"},
	{Name: "MINFER_KERNELS", Kind: Path, Default: "", Values: []string{"<file>"}, Backend: "cuda", Path: "kernel fatbin location", Issue: "#4",
		Doc: "path of the kernels fatbin (default: next to the binary)"},
	{Name: "MINFER_TEST_MUTATE", Kind: Enum, Default: "", Values: []string{"", MutatePerturbLogit, MutateSkipBias, MutateSlowDecode, MutateSlowPrefill}, Backend: "any", Path: "test seam", Issue: "#5",
		Doc: "test seam: plants a named defect so a gate can be shown to fail"},
	{Name: "MINFER_TEST_CALL_FAIL", Kind: Path, Default: "", Values: []string{"<site>"}, Backend: "any", Path: "test seam", Issue: "#5",
		Doc: "test seam: makes a named device call fail"},
}

func init() {
	for i := range registry {
		registry[i].KindS = registry[i].Kind.String()
	}
}

// All returns a copy of the registry, sorted by name.
func All() []Lever {
	out := make([]Lever, len(registry))
	copy(out, registry)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the lever with the given name.
func Lookup(name string) (Lever, bool) {
	for _, l := range registry {
		if l.Name == name {
			return l, true
		}
	}
	return Lever{}, false
}

// Validate checks that value is one the lever accepts.
func (l Lever) Validate(value string) error {
	switch l.Kind {
	case OptOut, OptIn:
		if value != "0" && value != "1" && value != "" {
			return fmt.Errorf("%s=%q: want 0 or 1", l.Name, value)
		}
	case Enum:
		for _, v := range l.Values {
			if v == value {
				return nil
			}
		}
		return fmt.Errorf("%s=%q: want one of %s", l.Name, value, strings.Join(nonEmpty(l.Values), ", "))
	case Int:
		if n, err := strconv.Atoi(value); err != nil || n < 0 {
			return fmt.Errorf("%s=%q: want a non-negative integer", l.Name, value)
		}
	}
	return nil
}

func nonEmpty(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Config is the typed view of every lever, parsed once at start.
type Config struct {
	DisableCUDA      bool
	CacheType        string // auto, f32, f16, q8_0
	NoCUDAGraph      bool
	NoPrefillCapture bool
	NoPinnedReadback bool
	MMQ              bool
	NoPrefillGEMM    bool
	SmallMGEMM       bool
	NoKQMMVQ         bool
	NoQ40MMVQ        bool
	NoQ80MMVQ        bool
	NoFAPrefill      bool
	NoSplitKAttn     bool
	PDL              bool
	MMVQInlineQ8     bool
	NormQ8           bool
	AttnDecodeV2     bool
	FAPrefillV2      bool
	MMVQRepack       bool
	FuseResidual     bool
	MMVQNT           bool
	MMVQSplit        bool
	QuantizeX4       bool
	FuseQKNorm       bool
	NoFuseFFN        bool
	NoFuseQKV        bool
	NoW16Cache       bool
	BenchWarmupMS    int
	OpTiming         bool
	LaunchCensus     bool
	GraphDump        bool
	DumpDir          string
	Kernels          string
	TestMutate       string
	TestCallFail     string
	raw              map[string]string // every MINFER_* value that was set
}

// Set reports the raw values of every MINFER_* variable that was set.
func (c Config) Set() map[string]string {
	out := make(map[string]string, len(c.raw))
	for k, v := range c.raw {
		out[k] = v
	}
	return out
}

// Mutated reports whether the test seam plants the named defect.
func (c Config) Mutated(site string) bool { return c.TestMutate == site }

// FromEnv parses the process environment.
func FromEnv() (Config, error) { return Parse(os.Environ()) }

// Default is the configuration with no MINFER_* variable set.
func Default() Config {
	c, err := Parse(nil)
	if err != nil {
		panic("levers: defaults do not parse: " + err.Error())
	}
	return c
}

// Parse builds a Config from KEY=VALUE pairs. An unknown MINFER_* name or a
// value the lever does not accept is an error, never ignored.
func Parse(environ []string) (Config, error) {
	raw := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, "MINFER_") {
			continue
		}
		l, known := Lookup(k)
		if !known {
			return Config{}, fmt.Errorf("unknown lever %s (minfer levers lists them)", k)
		}
		if l.Kind != Presence {
			if err := l.Validate(v); err != nil {
				return Config{}, err
			}
		}
		raw[k] = v
	}
	on := func(name string) bool { // opt-in: "1" is on
		return raw[name] == "1"
	}
	optOut := func(name string) bool {
		v, ok := raw[name]
		return !ok || v != "0"
	}
	c := Config{raw: raw}
	_, c.DisableCUDA = raw["MINFER_DISABLE_CUDA"]
	c.CacheType = raw["MINFER_CACHE_TYPE"]
	if c.CacheType == "" {
		c.CacheType = "auto"
	}
	c.NoCUDAGraph = on("MINFER_NO_CUDA_GRAPH")
	c.NoPrefillCapture = on("MINFER_NO_PREFILL_CAPTURE")
	c.NoPinnedReadback = on("MINFER_NO_PINNED_READBACK")
	c.MMQ = optOut("MINFER_MMQ")
	c.NoPrefillGEMM = on("MINFER_NO_PREFILL_GEMM")
	c.SmallMGEMM = on("MINFER_SMALL_M_GEMM")
	c.NoKQMMVQ = on("MINFER_NO_KQ_MMVQ")
	c.NoQ40MMVQ = on("MINFER_NO_Q40_MMVQ")
	c.NoQ80MMVQ = on("MINFER_NO_Q80_MMVQ")
	c.NoFAPrefill = on("MINFER_NO_FA_PREFILL")
	c.NoSplitKAttn = on("MINFER_NO_SPLITK_ATTN")
	c.PDL = on("MINFER_PDL")
	c.MMVQInlineQ8 = on("MINFER_MMVQ_INLINE_Q8")
	c.NormQ8 = on("MINFER_NORM_Q8")
	c.AttnDecodeV2 = optOut("MINFER_ATTN_DECODE_V2")
	c.FAPrefillV2 = optOut("MINFER_FA_PREFILL_V2")
	c.MMVQRepack = optOut("MINFER_MMVQ_REPACK")
	c.FuseResidual = optOut("MINFER_FUSE_RESIDUAL")
	c.MMVQNT = optOut("MINFER_MMVQ_NT")
	c.MMVQSplit = on("MINFER_MMVQ_SPLIT")
	c.QuantizeX4 = optOut("MINFER_QUANTIZE_X4")
	c.FuseQKNorm = optOut("MINFER_FUSE_QKNORM")
	c.NoFuseFFN = on("MINFER_NO_FUSE_FFN")
	c.NoFuseQKV = on("MINFER_NO_FUSE_QKV")
	c.NoW16Cache = on("MINFER_NO_W16CACHE")
	c.BenchWarmupMS = 2000
	if v, ok := raw["MINFER_BENCH_WARMUP_MS"]; ok {
		c.BenchWarmupMS, _ = strconv.Atoi(v)
	}
	c.OpTiming = on("MINFER_OP_TIMING")
	c.LaunchCensus = on("MINFER_LAUNCH_CENSUS")
	c.GraphDump = on("MINFER_GRAPH_DUMP")
	c.DumpDir = raw["MINFER_DUMP_DIR"]
	c.Kernels = raw["MINFER_KERNELS"]
	c.TestMutate = raw["MINFER_TEST_MUTATE"]
	c.TestCallFail = raw["MINFER_TEST_CALL_FAIL"]
	return c, nil
}

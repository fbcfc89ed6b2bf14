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
	// Seam: a test-seam site, "SITE" or "SITE=VALUE" (ParseMutation).
	Seam
)

func (k Kind) String() string {
	return [...]string{"opt-out", "opt-in", "presence", "enum", "int", "path", "mutation"}[k]
}

// Lever describes one MINFER_* gate. An A/B-able lever (one with arms)
// declares everything GATES.md needs, once, here: backend, arms, workload,
// liveness rule, tolerance class, pre-registered bars and the levers it
// requires. `minfer levers --json` prints it all; the harness reads it from
// there and keeps no table of its own.
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
	// Tolerance is the lever's declared tolerance class for the A-vs-B
	// parity and greedy gates: one of the Tol* constants; "" is bitwise.
	Tolerance string `json:"tolerance,omitempty"`
	// Reserved is non-empty while the path the lever names is not built:
	// the name is kept (users know it) and parsed, but it switches nothing,
	// and abtest refuses to run it. The text says why and where it is going.
	Reserved string `json:"reserved,omitempty"`
	// Workload is the workload the lever's CUDA path needs, when the
	// default one (abtest's embedded model, pp512) never runs it. Grammar:
	// space-separated terms, each at most once, in any order:
	//   SHAPE:TYPE  the model `minfer synth --shape SHAPE --type TYPE` writes
	//               (a shape of engine/synth, a weight type or mix it takes);
	//   ppN         a prefill of N tokens (N >= 1).
	// "qwen3-0.6b:Q8_0", "pp5", "qwen2-0.5b:Q4_0 pp512". Empty: the default.
	// On the CPU backend a lever of backend "any" runs on the default
	// workload (its CPU path needs no weight type); Liveness.CPU.Needs says
	// so and a test checks it. The harness parses it (harness.ParseWorkload);
	// harness/workload_test.go checks every declaration against the needs.
	Workload string `json:"workload,omitempty"`
	// Liveness says what "the path this lever switches ran" means, per
	// backend; every gate judges every arm process by it. Nil for levers
	// without arms.
	Liveness *Liveness `json:"liveness,omitempty"`
	// Requires lists NAME=VALUE settings of other levers the path needs;
	// abtest pins them in both arms (MINFER_FUSE_QKNORM's fused kernel
	// exists only inside the QKV fusion).
	Requires []string `json:"requires,omitempty"`
	// Bars are the pre-registered bars of the A/B gate (GATES.md gate 3).
	// A flag that changes one is a deviation the report prints first.
	Bars *Bars `json:"bars,omitempty"`
	// Memory is the lever's memory bar (GATES.md gate 3, issue 19): arm
	// B's peak device memory, measured from outside the process, at most
	// A x (1 + Frac) + MiB. Filled with DefaultMemory for every A/B lever
	// that declares none; a bar above the default names the cost it buys.
	Memory *MemoryBar `json:"memory,omitempty"`
	// HostWork: the path moves host work (launch submission, readback,
	// capture), so decode is judged on wall time; otherwise, where the
	// device timed decode, the gate decides on device time (less noise).
	HostWork bool `json:"host_work,omitempty"`
	// Packages are the Go packages (module-relative) that hold the lever's
	// path: on the CPU, gate 4 runs their test binaries with arm B's
	// setting (on CUDA the device test binaries).
	Packages []string `json:"packages,omitempty"`
	// DefaultSince names the commit or report that made the current
	// default the default ("" when it has always been).
	DefaultSince string `json:"default_since,omitempty"`
	// PairedModel: the candidate value names a model that works with the
	// run's model (a draft: MINFER_DRAFT). abtest makes a path absolute
	// (the arms run elsewhere), synthesizes a SHAPE:TYPE value as it does
	// --shape/--type, refuses a pair minfer refuses (could not run, not a
	// FAIL), and runs parity and greedy on the run's own model: a
	// correctness model would not pair with the candidate.
	PairedModel bool `json:"paired_model,omitempty"`
	// ExactGreedy: gate 2 demands identical token ids whatever Tolerance
	// says (speculative decoding's output is the target's own: a
	// divergence is a defect, never a rounding class).
	ExactGreedy bool `json:"exact_greedy,omitempty"`
	// BenchOff are the bench flags of the arm with the path off (gates 3
	// and 5), so that both arms time the same work: with MINFER_DRAFT the
	// drafted tg continues a prompt, and "--draft none" makes the plain
	// arm decode after the same prompt, one token per forward.
	BenchOff []string `json:"bench_off,omitempty"`
}

// Bars are a lever's pre-registered A/B bars.
type Bars struct {
	// PP and TG are the not-slower bars (slowdown factors: 1.015 refuses B
	// when it is slower than A by more than 1.5% in too many rounds).
	PP float64 `json:"pp"`
	TG float64 `json:"tg"`
	// Claim is the improvement bar (a fraction: 0.015 is +1.5%).
	Claim float64 `json:"claim"`
	// MaxRounds caps the rounds a power calculation may ask for (GATES.md:
	// at most 45; a slow workload may declare fewer).
	MaxRounds int `json:"max_rounds"`
}

// DefaultBars are GATES.md's defaults for whole prefill and decode.
var DefaultBars = Bars{PP: 1.015, TG: 1.015, Claim: 0.015, MaxRounds: 45}

// MemoryBar is a lever's memory bar: arm B's peak device memory may exceed
// arm A's by at most Frac of A plus MiB. Above it gate 3 fails with the
// memory evidence. A lever whose candidate buys its speed with memory
// declares a bar above the default and names the cost (Cost: what the
// extra memory holds), printed next to the measured figure.
type MemoryBar struct {
	Frac float64 `json:"frac"` // 0.01: 1% of arm A's peak
	MiB  float64 `json:"mib"`  // a constant allowance (allocator granularity, a context's own)
	// Cost names what arm B's extra memory buys; required when the bar is
	// above DefaultMemory, empty otherwise.
	Cost string `json:"cost,omitempty"`
	// Paired: the bar also allows the device memory the engine plans for
	// the model arm B's value names (Lever.PairedModel: MINFER_DRAFT's
	// draft), measured per run: the harness asks `minfer info --device
	// --json` for that model's plan at the arms' context.
	Paired bool `json:"paired,omitempty"`
}

// DefaultMemory is GATES.md's default memory bar: B <= A + 1% + 64 MiB.
var DefaultMemory = MemoryBar{Frac: 0.01, MiB: 64}

// AboveDefault reports whether the bar allows more than DefaultMemory.
func (m MemoryBar) AboveDefault() bool {
	return m.Frac > DefaultMemory.Frac || m.MiB > DefaultMemory.MiB || m.Paired
}

// String is the bar as a report states it: "B <= A + 1% + 64 MiB", with
// the declared cost when there is one.
func (m MemoryBar) String() string {
	s := fmt.Sprintf("B <= A + %g%% + %g MiB", m.Frac*100, m.MiB)
	if m.Paired {
		s += " + the paired model's planned device memory"
	}
	if m.Cost != "" {
		s = fmt.Sprintf("declared cost %q: %s", m.Cost, s)
	}
	return s
}

// Liveness is a lever's liveness rule: with the lever at On an arm runs the
// path, with any other value (an unset lever reads as its default) it does
// not. Each backend the lever runs on has its rule.
type Liveness struct {
	On string `json:"on"`
	// OffValues, when set, replaces On: every value but these runs the
	// path (a lever whose candidate is open-ended, such as a file path).
	OffValues []string  `json:"off_values,omitempty"`
	CUDA      *PathRule `json:"cuda,omitempty"`
	CPU       *PathRule `json:"cpu,omitempty"`
	// Why says what the rule defends, for the report.
	Why string `json:"why"`
}

// RunsPath reports whether an arm whose lever value is v (an unset lever
// reads as its default) runs the path: v is On, or, with OffValues, v is
// none of them.
func (lv *Liveness) RunsPath(v string) bool {
	if lv == nil {
		return false
	}
	if len(lv.OffValues) > 0 {
		for _, off := range lv.OffValues {
			if v == off {
				return false
			}
		}
		return true
	}
	return v == lv.On
}

// PathRule is the evidence of one backend's path in the census an arm
// process prints at exit ({"launch_census":{name: count}}: kernel launches
// on CUDA, op/path executions on the CPU) and {"cuda_graphs":...}.
type PathRule struct {
	// Census are name patterns (path.Match globs): the arm with the path on
	// runs at least one name matching each, the arm with it off none.
	Census []string `json:"census,omitempty"`
	// Graphs: the arm with the path on captures and replays CUDA graphs,
	// the other none; both run the same names.
	Graphs bool `json:"graphs,omitempty"`
	// PDL: the arm with the path on issues PDL launches (pdl_launches > 0;
	// no lever of this registry declares it since MINFER_PDL was retired,
	// recorded registries still do),
	// the other none; both run the same names.
	PDL bool `json:"pdl,omitempty"`
	// PrefillGraphs: the arm with the path on captures more graphs than the
	// other, which still captures and replays its decode graph; same names.
	PrefillGraphs bool `json:"prefill_graphs,omitempty"`
	// OffCensus are name patterns the arm with the path off runs (at least
	// one name matching each) and the arm with it on none: evidence that
	// the off arm took its own path (MINFER_KERNELS: kernels_nvrtc).
	OffCensus []string `json:"off_census,omitempty"`
	// SameKernels: both arms launch the same set of names, apart from
	// those matching Census and OffCensus (the path is where the kernels
	// come from, not which run).
	SameKernels bool `json:"same_kernels,omitempty"`
	// Funcs (the CPU backend) are regular expressions of Go function names
	// (as pprof prints them): a pprof CPU profile of the arm with the path
	// on has samples in a matching function, the other none.
	Funcs []string `json:"funcs,omitempty"`
	// Needs is what a workload must have for the path to run at all.
	Needs Needs `json:"needs"`
}

// Needs is what a workload must have for a path to run.
type Needs struct {
	// WeightTypes: at least one matmul weight of one of these types.
	WeightTypes []string `json:"weight_types,omitempty"`
	// Arch: the model's architecture (qwen3 for the q/k norm).
	Arch string `json:"arch,omitempty"`
	// MinNT / MaxNT: a forward of that many tokens (MaxNT 0: no upper
	// bound): decode is 1, the small-batch path 2..8, prefill >= 9.
	MinNT int `json:"min_nt,omitempty"`
	MaxNT int `json:"max_nt,omitempty"`
	// Repeats: the path runs only from the Nth execution of one shape (CUDA
	// graphs are captured at the 3rd and replayed from the 4th).
	Repeats int `json:"repeats,omitempty"`
	// Untied: the model has an output matrix of its own (output.weight),
	// not the token embedding tied to it.
	Untied bool `json:"untied_output,omitempty"`
	// KVCache: the KV cache format the path reads (a MINFER_CACHE_TYPE
	// value other than auto: "f16"); empty: any. The engine picks the
	// format by the auto rule unless told, so a path that reads one format
	// never runs on a model whose auto cache is another (the trained
	// correctness models' f32); abtest pins MINFER_CACHE_TYPE to it in both
	// arms, as it pins Requires. Unlike a Requires entry it is no refusal
	// rule of the engine: the lever set beside another cache (or auto) just
	// leaves that cache's attention as it was.
	KVCache string `json:"kv_cache,omitempty"`
	// AnyDepth: NAME=VALUE, the setting under which the path runs from the
	// first KV cell (MINFER_ATTN_DECODE_TC_FROM=0): a path routed by depth
	// never runs on the correctness gates' models, whose contexts are
	// short, so abtest pins it in the correctness gates (parity, greedy,
	// the suite) and not in the A/B, which times the route as users get
	// it at the declared workload.
	AnyDepth string `json:"any_depth,omitempty"`
}

// NTRuns reports whether a forward of nt tokens can run the path.
func (n Needs) NTRuns(nt int) bool {
	return nt >= max(n.MinNT, 1) && (n.MaxNT == 0 || nt <= n.MaxNT)
}

// Tolerance classes (GATES.md gate 1, A vs B): the name, the cause and the
// bar, as one phrase the harness parses.
const (
	// TolKVPrecision: a KV cache stored at lower precision.
	TolKVPrecision = "kv-precision: max|diff| <= 0.5, top-1 equal at every position"
	// TolActQuant: activations quantized to Q8_1 (int8 per 32 values) where
	// the other arm carries them in f32/f16.
	TolActQuant = "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"
	// TolActPrecision: arm B carries activations in f16 where A quantizes
	// them to Q8_1, so A vs B differs by A's own quantization error; a flip
	// there is excused only where B's top-1 is the exact evaluation's
	// (MINFER_CPU_EXACT=1) and B is within 0.01 of it (gates.Parity). H100,
	// 2026-12-06, trained tiny-code Q8_0, nt=64: A vs B rel L2 0.0388 and a
	// flip at pos 14 (margin 0.236) where A and the CPU reference (0.0345
	// from exact) agree; B vs exact rel L2 0.00177, top-1 64/64.
	TolActPrecision = "activation-precision: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared, B vs exact rel L2 <= 0.01"
	// TolF16WeightTile: dequantized weights rounded to f16 in GEMM tiles.
	TolF16WeightTile = "f16-weight-tile: max|diff| <= 0.5, top-1 equal at every position"
	// TolAccumOrder: the same f32 sums in another order.
	TolAccumOrder = "accumulation-order: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared"
	// TolF16AttnTile: attention's Q K^T and P V on tensor cores with Q, K,
	// V and P rounded to f16 (f32 accumulation), against f32 FMA tiles.
	TolF16AttnTile = "f16-attention-tile: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared"
	// TolVerifyChunk: arm B's logits come from verify forwards of 1+K
	// tokens, arm A's from one forward of the whole prompt; on the CPU the
	// rows are bitwise the same, on CUDA a prefill and a small-batch
	// forward take different matmul routes (MMQ / GEMM against MMVQ). The
	// bar is relative, as the activation-quantization class's: on the
	// H200 (reports/MINFER_DRAFT, 2026-12-02) the synthetic qwen2-7b pair
	// (paired, so parity runs on the random-weight target) differed by rel
	// L2 0.025 at nt=64 (logit RMS 8, max|diff| 1.06, each arm 0.036 from
	// the CPU) with top-1 flips only at margins <= 0.17; an absolute 0.5
	// does not scale with the logits. Gate 2 stays exact for such a lever
	// (Lever.ExactGreedy).
	TolVerifyChunk = "verify-chunking: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"
)

// Mutation sites of the test seam (MINFER_TEST_MUTATE). slow_decode and
// slow_prefill take a fraction: slow_decode=0.03 makes every decode forward
// 3% slower (its device time on CUDA, its wall time on the CPU); bare, the
// fraction is 1 (twice as slow).
const (
	MutatePerturbLogit = "perturb_logit"
	MutateSkipBias     = "skip_bias"
	MutateSlowDecode   = "slow_decode"
	MutateSlowPrefill  = "slow_prefill"
	// MutatePhantom (phantom=NAME): the lever reads as its baseline (arm A)
	// value, so its candidate path never runs (a fast path that switches
	// nothing).
	MutatePhantom = "phantom"
	// MutateFailDeviceTest: a planted test of the device suite (and of the
	// CPU packages' suites) fails.
	MutateFailDeviceTest = "fail_device_test"
	// MutateAcceptWrongDraft: speculative decoding (--draft) accepts the
	// first draft token the target disagrees with, once (engine/spec): the
	// greedy-identity gate must catch it.
	MutateAcceptWrongDraft = "accept_wrong_draft"
)

// mutationSites are the sites MINFER_TEST_MUTATE accepts; the slow ones
// take "=FRACTION".
var mutationSites = []string{MutatePerturbLogit, MutateSkipBias, MutateSlowDecode, MutateSlowPrefill, MutatePhantom, MutateFailDeviceTest, MutateAcceptWrongDraft}

// Weight-type sets of the liveness needs.
var (
	mmvqTypes  = []string{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"}
	mmqTypes   = mmvqTypes
	quantTypes = mmvqTypes
)

// cudaOnly is the liveness rule of a path that exists only on CUDA.
func cudaOnly(on string, why string, census []string, needs Needs) *Liveness {
	return &Liveness{On: on, Why: why, CUDA: &PathRule{Census: census, Needs: needs}}
}

// Census names of speculative decoding (cmd/minfer adds them to the launch
// census from its decoders' counts): spec_forward every target forward of
// a decoder, spec_drafted the draft tokens it checked, spec_accepted those
// it kept. Only a drafter proposes, so spec_drafted is the path's evidence.
const (
	CensusSpecForward  = "spec_forward"
	CensusSpecDrafted  = "spec_drafted"
	CensusSpecAccepted = "spec_accepted"
)

// MINFER_KERNELS: KernelsNVRTC names the NVRTC build of the embedded
// kernel sources explicitly (no file is looked for, not even beside the
// executable); any other non-empty value is a kernels file, which must
// exist. The CUDA backend's census (cmd/minfer) names where the kernels
// came from with one pseudo-entry per backend: CensusKernelsFile (a
// kernels file) or CensusKernelsNVRTC (the NVRTC build); kernel names all
// start with minfer_, so these cannot collide with one.
const (
	KernelsNVRTC      = "nvrtc"
	CensusKernelsFile = "kernels_file"
	// CensusPinnedSteps counts the forwards a CUDA backend ran through one
	// handoff (MINFER_PIN_STEP).
	CensusPinnedSteps  = "pinned_steps"
	CensusKernelsNVRTC = "kernels_nvrtc"
)

// DraftNone is MINFER_DRAFT's (and --draft's) plain decoding through the
// speculative loop: nothing is drafted.
const DraftNone = "none"

var registry = []Lever{
	{Name: "MINFER_DISABLE_CUDA", Kind: Presence, Default: "unset", Values: []string{"unset", "1"}, Backend: "any", Path: "backend selection", Issue: "#4",
		Doc: "presence disables the CUDA backend (the CPU runs)"},
	{Name: "MINFER_CACHE_TYPE", Kind: Enum, Default: "auto", Values: []string{"auto", "f32", "f16", "q8_0"}, Backend: "any", Path: "KV cache storage", Issue: "#3",
		Doc: "KV storage per engine: f32, f16, q8_0 (auto: f32, f16 for 7B-class dims on the GPU)", ArmA: "f32", ArmB: "f16",
		Tolerance: TolKVPrecision, Packages: []string{"engine/kv", "engine/cpu"},
		Liveness: &Liveness{On: "f16",
			CUDA: &PathRule{Census: []string{"minfer_attn_decode*_f16"}},
			CPU:  &PathRule{Census: []string{"cpu_kv_store_f16"}, Funcs: []string{`/engine/kv\.(store|load)RowF16$`}},
			Why:  "with the f16 cache the KV stores write f16 cells and decode attention reads them (minfer_attn_decode[2]_*_f16 on CUDA, cpu_kv_store_f16 on the CPU); with f32 none does"}},
	{Name: "MINFER_NO_CUDA_GRAPH", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "CUDA graph capture/replay", Issue: "#4",
		Doc: "1: direct launches, no capture/replay", ArmA: "1", ArmB: "0", HostWork: true,
		Liveness: &Liveness{On: "0", CUDA: &PathRule{Graphs: true, Needs: Needs{Repeats: 4}},
			Why: "with graphs on, the backend captures and replays CUDA graphs (same kernels, replays counted in the census); with them off it captures and replays none"}},
	{Name: "MINFER_NO_PREFILL_CAPTURE", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill graph capture", Issue: "#4",
		Doc: "1: prefill-shaped graphs are not captured", ArmA: "1", ArmB: "0", HostWork: true,
		Liveness: &Liveness{On: "0", CUDA: &PathRule{PrefillGraphs: true, Needs: Needs{MinNT: 2, Repeats: 4}},
			Why: "with prefill capture on, a prefill shape run often enough is captured as a CUDA graph too: more graphs captured than with it off, where only the decode graph is (same kernels either way)"}},
	{Name: "MINFER_NO_PINNED_READBACK", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "logits readback", Issue: "#4",
		Doc: "1: pageable logits readback", ArmA: "1", ArmB: "0", HostWork: true},
	{Name: "MINFER_MMQ", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill quantized matmul", Issue: "#6",
		Doc: "0: prefill matmuls of quantized weights run the f16 tensor-core GEMM of their GGUF bytes (minfer_gemm_<type>) instead of the MMQ route: the int8 tensor-core MMQ over Q8_1 activations (minfer_mmq_<type>) or the f16 GEMM of minfer_gemm16_* (a Q8_0 matrix in its one repacked copy, and with MINFER_MMQ_F16_KQ Q4_K / Q6_K ones)", ArmA: "0", ArmB: "1",
		// MMQ quantizes the activations to Q8_1 (int8 per 32 values) where
		// the GEMM carries them to ~22 bits: the class of the MMVQ levers.
		Tolerance: TolActQuant, Workload: "qwen2-0.5b:Q8_0",
		// Its A/B pins the int8 kernels: over the one repacked copy (the
		// default) a Q8_0 prefill runs minfer_gemm16_q8_0r; with the GGUF
		// bytes kept it runs minfer_mmq_q8_0 over them. (Arm A's
		// MINFER_MMQ=0 keeps them anyway: the one copy yields to it.)
		Requires: []string{"MINFER_ONE_COPY=0"},
		Liveness: cudaOnly("1", "prefill matmuls of quantized weights run the int8 tensor-core MMQ kernels (minfer_mmq_<type>) only with MMQ on; with MINFER_MMQ=0 they run the f16 GEMM",
			[]string{"minfer_mmq_q*"}, Needs{WeightTypes: mmqTypes, MinNT: 9})},
	// The f16 GEMM that a Q8_0 prefill over its one repacked copy runs
	// (minfer_gemm16_q8_0r: reports/MINFER_MMQ_F16, its lever retired) for
	// the K-quants of a Q4_K_M model: Q4_K from its GGUF bytes, Q6_K from
	// its repacked copy (issue 20's Q4_K_M rows).
	{Name: "MINFER_MMQ_F16_KQ", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill quantized matmul", Issue: "#20",
		Doc: "0: prefill matmuls of Q4_K weights (GGUF bytes) and Q6_K weights (repacked copy) run the int8 MMQ over Q8_1 activations (minfer_mmq_q4_k, minfer_mmq_q6_kr) instead of the f16 tensor-core GEMM of a Q8_0 prefill (minfer_gemm16_q4_k, minfer_gemm16_q6_kr: each 32-deep step's weight tile dequantized once into shared memory as f16, exactly as dequant.cuh then rounded once). " +
			"At its default it yields to a setting its Requires exclude (the int8 MMQ or the f16 GEMM of MINFER_MMQ=0 then); set to 1 with one it is refused. " +
			"On by default since reports/MINFER_MMQ_F16_KQ: qwen2-7b Q4_K_M pp512 +65.2%, tg128 and peak device memory equal (H100)",
		ArmA: "0", ArmB: "1", Workload: "qwen2-7b:Q4_K_M", DefaultSince: "reports/MINFER_MMQ_F16_KQ",
		// B's activations are f16 (2^-11), A's Q8_1 (int8 a 32-value
		// block): the class that separates MMQ from the GEMM.
		Tolerance: TolActPrecision,
		Requires:  []string{"MINFER_MMQ=1", "MINFER_MMVQ_REPACK=1", "MINFER_NO_PREFILL_GEMM=0"},
		Liveness: cudaOnly("1", "prefill matmuls of Q4_K and repacked Q6_K weights run minfer_gemm16_q4_k / minfer_gemm16_q6_kr only with the lever on; off, the int8 MMQ (minfer_mmq_q4_k, minfer_mmq_q6_kr)",
			[]string{"minfer_gemm16_q4_k", "minfer_gemm16_q6_kr"}, Needs{WeightTypes: []string{"Q4_K", "Q6_K"}, MinNT: 9})},
	{Name: "MINFER_MMQ_ASYNC", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill quantized matmul loads", Issue: "#20",
		Doc:  "1: the MMQ kernels stage each k stage's weight and activation bytes in shared memory with cp.async one stage ahead (minfer_mmq_<type>_async[_r64]) instead of loading them into registers while the tensor cores wait (ncu 2026-12-03: long_scoreboard the largest stall of minfer_mmq_*); bitwise the plain kernels",
		ArmA: "0", ArmB: "1", Workload: "qwen2-7b:Q8_0",
		// The async kernels read only GGUF bytes (the repacked copy has no
		// async form; the one copy yields to MINFER_MMQ_ASYNC=1): both arms
		// keep them, so arm A's Q8_0 prefill runs minfer_mmq_q8_0, not the
		// f16 GEMM of the one copy.
		Requires: []string{"MINFER_MMQ=1", "MINFER_ONE_COPY=0"},
		Liveness: cudaOnly("1", "prefill matmuls of quantized weights run the async MMQ kernels (minfer_mmq_<type>_async*) only with the lever on; off, the plain minfer_mmq_<type>",
			[]string{"minfer_mmq_q*_async*"}, Needs{WeightTypes: mmqTypes, MinNT: 9})},
	{Name: "MINFER_NO_PREFILL_GEMM", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill matmul", Issue: "#4",
		Doc: "1: per-type matmul kernels for prefill too", ArmA: "1", ArmB: "0",
		// With MMQ on (the default) every quantized prefill matmul runs
		// minfer_mmq_<type>; only F32/F16/BF16 weights reach the GEMM.
		Workload: "qwen2-0.5b:F16",
		// The GEMM rounds each dequantized weight to f16 in its tiles
		// (cuda.MatMulTolerance: "f16-weight-tile"); the per-type kernels
		// read it in f32, so A and B differ at nt above the mmv limit.
		Tolerance: TolF16WeightTile,
		Liveness: cudaOnly("0", "prefill matmuls run the tiled tensor-core GEMM kernels (minfer_gemm_<type>) only with the GEMM path on; with it off they go through the per-type kernels (with MMQ on, only float weights reach the GEMM)",
			[]string{"minfer_gemm_*"}, Needs{WeightTypes: []string{"F16", "BF16", "F32"}, MinNT: 9})},
	{Name: "MINFER_NO_KQ_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "K-quant decode matmul", Issue: "#6",
		Doc: "1: K-quant decode (Q4_K, Q5_K, Q6_K) through the f32-activation kernels", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q4_K_M",
		Tolerance: TolActQuant,
		Liveness: cudaOnly("0", "K-quant decode matmuls (nt = 1) run the dp4a kernels over Q8_1 activations only with the lever on; off, they run minfer_mmv_<type>",
			[]string{"minfer_mmvq*_q[456]_k"}, Needs{WeightTypes: []string{"Q4_K", "Q5_K", "Q6_K"}, MaxNT: 1})},
	{Name: "MINFER_NO_Q40_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "legacy 32-value quants decode matmul (Q4_0, Q4_1, Q5_0, Q5_1)", Issue: "#6",
		Doc: "1: Q4_0 / Q4_1 / Q5_0 / Q5_1 decode through the f32-activation kernels", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q4_0",
		Tolerance: TolActQuant,
		Liveness: cudaOnly("0", "Q4_0 / Q4_1 / Q5_0 / Q5_1 decode matmuls (nt = 1) run the dp4a kernels over Q8_1 activations only with the lever on; off, they run the minfer_mmv_<type> kernels",
			[]string{"minfer_mmvq*_q[45]_[01]"}, Needs{WeightTypes: []string{"Q4_0", "Q4_1", "Q5_0", "Q5_1"}, MaxNT: 1})},
	{Name: "MINFER_NO_Q80_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "Q8_0 decode matmul", Issue: "#6",
		Doc: "1: Q8_0 decode through the f32-activation kernels", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q8_0",
		Tolerance: TolActQuant,
		Liveness: cudaOnly("0", "Q8_0 decode matmuls (nt = 1) run the dp4a kernels over Q8_1 activations (plain, fused qkv/ffn, in-kernel quantize) only with the lever on; off, they run minfer_mmv_q8_0",
			[]string{"minfer_mmvq*_q8_0"}, Needs{WeightTypes: []string{"Q8_0"}, MaxNT: 1})},
	{Name: "MINFER_NO_FA_PREFILL", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill attention", Issue: "#6",
		Doc: "1: the plain attention kernel for prefill", ArmA: "1", ArmB: "0",
		// The tiled kernels (by default the tensor-core ones, MINFER_FA_PREFILL_TC)
		// round Q, K, V and P to f16 and sum in another order (online softmax per
		// 64-cell tile): the f16 tile class.
		Tolerance: TolF16AttnTile,
		Liveness: cudaOnly("0", "prefill attention (nt >= 9) runs the tiled kernels (minfer_attn_prefill_tc_* by default, minfer_attn_prefill2_* with MINFER_FA_PREFILL_TC=0) only with the lever on; off, the plain minfer_attn_f32",
			[]string{"minfer_attn_prefill*"}, Needs{MinNT: 9})},
	{Name: "MINFER_FA_PREFILL_TC", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "prefill attention", Issue: "#20",
		Doc:  "0: prefill attention (nt >= 9) on the FMA tiles of minfer_attn_prefill2_* instead of the tensor cores (minfer_attn_prefill_tc_*: Q K^T and P V by mma.sync m16n8k16, f16 in, f32 accumulation, each warp's scores and output in registers, the softmax in powers of 2, no mask on a tile a warp sees whole, P's row sums by the tensor cores; a grid short of two waves splits each KV range over up to 8 blocks and merges them); on by default since reports/MINFER_FA_PREFILL_TC (H200, 2026-12-03, five gates PASS: pp512 at depth 4096 x1.72 on qwen2-7b Q4_K_M, x3.03 on qwen3-0.6b Q8_0, pp512 x1.04 at depth 0); its lean form is the only one since reports/MINFER_FA_PREFILL_LEAN (H100, 2026-12-06, five gates PASS: pp512 at depth 32128 x1.29 on qwen2-7b Q8_0)",
		ArmA: "0", ArmB: "1", Tolerance: TolF16AttnTile, Workload: "qwen2-7b:Q4_K_M d4096", DefaultSince: "reports/MINFER_FA_PREFILL_TC",
		Liveness: cudaOnly("1", "prefill attention (nt >= 9) runs minfer_attn_prefill_tc_* only with the lever on; off, minfer_attn_prefill2_*",
			[]string{"minfer_attn_prefill_tc_*"}, Needs{MinNT: 9})},
	// Host work only: the same kernels, launched from the device thread in
	// one handoff a forward instead of one per backend call (6 a decode
	// step, ~20 us each on the H200: reports/perf/2026-12-02-1a61e32-host).
	{Name: "MINFER_PIN_STEP", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "forward on the device thread (host)", Issue: "#20",
		Doc:  "1: a forward's input writes, graph run and logits read run on the CUDA backend's device thread in one handoff instead of one per backend call; not yet measured on the H200",
		ArmA: "0", ArmB: "1", Workload: "qwen2-0.5b:Q8_0",
		Liveness: &Liveness{On: "1",
			CUDA: &PathRule{Census: []string{CensusPinnedSteps}, SameKernels: true},
			Why:  "every forward of the pinned arm counts in pinned_steps, the other arm's none, and both launch the same kernels: an arm that handed off per call is caught"}},
	{Name: "MINFER_NO_SPLITK_ATTN", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode attention", Issue: "#6",
		Doc: "1: decode (nt <= 8) attention through the plain one-block-per-(token, head) kernel instead of the split-K kernel", ArmA: "1", ArmB: "0",
		// The split-K kernel sums scores, exponentials and V in another
		// order (per-warp partials merged with rescaling): f32 rounding only.
		Tolerance: TolAccumOrder,
		Liveness: cudaOnly("0", "decode attention (nt <= 8) runs the lean split-K kernels (minfer_attn_decode2l_* or, with MINFER_FUSE_ATTN_Q8, minfer_attn_decode2q_*) only with the lever on; off, it runs the plain minfer_attn_f32",
			[]string{"minfer_attn_decode2*"}, Needs{MaxNT: 8})},
	{Name: "MINFER_MMVQ_REPACK", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode matmul weight layout (Q8_0 / Q6_K)", Issue: "#6",
		Doc: "0: no 16-byte-aligned copy of the Q8_0 / Q6_K weights: the decode MMVQ kernels read the GGUF layout (on by default since reports/MINFER_MMVQ_REPACK: tg128 +8.8%)", ArmA: "0", ArmB: "1",
		Workload: "qwen2-0.5b:Q8_0", DefaultSince: "reports/MINFER_MMVQ_REPACK",
		// With MINFER_ONE_COPY (the default) the repacked copy is the
		// matrix's only one, so B holds what A holds: the default memory
		// bar (until then B held those matrices twice, 7B Q8_0 +~7.5 GB).
		Liveness: cudaOnly("1", "decode MMVQ of Q8_0 / Q6_K weights reads their 16-byte-aligned repacked copy (minfer_mmvqr_*) only with the lever on; off, minfer_mmvq_* reads the GGUF blocks",
			[]string{"minfer_mmvqr_*"}, Needs{WeightTypes: []string{"Q8_0", "Q6_K"}, MaxNT: 1})},
	{Name: "MINFER_EMBED_HOST", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "token embedding placement (untied output)", Issue: "#19",
		Doc: "0: the token-embedding table of a model with an output matrix of its own is uploaded to device memory; on, it stays in page-locked host memory mapped into the device (minfer_get_rows_host reads one row per token over the host link). A tied output keeps it on the device either way (the logits matmul reads all of it). " +
			"On by default since reports/MINFER_EMBED_HOST: qwen2-7b Q8_0 peak device memory -6.5%, pp512 and tg128 not slower (H100)",
		ArmA: "0", ArmB: "1", DefaultSince: "reports/MINFER_EMBED_HOST",
		// Untied: qwen2-7b (552 MiB of Q8_0 embedding). The gather's
		// arithmetic is minfer_get_rows' (bitwise); B's device memory drops
		// by the table, which the default memory bar reads as within.
		Workload: "qwen2-7b:Q8_0",
		Liveness: cudaOnly("1", "the embedding gather of an untied model reads the host-mapped table (minfer_get_rows_host*) only with the lever on; off, minfer_get_rows* reads the device copy",
			[]string{"minfer_get_rows_host*"}, Needs{Untied: true})},
	{Name: "MINFER_ONE_COPY", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "weight layout (Q8_0 / Q6_K): one device copy", Issue: "#19",
		Doc: "0: the GGUF bytes of a Q8_0 / Q6_K matrix stay on the device beside its 16-byte-aligned repacked copy (MINFER_MMVQ_REPACK); on, the repacked copy is the only one (repacked on the host, uploaded once) and prefill reads it through the f16 GEMM (minfer_gemm16_q8_0r; Q6_K: minfer_gemm16_q6_kr, or minfer_mmq_q6_kr with MINFER_MMQ_F16_KQ=0), 2..8-token matmuls through minfer_mmvq_nt_<t>r, a tied embedding's gather through minfer_get_rows_r. " +
			"With the GGUF bytes kept a Q8_0 prefill runs the int8 MMQ over them (minfer_mmq_q8_0). " +
			"At its default it yields to any setting that sends a reader to the GGUF bytes (its Requires: two copies then, said in one log line); set to 1 with such a setting it is refused. " +
			"On by default since reports/MINFER_ONE_COPY: qwen2-7b Q8_0 pp512 +44.4%, tg128 equal, peak device memory -46% (H100)",
		ArmA: "0", ArmB: "1", DefaultSince: "reports/MINFER_ONE_COPY",
		// The decode, 2..8-token, gather and Q6_K MMQ readers of the copy
		// are bitwise their GGUF kernels (the emulators check them), but a
		// Q8_0 prefill runs the f16 GEMM over the one copy and the int8 MMQ
		// over the GGUF bytes (since MINFER_MMQ_F16 retired, session 28):
		// the arms differ by that lever's class (its report: B's f16
		// activations 0.00177 from the exact evaluation). Requires: the
		// settings under which every route of these types reads the copy
		// (its A/B also pinned MINFER_MMVQ_WIDE=0, a lever deleted since).
		// B holds one copy where A holds two: the default memory bar reads
		// the drop as within it.
		Tolerance: TolActPrecision, Workload: "qwen2-7b:Q8_0",
		Requires: []string{"MINFER_MMVQ_REPACK=1", "MINFER_MMQ=1", "MINFER_MMQ_ASYNC=0", "MINFER_MMVQ_NT=1",
			"MINFER_NO_PREFILL_GEMM=0", "MINFER_NO_Q80_MMVQ=0", "MINFER_NO_KQ_MMVQ=0"},
		// The pattern takes any kernel family's repacked form (a Q8_0
		// prefill of the on arm runs minfer_gemm16_q8_0r).
		Liveness: cudaOnly("1", "prefill matmuls of Q8_0 / Q6_K weights read the repacked copy (minfer_gemm16_q8_0r, minfer_mmq_q6_kr* or minfer_gemm16_q6_kr) only with the lever on; off, a Q8_0 prefill runs minfer_mmq_q8_0 over the GGUF bytes kept beside it",
			[]string{"minfer_*_q[86]_[0k]r*"}, Needs{WeightTypes: []string{"Q8_0", "Q6_K"}, MinNT: 9})},
	{Name: "MINFER_FUSE_RESIDUAL", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "fuse pass: matmul + residual add -> MatMulAdd (decode MMVQ on CUDA)", Issue: "#6",
		Doc: "0: the decode matmul feeding the residual add writes W a and a separate add launch sums it (on by default since reports/MINFER_FUSE_RESIDUAL: tg128 +4.5%)", ArmA: "0", ArmB: "1",
		Workload: "qwen2-0.5b:Q8_0", DefaultSince: "reports/MINFER_FUSE_RESIDUAL",
		Liveness: cudaOnly("1", "a decode matmul feeding only the residual add runs as minfer_mmvq[r]_res_<type> (writes x + W a) only with the lever on; off, the plain kernel and minfer_add_f32",
			[]string{"minfer_mmvq*_res_*"}, Needs{WeightTypes: mmvqTypes, MaxNT: 1})},
	// A decode token of qwen2-0.5b is ~320 launches (session 26's census),
	// ~100 of them Q8_1 quantizations of a row a norm just wrote.
	{Name: "MINFER_FUSE_NORM_Q8", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "fuse pass: RMS norm + decode activation quantization -> the fused q/k/v or gate/up node (decode MMVQ on CUDA)", Issue: "#20",
		Doc: "0: the decode row's RMS norm before the fused q/k/v and gate/up matvecs, and the output norm before the decode lm head, write an f32 row that a separate minfer_quantize_q8_1 launch quantizes, instead of writing its Q8_1 quantization directly (minfer_rms_norm_q8_1): two launches a layer and one a token more, bitwise the same bytes. " +
			"On by default since reports/MINFER_FUSE_NORM_Q8: qwen2-0.5b Q4_K_M tg128 +1.4% (no claim: under the 1.5% bar), pp512 and peak device memory equal (H100)",
		ArmA: "0", ArmB: "1", Workload: "qwen2-0.5b:Q4_K_M", DefaultSince: "reports/MINFER_FUSE_NORM_Q8",
		Liveness: cudaOnly("1", "the decode norms before the fused q/k/v and gate/up matvecs and the lm head run minfer_rms_norm_q8_1 only with the lever on; off, minfer_rms_norm_f32 and a quantization",
			[]string{"minfer_rms_norm_q8_1"}, Needs{WeightTypes: mmvqTypes, MaxNT: 1})},
	// The next producer of a decode Q8_1 row (reports/MINFER_MMVQ_INLINE_Q8:
	// a consumer that quantizes its own input lost): the attention output
	// the o-projection reads.
	// Decode at depth: the lean kernel issues its instructions a cell and
	// query head (ncu, session 20); a KV head's group is a tiny matrix
	// product. Session 21's form lost to a serial combine (reports/MINFER_ATTN_DECODE_TC).
	{Name: "MINFER_ATTN_DECODE_TC", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode attention (tensor cores)", Issue: "#20",
		Doc: "1: decode attention (nt <= 8) over an f16 KV cache (7B-class models' auto cache; an f32 or q8_0 cache stays on the lean kernels) on the tensor cores (minfer_attn_decode_tc_*): the tensor-core prefill kernel's body with a block of one warp and 16 rows, the G query heads of a KV head padded, so one K / V tile staged in shared memory (cp.async) serves the whole group through mma.sync; the grid's splits fill one wave, the filled range activates those it needs (2+ tiles of 64 cells each); " +
			"minfer_attn_decode_tc_combine merges the splits (4 warps a row, their loads in flight together) and writes the Q8_1 row under MINFER_FUSE_ATTN_Q8; Q, K, V and P rounded to f16. " +
			"Opt-in: its A/B passed all five gates at depth 32128 (H100, tg128 +11.2%), but at depth 0 it is ~10% slower than the lean kernels (one warp a KV head in series over the few tiles there) (reports/MINFER_ATTN_DECODE_TC). " +
			"So it routes by depth: a step whose attention reads at least MINFER_ATTN_DECODE_TC_FROM KV cells (its window's kv_len) takes the tensor cores, a shorter one the lean kernels; a captured decode graph is re-captured when the route changes side",
		ArmA: "0", ArmB: "1", Tolerance: TolF16AttnTile, Workload: "qwen2-7b:Q8_0 d32128",
		Requires: []string{"MINFER_NO_SPLITK_ATTN=0"},
		// The path reads an f16 cache only: the trained correctness models'
		// auto cache is f32, so abtest pins MINFER_CACHE_TYPE=f16 in both
		// arms (Needs.KVCache). Not a Requires entry: with auto (f16 for
		// the 7B) the engine must not refuse the lever.
		// The route by depth takes the path only from MINFER_ATTN_DECODE_TC_FROM
		// cells, which the correctness models' short contexts never reach:
		// their gates pin it to 0 (Needs.AnyDepth); the A/B keeps the default.
		Liveness: cudaOnly("1", "decode attention (nt <= 8) runs the tensor-core kernels (minfer_attn_decode_tc_*) only with the lever on (from MINFER_ATTN_DECODE_TC_FROM KV cells; the correctness gates pin it to 0); off, minfer_attn_decode2*",
			[]string{"minfer_attn_decode_tc_*"}, Needs{MaxNT: 8, KVCache: "f16", AnyDepth: "MINFER_ATTN_DECODE_TC_FROM=0"})},
	// The tensor-core decode at depth is latency-bound with too few warps
	// (ncu, H100, depth 32128: 3 one-warp blocks an SM by their 69.6 KB of
	// shared memory, issue slots 5.8% busy, 53% of DRAM peak): half the tile.
	{Name: "MINFER_ATTN_DECODE_TC_NARROW", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode attention (tensor cores, 32-cell tiles)", Issue: "#20",
		Doc: "1: with MINFER_ATTN_DECODE_TC=1, the tensor-core decode attention stages 32-cell K / V tiles instead of 64 (minfer_attn_decode_tc32_* and minfer_attn_decode_tc32_combine): half the shared memory a block (34.8 KB at head_dim 128), so 6 one-warp blocks an SM instead of 3, and a grid of twice the splits (the 7B on 132 SMs: 198 of its 4 KV heads, up to 256), each with half the serial work a tile; an active split still takes at least 128 cells (4 tiles). " +
			"Forecast (before any device run): at depth 32128 on the H100 the kernel takes 22-28 us a launch (>= 2.4 TB/s DRAM) against the 64-cell form's 38.7 us, tg128 at depth 32128 +5-10% over MINFER_ATTN_DECODE_TC=1 alone; refuted under +3% or under 2.2 TB/s in ncu. " +
			"Cost: twice the partials the combine reads (168 active splits at depth 32128: ~2.4 MB a layer against ~66 MB of K / V); short depths stay on the lean kernels by the route (MINFER_ATTN_DECODE_TC_FROM) (reports/MINFER_ATTN_DECODE_TC_NARROW)",
		ArmA: "0", ArmB: "1", Tolerance: TolF16AttnTile, Workload: "qwen2-7b:Q8_0 d32128",
		Requires: []string{"MINFER_ATTN_DECODE_TC=1", "MINFER_NO_SPLITK_ATTN=0"},
		// As MINFER_ATTN_DECODE_TC's rule: an f16 cache (Needs.KVCache), and
		// the correctness gates pin the route to every depth (Needs.AnyDepth).
		Liveness: cudaOnly("1", "with MINFER_ATTN_DECODE_TC=1, decode attention (nt <= 8) runs the 32-cell-tile kernels (minfer_attn_decode_tc32_*) only with the lever on (from MINFER_ATTN_DECODE_TC_FROM KV cells; the correctness gates pin it to 0); off, the 64-cell minfer_attn_decode_tc_*",
			[]string{"minfer_attn_decode_tc32_*"}, Needs{MaxNT: 8, KVCache: "f16", AnyDepth: "MINFER_ATTN_DECODE_TC_FROM=0"})},
	// Where the two cross on the H100 (session 32's qt8 / qt16 quick
	// benches, 7B Q8_0: tensor cores -0.6% at 8192, +0.9% at 16384;
	// interpolated ~11,400 cells), rounded up to a multiple of 4096 so the
	// route never costs below it.
	{Name: "MINFER_ATTN_DECODE_TC_FROM", Kind: Int, Default: "12288", Values: []string{"<cells>"}, Backend: "cuda", Path: "decode attention (tensor cores): route by depth", Issue: "#20",
		Doc: "with MINFER_ATTN_DECODE_TC=1, the KV length (cells a step's attention reads: its window's start + nt) from which decode attention (nt <= 8) over an f16 cache runs the tensor-core kernels; below it the lean kernels (minfer_attn_decode2*). 0: always the tensor cores. " +
			"Default 12288: where the two cross on the H100 (qwen2-7b Q8_0 tg64, quick benches without a claim: tensor cores -0.6% at 8192 cells, +0.9% at 16384, +11% at 32128; reports/MINFER_ATTN_DECODE_TC), rounded up; to be re-measured on the H200"},
	{Name: "MINFER_FUSE_ATTN_Q8", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "fuse pass: decode attention + the o-projection's activation quantization -> one AttnMatMulAdd node (CUDA)", Issue: "#20",
		Doc: "0: the decode attention before the o-projection writes an f32 row that a separate minfer_quantize_q8_1 launch quantizes, instead of writing its Q8_1 quantization directly (minfer_attn_decode2q_*: the lean form at head_dim 64 / 128) for the o-projection's residual matvec to read: one launch a layer more, bitwise the same bytes. " +
			"At its default it yields to a setting its Requires exclude; set to 1 with one it is refused. " +
			"On by default since reports/MINFER_FUSE_ATTN_Q8: qwen2-0.5b Q4_K_M tg128 +3.1%, pp512 and peak device memory equal (H100)",
		ArmA: "0", ArmB: "1", Workload: "qwen2-0.5b:Q4_K_M", DefaultSince: "reports/MINFER_FUSE_ATTN_Q8",
		Requires: []string{"MINFER_FUSE_RESIDUAL=1", "MINFER_NO_SPLITK_ATTN=0"},
		Liveness: cudaOnly("1", "the decode attention before the o-projection runs minfer_attn_decode2q_* only with the lever on; off, minfer_attn_decode2l_* and a quantization",
			[]string{"minfer_attn_decode2q_*"}, Needs{WeightTypes: mmvqTypes, MaxNT: 1})},
	// The q/k/v matvecs of a layer whose v has more bits than q and k (the
	// _M mixes' attn_v): one launch instead of three.
	{Name: "MINFER_MMVQ_QKV_MIXED", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode fused q/k/v matvec (v of another weight type than q and k)", Issue: "#20",
		Doc: "0: a decode q/k/v whose v weight type or layout differs from q's and k's (the _M mixes' attn_v of more bits: qwen2-0.5b Q4_K_M q/k Q5_0 with v Q8_0 repacked in 12 of 24 layers, qwen2-7b Q4_K_M q/k Q4_K with v Q6_K repacked in 14 of 28) runs one matvec launch per matrix, " +
			"instead of the default's one launch, minfer_mmvq_xqkv_<qk>_<v>[r] (each block's rows of one matrix, each row by its separate kernel's row function): bitwise the same outputs, " +
			"24 launches a decoded token more on qwen2-0.5b Q4_K_M (28 on the 7B), bytes unchanged. " +
			"At its default it yields to a setting its Requires exclude; set to 1 with one it is refused. " +
			"On by default since reports/MINFER_MMVQ_QKV_MIXED: qwen2-0.5b Q4_K_M tg128 +6.4%, pp512 and peak device memory equal, five gates PASS (H100)",
		ArmA: "0", ArmB: "1", Workload: "qwen2-0.5b:Q4_K_M", DefaultSince: "reports/MINFER_MMVQ_QKV_MIXED",
		// The kernel is the one-warp rows of the separate launches: where
		// the split form would take a matrix, or no fused q/k/v node exists,
		// it switches nothing (set to 1 there, it is refused).
		Requires: []string{"MINFER_NO_FUSE_QKV=0", "MINFER_MMVQ_SPLIT=0"},
		Liveness: cudaOnly("1", "a decode q/k/v whose v weight type differs from q's and k's runs minfer_mmvq_xqkv_* only with the lever on; off, one matvec per matrix (minfer_mmvq_<qk> twice and minfer_mmvq[r]_<v>)",
			[]string{"minfer_mmvq_xqkv_*"}, Needs{WeightTypes: []string{"Q5_0", "Q5_1", "Q4_K", "Q5_K"}, MaxNT: 1})},
	// The rope/store after the decode q/k/v matvec: the matvec's blocks
	// hold whole neox pairs (rows 2j, 2j+1, half+2j, half+2j+1 of a head)
	// and rope and store them after one barrier.
	{Name: "MINFER_FUSE_QKV_ROPE", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "fuse pass: decode fused q/k/v matvec + bias/rope/KV store -> one FusedQKVRopeStore node (CUDA)", Issue: "#20",
		Doc: "1: the decode q/k/v matvec also adds the biases, ropes q and k (neox) and stores k and v into the layer's KV cell (minfer_mmvq_qkvrs_<type>, minfer_mmvqr_qkvrs_<type>, minfer_mmvq_xqkvrs_<qk>_<v>[r]: each block holds two whole rope pairs of a head), instead of a separate minfer_qkv_rope_store launch: one launch a layer fewer, bitwise the same q and KV bytes; " +
			"f32 and f16 caches, neox rope over the whole head, no q/k norms (a q8_0 cache, qwen3's q/k norms and prefill keep the separate launch). " +
			"Forecast qwen2-0.5b Q4_K_M tg128 x1.01-1.03 (reports/MINFER_FUSE_QKV_ROPE)",
		ArmA: "0", ArmB: "1", Workload: "qwen2-0.5b:Q4_K_M",
		// The kernels are the one-warp rows of the plain q/k/v kernels:
		// where the split form would take the matrices, or no fused q/k/v
		// node exists, there is nothing to fold (set to 1 there, refused).
		Requires: []string{"MINFER_NO_FUSE_QKV=0", "MINFER_MMVQ_SPLIT=0"},
		Liveness: cudaOnly("1", "the decode q/k/v matvec runs minfer_mmvq[r]_qkvrs_<type> or minfer_mmvq_xqkvrs_* (rope and KV store folded in) only with the lever on; off, minfer_mmvq[r]_qkv_<type> or minfer_mmvq_xqkv_* and minfer_qkv_rope_store",
			[]string{"minfer_mmvq*qkvrs_*"}, Needs{WeightTypes: mmvqTypes, MaxNT: 1})},
	// The decode norm before the fused q/k/v and gate/up matvecs: every
	// block of the consumer norms and quantizes the row itself (into shared
	// memory), so no launch and no cross-block step produce it.
	{Name: "MINFER_FUSE_NORM_MMVQ", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode fused q/k/v and gate/up matvecs: the folded RMS norm and Q8_1 quantization in each block (CUDA)", Issue: "#20",
		Doc: "1: the decode fused q/k/v and gate/up matvecs whose node carries the folded RMS norm (MINFER_FUSE_NORM_Q8) run a normed form (minfer_mmvqn[r]_qkv_<type>, minfer_mmvqn[r]_ffn_<type>, minfer_mmvqn_xqkv_<qk>_<v>[r], and the _qkvrs_ forms of MINFER_FUSE_QKV_ROPE) whose every block norms the f32 row with minfer_rms_norm_q8_1's arithmetic and quantizes it into shared memory before its rows, instead of a minfer_rms_norm_q8_1 launch: two launches a layer fewer, bitwise the same logits; " +
			"k <= 2048 and a multiple of 32 (the 7B's 3584 and the decode lm head keep the norm launch). " +
			"Forecast qwen2-0.5b Q4_K_M tg128 x1.04-1.10, refuted below x1.02 (reports/MINFER_FUSE_NORM_MMVQ)",
		ArmA: "0", ArmB: "1", Workload: "qwen2-0.5b:Q4_K_M",
		// The normed kernels are the one-warp rows of the plain fused
		// kernels over the row the norm launch writes: without the folded
		// norm, or where the split form takes the matrices, nothing to fold.
		Requires: []string{"MINFER_FUSE_NORM_Q8=1", "MINFER_MMVQ_SPLIT=0"},
		Liveness: cudaOnly("1", "the decode fused q/k/v and gate/up matvecs run minfer_mmvqn* (the norm in each block) only with the lever on; off, minfer_rms_norm_q8_1 and minfer_mmvq[r]_qkv/ffn_<type> (or the mixed and roped forms)",
			[]string{"minfer_mmvqn*"}, Needs{WeightTypes: mmvqTypes, MaxNT: 1})},
	{Name: "MINFER_MMVQ_NT", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "small-batch matmul (nt 2..8)", Issue: "#6",
		Doc: "0: matmuls of 2..8 tokens through the f32-activation per-type kernels instead of multi-token MMVQ over Q8_1 activations (per token bitwise the nt = 1 kernel; on by default since reports/MINFER_MMVQ_NT: pp5 x2.23)", ArmA: "0", ArmB: "1",
		Workload: "qwen2-0.5b:Q8_0 pp5", Tolerance: TolActQuant, DefaultSince: "reports/MINFER_MMVQ_NT",
		Liveness: cudaOnly("1", "matmuls of 2..8 tokens of the MMVQ types run minfer_mmvq_nt_<type> over Q8_1 rows only with the lever on; off, the f32-activation minfer_mmv_<type>",
			[]string{"minfer_mmvq_nt_*"}, Needs{WeightTypes: mmvqTypes, MinNT: 2, MaxNT: 8})},
	{Name: "MINFER_MMVQ_SPLIT", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "decode matmul (few rows, long K)", Issue: "#6",
		Doc: "1: decode MMVQ matmuls with few rows (ceil(rows / 4) < 12 x SMs: 7B o-proj, ffn_down, q/k/v) run 4 warps per output row (minfer_mmvq*_s_*) instead of one, for more loads in flight", ArmA: "0", ArmB: "1",
		Workload: "qwen2-0.5b:Q8_0",
		// The row's units are summed by 4 warps and the 4 partials added in
		// a fixed order: f32 rounding only per matmul, but the reordered
		// outputs round later Q8_1 activations the other way now and then
		// (qwen2-0.5b: logits moved by up to 1.9% of max |logit|).
		Tolerance: TolActQuant,
		Liveness: cudaOnly("1", "decode MMVQ matmuls with few rows (ceil(rows / 4) < 12 x SMs) run 4 warps per row (minfer_mmvq[r][_res|_qkv]_s_<type>) only with the lever on; off, the one-warp-per-row minfer_mmvq*_<type>",
			[]string{"minfer_mmvq*_s_*"}, Needs{WeightTypes: mmvqTypes, MaxNT: 1})},
	{Name: "MINFER_QUANTIZE_X4", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "activation Q8_1 quantize", Issue: "#6",
		Doc: "0: the Q8_1 activation quantize runs one block per warp (minfer_quantize_q8_1) instead of four per warp with float4 loads (the same bytes; on by default since reports/MINFER_QUANTIZE_X4: pp512 +7.0%)", ArmA: "0", ArmB: "1",
		Workload: "qwen2-0.5b:Q8_0", DefaultSince: "reports/MINFER_QUANTIZE_X4",
		Liveness: cudaOnly("1", "the Q8_1 activation quantize runs as minfer_quantize_q8_1_x4 (four blocks per warp) only with the lever on; off, minfer_quantize_q8_1",
			[]string{"minfer_quantize_q8_1_x4"}, Needs{WeightTypes: quantTypes})},
	{Name: "MINFER_FUSE_QKNORM", Kind: OptOut, Default: "1", Values: []string{"0", "1"}, Backend: "cuda", Path: "fuse pass: qwen3 q/k norm + rope + KV store (inside the QKV fusion)", Issue: "#6",
		Doc: "0: qwen3's per-head q/k RMS norms, both ropes and both KV stores of a layer run as six launches instead of one minfer_qkv_norm_rope_store (bitwise the same; on by default since reports/MINFER_FUSE_QKNORM: qwen3 tg128 +15.2%)", ArmA: "0", ArmB: "1",
		Workload: "qwen3-0.6b:Q8_0", Requires: []string{"MINFER_NO_FUSE_QKV=0"}, DefaultSince: "c40de5a (reports/MINFER_FUSE_QKNORM)",
		Liveness: cudaOnly("1", "qwen3's q/k norms, ropes and KV stores run as one minfer_qkv_norm_rope_store launch per layer only with the lever on; off, minfer_rms_norm_f32 twice, minfer_rope_f32 twice and minfer_kv_store twice",
			[]string{"minfer_qkv_norm_rope_store"}, Needs{Arch: "qwen3"})},
	{Name: "MINFER_NO_FUSE_FFN", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "FFN fusion pass", Issue: "#3",
		Doc: "1: unfused FFN chains", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q8_0", Packages: []string{"engine/graph", "engine/cpu"},
		Liveness: &Liveness{On: "0",
			CUDA: &PathRule{Census: []string{"minfer_mmvq*_ffn_*"}, Needs: Needs{WeightTypes: mmvqTypes, MaxNT: 1}},
			CPU:  &PathRule{Census: []string{"cpu_fused_ffn_*"}, Funcs: []string{`/engine/cpu\.\(\*Backend\)\.fusedFFN$`}},
			Why:  "with FFN fusion on, decode runs gate, up and SwiGLU as one fused op (one fused MMVQ kernel on CUDA, cpu_fused_ffn_<type> on the CPU); off, two matmuls and a SwiGLU"}},
	{Name: "MINFER_NO_FUSE_QKV", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "QKV fusion pass", Issue: "#3",
		Doc: "1: unfused QKV chains", ArmA: "1", ArmB: "0", Workload: "qwen2-0.5b:Q8_0", Packages: []string{"engine/graph", "engine/cpu"},
		Liveness: &Liveness{On: "0",
			CUDA: &PathRule{Census: []string{"minfer_qkv*_rope_store", "minfer_mmvq*_qkv_*"}, Needs: Needs{WeightTypes: mmvqTypes, MaxNT: 1}},
			CPU:  &PathRule{Census: []string{"cpu_fused_qkv_*"}, Funcs: []string{`/engine/cpu\.\(\*Backend\)\.fusedQKV$`}},
			Why:  "with QKV fusion on, decode runs q/k/v as one fused matmul and bias + rope + KV store as one op (minfer_mmvq*_qkv_* and minfer_qkv_rope_store on CUDA, cpu_fused_qkv_<type> on the CPU); off, three matmuls, two ropes and two KV stores"}},
	// One lever for the drafter and one for K, not a value syntax such as
	// PATH@K: the value is a file path, which may hold any character, and
	// K as an Int lever is validated and printed in every report like any
	// other pinned setting.
	{Name: "MINFER_DRAFT", Kind: Path, Default: "", Values: []string{"", DraftNone, "lookup", "<draft.gguf>"}, Backend: "any", Path: "speculative decoding (engine/spec)", Issue: "#23",
		Doc:  "the default of --draft on generate, chat, bench and logits: a draft GGUF of the model's vocabulary and architecture, lookup (n-grams of the context), none (the speculative loop, nothing drafted); the output is the model's own, token for token (--draft wins)",
		ArmA: "unset", ArmB: "lookup", PairedModel: true, ExactGreedy: true, BenchOff: []string{"--draft", DraftNone},
		Tolerance: TolVerifyChunk, Packages: []string{"engine/spec"},
		Memory: &MemoryBar{Frac: DefaultMemory.Frac, MiB: DefaultMemory.MiB, Paired: true, Cost: "the draft model's weights, derived copies, KV and scratch"},
		Liveness: &Liveness{On: "lookup or a draft GGUF", OffValues: []string{"", DraftNone},
			CUDA: &PathRule{Census: []string{CensusSpecDrafted}},
			CPU:  &PathRule{Census: []string{CensusSpecDrafted}, Funcs: []string{`/engine/spec\.(\(\*Model\)|Lookup)\.Draft$`}},
			Why:  "with a drafter the target checks drafted tokens in verify forwards (spec_drafted > 0 in the census, from the decoder's counts); without one nothing is drafted, so a draft that never ran is caught"}},
	{Name: "MINFER_DRAFT_N", Kind: Int, Default: "4", Values: []string{"<n>"}, Backend: "any", Path: "speculative decoding (engine/spec)", Issue: "#23",
		Doc: "the default of --draft-n: tokens drafted per step (>= 1; with MINFER_DRAFT)"},
	{Name: "MINFER_BENCH_WARMUP_MS", Kind: Int, Default: "2000", Values: []string{"<ms>"}, Backend: "any", Path: "minfer bench warmup", Issue: "#3",
		Doc: "untimed warmup budget of minfer bench in milliseconds (at least 3 iterations)"},
	{Name: "MINFER_OP_TIMING", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cuda", Path: "instrumentation", Issue: "#4",
		Doc: "1: per-kernel device time with events (direct launches only)"},
	{Name: "MINFER_LAUNCH_CENSUS", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "instrumentation", Issue: "#4",
		Doc: "1: per-kernel launch counts (CUDA) or per-op path counts (CPU) at exit, as JSON (counters, not a profiler: every gate's arm processes run with it)"},
	{Name: "MINFER_CPU_PROFILE", Kind: Path, Default: "", Values: []string{"<file>"}, Backend: "any", Path: "instrumentation", Issue: "#13",
		Doc: "write a pprof CPU profile of the process to this file (gate 5's evidence on the CPU backend)"},
	// Not an A/B lever: the reference gate 1 judges the device's activation
	// quantization against (gates.ExactSlack), never a speed path.
	{Name: "MINFER_CPU_EXACT", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "cpu", Path: "CPU reference: f32 activations", Issue: "#13",
		Doc: "1: the CPU backend dequantizes quantized matmul weights to f32 at load and multiplies unquantized activations (the exact evaluation of the same weights; 4 bytes a weight, slower)"},
	{Name: "MINFER_GRAPH_DUMP", Kind: OptIn, Default: "0", Values: []string{"0", "1"}, Backend: "any", Path: "instrumentation", Issue: "#3",
		Doc: "1: dump node outputs to MINFER_DUMP_DIR (instrumented runs are never timed runs)"},
	{Name: "MINFER_DUMP_DIR", Kind: Path, Default: "", Values: []string{"<dir>"}, Backend: "any", Path: "instrumentation", Issue: "#3",
		Doc: "directory for MINFER_GRAPH_DUMP output"},
	// Arm B has no default (a kernels file is the user's): abtest requires
	// --lever MINFER_KERNELS=FILE. Bitwise: both arms run the same minfer_
	// kernels of the same sources, so any parity or greedy difference
	// between the two compilers' builds is the finding, never a class.
	{Name: "MINFER_KERNELS", Kind: Path, Default: "", Values: []string{KernelsNVRTC, "<file>"}, Backend: "cuda", Path: "kernels: a kernels file (nvcc) or the embedded sources' NVRTC build", Issue: "#4, #25",
		Doc: "path of the kernels fatbin (unset: the file beside the binary, else the embedded sources compiled with NVRTC); nvrtc: the NVRTC build even when a file lies beside the binary; a named file that does not exist is an error. " +
			"A/B (issue 25): arm A nvrtc, arm B the file given as --lever MINFER_KERNELS=FILE (no default); same kernels and sources in both arms, so the tolerance is bitwise: a parity or greedy difference is the finding",
		ArmA: KernelsNVRTC,
		Liveness: &Liveness{On: "a kernels file", OffValues: []string{"", KernelsNVRTC},
			CUDA: &PathRule{Census: []string{CensusKernelsFile}, OffCensus: []string{CensusKernelsNVRTC}, SameKernels: true},
			Why:  "the arm given a file loads it (kernels_file in the census), the nvrtc arm compiles the embedded sources (kernels_nvrtc), and both launch the same minfer_ kernels: an arm that silently loaded the other build is caught"}},
	{Name: "MINFER_TEST_MUTATE", Kind: Seam, Default: "", Values: []string{"", MutatePerturbLogit, MutateSkipBias, MutateSlowDecode + "[=F]", MutateSlowPrefill + "[=F]", MutatePhantom + "=LEVER", MutateFailDeviceTest, MutateAcceptWrongDraft}, Backend: "any", Path: "test seam", Issue: "#5",
		Doc: "test seam: plants a named defect so a gate can be shown to fail (slow_decode=0.03: decode 3% slower)"},
	{Name: "MINFER_TEST_CALL_FAIL", Kind: Path, Default: "", Values: []string{"<site>"}, Backend: "any", Path: "test seam", Issue: "#5",
		Doc: "test seam: makes named driver calls fail (NAME: every call; NAME@N: its N-th call only; cuLaunchKernel:KERNEL: that kernel's launches); a failed cuMemAlloc_v2 is an out-of-memory"},
}

func init() {
	for i := range registry {
		l := &registry[i]
		l.KindS = l.Kind.String()
		if l.HasArms() && l.Reserved == "" && l.Bars == nil {
			b := DefaultBars
			l.Bars = &b
		}
		if l.HasArms() && l.Reserved == "" && l.Memory == nil {
			m := DefaultMemory
			l.Memory = &m
		}
	}
}

// HasArms reports whether the lever is A/B-able: it declares arm A, and
// arm B too unless its candidate has no default (MINFER_KERNELS: a file
// the user names), which abtest then requires as NAME=B.
func (l Lever) HasArms() bool { return l.ArmA != "" }

// NeedsB reports whether the lever is A/B-able only with arm B given.
func (l Lever) NeedsB() bool { return l.ArmA != "" && l.ArmB == "" }

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
	case Seam:
		if _, err := ParseMutation(value); err != nil {
			return fmt.Errorf("%s=%q: %w", l.Name, value, err)
		}
	}
	return nil
}

// MaxMutationFraction bounds slow_decode=F / slow_prefill=F.
const MaxMutationFraction = 10.0

// Mutation is a parsed MINFER_TEST_MUTATE value.
type Mutation struct {
	Site string // "" none
	// Frac: slow_decode / slow_prefill make the forward this fraction
	// slower (0.03: 3%).
	Frac float64
	// Lever: phantom's lever, which reads as its baseline (arm A) value.
	Lever string
}

// ParseMutation reads a MINFER_TEST_MUTATE value: "" (none), a site,
// slow_decode=F / slow_prefill=F with 0 < F <= MaxMutationFraction (bare:
// F = 1), or phantom=NAME (an A/B lever).
func ParseMutation(v string) (Mutation, error) {
	if v == "" {
		return Mutation{}, nil
	}
	site, arg, hasArg := strings.Cut(v, "=")
	known := false
	for _, s := range mutationSites {
		known = known || s == site
	}
	if !known {
		return Mutation{}, fmt.Errorf("unknown mutation site %q (sites: %s; slow_decode and slow_prefill take =FRACTION, phantom =LEVER)", site, strings.Join(mutationSites, ", "))
	}
	m := Mutation{Site: site}
	switch site {
	case MutateSlowDecode, MutateSlowPrefill:
		if !hasArg {
			m.Frac = 1
			return m, nil
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(f > 0) || f > MaxMutationFraction {
			return Mutation{}, fmt.Errorf("mutation %s=%q: want a fraction in (0, %g] (0.03: 3%% slower)", site, arg, MaxMutationFraction)
		}
		m.Frac = f
	case MutatePhantom:
		l, ok := Lookup(arg)
		if !hasArg || !ok || !l.HasArms() {
			return Mutation{}, fmt.Errorf("mutation phantom=%q: want phantom=NAME of a lever with arms", arg)
		}
		m.Lever = arg
	default:
		if hasArg {
			return Mutation{}, fmt.Errorf("mutation site %s takes no value", site)
		}
	}
	return m, nil
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
	MMQAsync         bool
	MMQF16KQ         bool // MINFER_MMQ_F16_KQ: Q4_K / Q6_K prefill as Q8_0's f16 GEMM
	NoPrefillGEMM    bool
	NoKQMMVQ         bool
	NoQ40MMVQ        bool
	NoQ80MMVQ        bool
	NoFAPrefill      bool
	NoSplitKAttn     bool
	FAPrefillTC      bool
	MMVQRepack       bool
	EmbedHost        bool
	OneCopy          bool
	FuseResidual     bool
	FuseNormQ8       bool // MINFER_FUSE_NORM_Q8: the decode norm writes Q8_1
	FuseAttnQ8       bool // MINFER_FUSE_ATTN_Q8: the decode attention writes Q8_1
	AttnDecodeTC     bool // MINFER_ATTN_DECODE_TC: decode attention on the tensor cores
	AttnDecodeTCFrom int  // MINFER_ATTN_DECODE_TC_FROM: the tensor cores from this many KV cells (0: always)
	DecodeTCNarrow   bool // MINFER_ATTN_DECODE_TC_NARROW: the decode tensor cores over 32-cell tiles
	MMVQQKVMixed     bool // MINFER_MMVQ_QKV_MIXED: one decode launch for q/k/v of mixed types
	FuseQKVRope      bool // MINFER_FUSE_QKV_ROPE: the decode q/k/v matvec ropes and stores
	FuseNormMMVQ     bool // MINFER_FUSE_NORM_MMVQ: the decode fused matvecs norm their own row
	MMVQNT           bool
	MMVQSplit        bool
	QuantizeX4       bool
	FuseQKNorm       bool
	NoFuseFFN        bool
	NoFuseQKV        bool
	Draft            string // --draft's default: "", none, lookup or a GGUF path
	DraftN           int    // --draft-n's default
	BenchWarmupMS    int
	OpTiming         bool
	LaunchCensus     bool
	CPUExact         bool
	PinStep          bool
	CPUProfile       string
	GraphDump        bool
	DumpDir          string
	Kernels          string
	TestMutate       string  // the mutation site ("" none)
	TestMutateFrac   float64 // slow_decode / slow_prefill: the slowdown fraction
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

// Value is the lever's setting in c: the value that was set, else its
// default ("" for an unknown name).
func (c Config) Value(name string) string {
	if v, ok := c.raw[name]; ok {
		return v
	}
	l, _ := Lookup(name)
	return l.Default
}

// RequiresMet reports whether every NAME=VALUE the lever's registry entry
// Requires holds in c: a path that needs another lever's setting is on only
// with it, by the one declaration abtest pins too.
func (c Config) RequiresMet(name string) bool { return len(c.Unmet(name)) == 0 }

// Unmet names the settings of the lever's Requires that c does not hold,
// each as "NAME=VALUE (needs WANT)": what a refusal of the lever says.
func (c Config) Unmet(name string) []string {
	l, _ := Lookup(name)
	var bad []string
	for _, r := range l.Requires {
		k, want, _ := strings.Cut(r, "=")
		if got := c.Value(k); got != want {
			bad = append(bad, fmt.Sprintf("%s=%s (needs %s)", k, got, want))
		}
	}
	return bad
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
	mut, err := ParseMutation(raw["MINFER_TEST_MUTATE"])
	if err != nil {
		return Config{}, err
	}
	vals := raw
	if mut.Site == MutatePhantom {
		// The lever reads as its baseline value: its candidate path never
		// runs, whatever the arm asked for (raw, and so Set(), keeps what
		// was asked: a fast path that switches nothing).
		l, _ := Lookup(mut.Lever)
		vals = map[string]string{}
		for k, v := range raw {
			vals[k] = v
		}
		vals[l.Name] = l.ArmA
		if l.ArmA == "unset" { // abtest's "leave it out of the environment"
			delete(vals, l.Name)
		}
	}
	on := func(name string) bool { // opt-in: "1" is on
		return vals[name] == "1"
	}
	optOut := func(name string) bool {
		v, ok := vals[name]
		return !ok || v != "0"
	}
	c := Config{raw: raw}
	_, c.DisableCUDA = raw["MINFER_DISABLE_CUDA"]
	c.CacheType = vals["MINFER_CACHE_TYPE"]
	if c.CacheType == "" {
		c.CacheType = "auto"
	}
	c.NoCUDAGraph = on("MINFER_NO_CUDA_GRAPH")
	c.NoPrefillCapture = on("MINFER_NO_PREFILL_CAPTURE")
	c.NoPinnedReadback = on("MINFER_NO_PINNED_READBACK")
	c.MMQ = optOut("MINFER_MMQ")
	c.MMQAsync = on("MINFER_MMQ_ASYNC")
	c.NoPrefillGEMM = on("MINFER_NO_PREFILL_GEMM")
	c.NoKQMMVQ = on("MINFER_NO_KQ_MMVQ")
	c.NoQ40MMVQ = on("MINFER_NO_Q40_MMVQ")
	c.NoQ80MMVQ = on("MINFER_NO_Q80_MMVQ")
	c.NoFAPrefill = on("MINFER_NO_FA_PREFILL")
	c.NoSplitKAttn = on("MINFER_NO_SPLITK_ATTN")
	c.FAPrefillTC = optOut("MINFER_FA_PREFILL_TC")
	c.MMVQRepack = optOut("MINFER_MMVQ_REPACK")
	c.EmbedHost = optOut("MINFER_EMBED_HOST")
	// A default-on path that another setting excludes: at its default it
	// yields where its Requires do not hold; set explicitly, it stays on
	// and the backend refuses the pair (cuda/onecopy.go, optInConflict in
	// cuda/attn_decode2.go). The one-copy layout also says so in a line.
	yields := func(name string) bool {
		_, set := vals[name]
		return optOut(name) && (set || c.RequiresMet(name))
	}
	c.OneCopy = yields("MINFER_ONE_COPY")
	c.MMQF16KQ = yields("MINFER_MMQ_F16_KQ")
	c.FuseResidual = optOut("MINFER_FUSE_RESIDUAL")
	c.FuseAttnQ8 = yields("MINFER_FUSE_ATTN_Q8")
	c.AttnDecodeTC = on("MINFER_ATTN_DECODE_TC")
	// Validate refused what is no count of cells; unset, the registry's default.
	c.AttnDecodeTCFrom, _ = strconv.Atoi(c.Value("MINFER_ATTN_DECODE_TC_FROM"))
	c.DecodeTCNarrow = on("MINFER_ATTN_DECODE_TC_NARROW")
	c.FuseNormQ8 = optOut("MINFER_FUSE_NORM_Q8")
	c.MMVQQKVMixed = yields("MINFER_MMVQ_QKV_MIXED")
	c.FuseQKVRope = on("MINFER_FUSE_QKV_ROPE")
	c.FuseNormMMVQ = on("MINFER_FUSE_NORM_MMVQ")
	c.MMVQNT = optOut("MINFER_MMVQ_NT")
	c.MMVQSplit = on("MINFER_MMVQ_SPLIT")
	c.QuantizeX4 = optOut("MINFER_QUANTIZE_X4")
	c.FuseQKNorm = optOut("MINFER_FUSE_QKNORM")
	c.NoFuseFFN = on("MINFER_NO_FUSE_FFN")
	c.NoFuseQKV = on("MINFER_NO_FUSE_QKV")
	c.Draft = vals["MINFER_DRAFT"]
	c.DraftN = 4
	if v, ok := raw["MINFER_DRAFT_N"]; ok {
		if c.DraftN, _ = strconv.Atoi(v); c.DraftN < 1 {
			return Config{}, fmt.Errorf("MINFER_DRAFT_N=%q: want at least one token per step", v)
		}
	}
	c.BenchWarmupMS = 2000
	if v, ok := raw["MINFER_BENCH_WARMUP_MS"]; ok {
		c.BenchWarmupMS, _ = strconv.Atoi(v)
	}
	c.OpTiming = on("MINFER_OP_TIMING")
	c.LaunchCensus = on("MINFER_LAUNCH_CENSUS")
	c.CPUExact = on("MINFER_CPU_EXACT")
	c.PinStep = on("MINFER_PIN_STEP")
	c.GraphDump = on("MINFER_GRAPH_DUMP")
	c.DumpDir = raw["MINFER_DUMP_DIR"]
	c.Kernels = vals["MINFER_KERNELS"] // phantom: the nvrtc build (arm A)
	c.CPUProfile = raw["MINFER_CPU_PROFILE"]
	c.TestMutate, c.TestMutateFrac = mut.Site, mut.Frac
	c.TestCallFail = raw["MINFER_TEST_CALL_FAIL"]
	return c, nil
}

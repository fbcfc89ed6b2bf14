// Package gates holds the five gates of GATES.md (parity x3, greedy
// identity, interleaved A/B with a sign test, device suite, profile
// evidence) and the run that applies them to one lever.
//
// Where GATES.md is silent, the code applies these rules:
//   - Liveness is judged per gate over all its arm processes together: arm
//     B's processes of the gate ran the path (at least once), arm A's never.
//     A lever whose path needs repeated shapes (CUDA graphs) runs its
//     correctness processes with --repeat 4, so their logits come from a
//     replayed graph; a path of 2..8-token forwards gets a token-id prompt
//     of that length in gate 2.
//   - Gate 4 runs test binaries, not arm processes: its evidence is their
//     build stamp (the project's module, the backend's packages), at least
//     one test run, and no device test skipped for want of a device.
//   - Gate 4 and kernel parity run without a timing-only mutation
//     (slow_decode, slow_prefill): no test asserts a time.
//   - An identical suite run (same binaries, kernels, non-default settings
//     and GPU, by sha256) of the last day is reused, and the report says so.
//   - A model or pp on which the lever's path cannot run (its rule's needs)
//     is refused before the run (could not run), not failed after it.
//   - Power: per-round log ratios ~ N(-ln s, sd^2); power = P(Binomial(n, p)
//     >= k(n)) with p = Phi((ln s - ln bar)/sd) at s = 1 + 2(bar - 1); sd
//     from the calibration, else from the run itself. A refusal stands at
//     any noise; a pass is INCONCLUSIVE when underpowered or when the run
//     is noisier than its calibration (chi-square p < 0.01).
//   - Gate 3 decides on device time when every round of both arms has it
//     and the lever moves no host work (its registry entry says), else on
//     wall time; both are reported.
//   - A mutation is caught by a gate that fails with it and not when re-run
//     without it (the control).
//   - Memory (gate 3): an arm's figure is the largest peak of its gate-3
//     processes (warmup and rounds, a failed one included). Memory not
//     measured (no NVML, the CPU backend, a process never seen on the GPU)
//     is stated and changes no verdict; over the lever's bar is a FAIL
//     whatever the speed said.
//   - A round is marked when either arm's sampling saw another process on
//     the GPU (CUDA runs only). With marked rounds gate 3 is INCONCLUSIVE,
//     a pass or a not-slower refusal alike (a neighbour's job is not the
//     lever's doing); a memory FAIL stands (it is per process).
//   - An arm process that exits with schema.ExitOutOfMemory (the model
//     does not fit): in arm A or the CPU reference the gate could not run
//     (Result.CannotRun) and the run is COULD NOT RUN, exit 2; in arm B
//     alone it is a FAIL (the lever's memory cost). oom.go.
//   - An arm process that exits with schema.ExitStaleKernels (its kernels
//     file was not built from its minfer's sources), in any arm: the gate
//     could not run, exit 2. stale.go.
package gates

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/minfer-go/minfer/harness"
)

// Status of a gate.
type Status string

// Gate outcomes (GATES.md): PASS, FAIL, INCONCLUSIVE (it ran but could not
// decide: underpowered, a sub-check skipped, evidence missing) or SKIP (it
// did not run). Neither of the last two counts as PASS.
const (
	Pass         Status = "PASS"
	Fail         Status = "FAIL"
	Inconclusive Status = "INCONCLUSIVE"
	Skip         Status = "SKIP"
)

// Gate names, in the order a run applies them.
const (
	GateParity  = "parity"
	GateGreedy  = "greedy"
	GateAB      = "ab"
	GateSuite   = "suite"
	GateProfile = "profile"
)

// AllGates in run order.
var AllGates = []string{GateParity, GateGreedy, GateAB, GateSuite, GateProfile}

// Defends says what each gate defends, for the gate table.
func Defends(gate string) string {
	switch gate {
	case GateParity:
		return "numerics: kernels and whole-graph logits match the CPU reference; A and B agree bitwise or within the declared class"
	case GateGreedy:
		return "behaviour: greedy token ids of A and B are identical on fixed prompts"
	case GateAB:
		return "speed: B is not slower than A (paired sign test), and any speedup claim is significant"
	case GateSuite:
		return "device correctness: the device test binaries pass"
	case GateProfile:
		return "the gain is real: B runs the kernels it claims (launch census), ncu/nsys/SASS evidence"
	}
	return ""
}

// Result is one gate's verdict with its evidence.
type Result struct {
	Gate     string        `json:"gate"`
	Defends  string        `json:"defends"`
	Status   Status        `json:"status"`
	Reason   string        `json:"reason"`
	Evidence string        `json:"evidence"`
	Wall     time.Duration `json:"wall_ns"`
	// Liveness is the gate's liveness verdict over its arm processes'
	// census ("PASS: ...", "FAIL: ...", "INCONCLUSIVE: ..."); "" where the
	// gate runs no arm process (the suite).
	Liveness string `json:"liveness,omitempty"`
	// Control is, in a mutation run, the gate's status with the mutation
	// removed from arm B: the gate caught the mutation only when it failed
	// with it and not without it.
	Control Status `json:"control,omitempty"`
	// DeferredTo is set on a suite gate that another shard of a nightly
	// runs (its name, "0/N"): the gate is undecided until the merge.
	DeferredTo string `json:"deferred_to,omitempty"`
	// CannotRun is set on a gate that could not run for want of memory
	// in the baseline (arm A or the CPU reference: oom.go); its Status is
	// SKIP and the run's verdict COULD NOT RUN (exit 2).
	CannotRun bool           `json:"cannot_run,omitempty"`
	Parity    *ParityDetail  `json:"parity,omitempty"`
	Greedy    *GreedyDetail  `json:"greedy,omitempty"`
	AB        *ABDetail      `json:"ab,omitempty"`
	Suite     *SuiteDetail   `json:"suite,omitempty"`
	Profile   *ProfileDetail `json:"profile,omitempty"`
}

// Arm is one side of the A/B: the lever's value and the MINFER_* variables
// the arm's processes get.
type Arm struct {
	Name  string            `json:"name"` // A or B
	Value string            `json:"value"`
	Env   map[string]string `json:"env"`
	// Bin is the arm's own minfer binary ("": the run's): a run between
	// two builds (abtest pr) gives each arm its build.
	Bin string `json:"bin,omitempty"`
	// BenchArgs are flags every bench process of the arm gets (gates 3
	// and 5): the lever's BenchOff on the arm with the path off, so both
	// arms time the same work (MINFER_DRAFT: "--draft none").
	BenchArgs []string `json:"bench_args,omitempty"`
	// LegacyBench: the arm's binary predates `bench --format` and takes the
	// format as -o (abtest bisect's old builds).
	LegacyBench bool `json:"legacy_bench,omitempty"`
}

// DepthArgs are the bench flags of c.Depth (none at depth 0): the depth,
// filled with zero cells (no compute: a 32K prefill per process would
// dominate the run, and attention costs the same over any values), and a
// context that holds it and the tests.
func (c Config) DepthArgs() []string {
	if c.Depth <= 0 {
		return nil
	}
	return []string{"-d", strconv.Itoa(c.Depth), "--fill", "zeros", "--ctx", strconv.Itoa(c.Depth + c.PP + c.TG)}
}

// TestSuffix is what minfer bench appends to a test's name at c.Depth
// ("@d4096"; "" at depth 0): a name without it means the depth was not run.
func (c Config) TestSuffix() string {
	if c.Depth <= 0 {
		return ""
	}
	return "@d" + strconv.Itoa(c.Depth)
}

// TestNames are the names minfer bench gives the run's pp and tg tests
// ("pp512@d4096", "tg128@d4096").
func (c Config) TestNames() (pp, tg string) {
	return fmt.Sprintf("pp%d%s", c.PP, c.TestSuffix()), fmt.Sprintf("tg%d%s", c.TG, c.TestSuffix())
}

// benchMinfer is armMinfer for a bench process of gates 3 and 5: the arm's
// bench flags, then the run's depth.
func benchMinfer(m harness.Minfer, cfg Config, a Arm) harness.Minfer {
	m = armMinfer(m, a)
	m.BenchArgs = append(slices.Clone(m.BenchArgs), cfg.DepthArgs()...)
	return m
}

// armMinfer is m running the arm's own binary when it has one.
func armMinfer(m harness.Minfer, a Arm) harness.Minfer {
	if a.Bin != "" {
		m.Bin = a.Bin
	}
	m.BenchArgs = a.BenchArgs
	m.LegacyBench = a.LegacyBench
	return m
}

// WithLever is a lever pinned in both arms of a run at Value.
type WithLever struct {
	Lever harness.Lever `json:"lever"`
	Value string        `json:"value"`
}

// Config is everything a lever run decides before it starts.
type Config struct {
	Lever  harness.Lever     `json:"lever"`
	A      Arm               `json:"a"`
	B      Arm               `json:"b"`
	Tol    harness.Tolerance `json:"tolerance"`
	Mutate string            `json:"mutate,omitempty"`
	Device string            `json:"device"`
	// Backend is where the arms run: "cuda" or "cpu" (the device flag and
	// the machine decide it before the run; a lever whose path does not
	// exist there is refused).
	Backend string `json:"backend"`
	// Between: a run between two builds (abtest pr), not a lever run: no
	// lever path to prove live, no kernel parity (the test binaries are one
	// build's), and its gates are parity, greedy and A/B only.
	Between bool   `json:"between,omitempty"`
	Model   string `json:"model,omitempty"`
	// CorrectnessModel, when set, is the GGUF the parity and greedy gates
	// run on (a trained model), while the A/B, suite and profile gates keep
	// Model (the real-shape model whose speed is claimed): a random-weight
	// model's top-2 margins are small enough to flip under any rounding
	// change, so it is a poor instrument for top-1 and greedy identity.
	CorrectnessModel string `json:"correctness_model,omitempty"`
	// CorrectnessFallback, when set, says why parity and greedy ran on
	// Model although correctness models were given (none of its
	// architecture, or one that cannot run the lever's path): the report
	// states it beside those gates' evidence.
	CorrectnessFallback string `json:"correctness_fallback,omitempty"`
	// With are the levers --with pins in both arms (in A.Env and B.Env
	// too): where the pinned value runs a path, every gate's liveness also
	// needs that path's census names in both arms.
	With []WithLever `json:"with,omitempty"`
	// ExactBin, when set, is the minfer that computes gate 1's exact
	// reference (MINFER_CPU_EXACT=1) instead of the reference's own: abtest
	// pr's reference is the base build, which may predate the lever.
	ExactBin string   `json:"exact_bin,omitempty"`
	Gates    []string `json:"gates"`
	Rounds   int      `json:"rounds"`
	PP       int      `json:"pp"`
	TG       int      `json:"tg"`
	Reps     int      `json:"reps"`
	// Depth is the KV cache filled before each bench test (minfer bench -d;
	// 0: none): gates 3 and 5 time pp and tg at that depth (issue 20's
	// long-context rows); parity and greedy keep their own sizes.
	Depth     int     `json:"depth,omitempty"`
	WarmupMS  int     `json:"warmup_ms"`       // untimed process warmup budget before round 1
	BenchWarm int     `json:"bench_warmup_ms"` // in-process warmup of each timed bench
	BarPP     float64 `json:"bar_pp"`          // not-slower bar (slowdown factor)
	BarTG     float64 `json:"bar_tg"`
	ClaimBar  float64 `json:"claim_bar"` // pre-registered improvement bar (fraction)
	// Memory is the lever's memory bar: arm B's peak device memory at most
	// A x (1 + Frac) + MiB (zero: the default, B <= A + 1% + 64 MiB).
	Memory harness.MemoryBar `json:"memory_bar"`
	// Paired is the plan of the model arm B's value names, when the bar
	// allows it (Memory.Paired; harness/runs fills it before the gates).
	Paired *PairedPlan `json:"paired_plan,omitempty"`
	// Deviations lists the flags that changed a pre-registered value of
	// the lever's registry entry (bars, rounds); the report prints them
	// in its first lines.
	Deviations []string `json:"deviations,omitempty"`
	// Power is the pre-registration of the A/B rounds from a calibration
	// (nil: none found; the gate then states the power its own rounds
	// reached).
	Power *PowerPlan `json:"power,omitempty"`
	// MaxRounds caps the rounds (the lever's declared cap).
	MaxRounds int              `json:"max_rounds"`
	ParityNT  []int            `json:"parity_nt"`
	GraphTol  float64          `json:"graph_tol"`    // whole-graph max|diff| bar against the CPU reference
	GraphGap  float64          `json:"graph_margin"` // positions with a reference top-2 margin at or below it are exempt from top-1
	Prompts   []harness.Prompt `json:"prompts"`
	GenN      int              `json:"gen_n"`
	GenCtx    int              `json:"gen_ctx"`
	SuiteBins []string         `json:"suite_bins,omitempty"`
	// SuiteCache, when set, is a folder of suite results keyed by the
	// sha256 of the test binaries and kernels file, the settings and the
	// GPU: an identical suite run of the last day is reused, and said so.
	SuiteCache string `json:"suite_cache,omitempty"`
	// SuiteDeferredTo, when set, names the shard of a sharded nightly that
	// runs this lever's suite gate (shard 0): the gate is recorded as
	// deferred, undecided, until abtest merge fills in that shard's result.
	SuiteDeferredTo string `json:"suite_deferred_to,omitempty"`
	// LeverDefaults is every lever's registry default: a cached suite run
	// is keyed by the settings that differ from them.
	LeverDefaults map[string]string `json:"-"`
	Kernels       string            `json:"kernels,omitempty"` // fatbin for the SASS census
	// NsysLibDir holds libdw.so.1/libelf.so.1 for QdstrmImporter (default:
	// lib/ beside minfer); it goes on LD_LIBRARY_PATH of the importer only.
	NsysLibDir string `json:"nsys_lib_dir,omitempty"`
	TmpDir     string `json:"-"`
}

// Defaults fills unset numeric settings with the GATES.md defaults.
func (c *Config) Defaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	deff := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Rounds, 9)
	def(&c.MaxRounds, 45)
	def(&c.PP, 512)
	def(&c.TG, 128)
	def(&c.Reps, 3)
	def(&c.WarmupMS, 2000)
	def(&c.BenchWarm, 500)
	def(&c.GenN, 32)
	def(&c.GenCtx, 8192)
	deff(&c.BarPP, 1.015)
	deff(&c.BarTG, 1.015)
	deff(&c.ClaimBar, 0.015)
	deff(&c.GraphTol, 0.5)
	deff(&c.GraphGap, 0.1)
	if c.Memory == (harness.MemoryBar{}) {
		c.Memory = harness.DefaultMemory
	}
	if len(c.ParityNT) == 0 {
		c.ParityNT = []int{1, 5, 64}
	}
	if len(c.Prompts) == 0 {
		c.Prompts = harness.DefaultPrompts()
	}
	if len(c.Gates) == 0 {
		c.Gates = AllGates
	}
	if c.Device == "" {
		c.Device = "auto"
	}
	if c.Backend == "" {
		c.Backend = "cpu"
	}
}

// Env is what the gates run with: the minfer client, the machine probe,
// progress output and the run's log of reproducing commands.
type Env struct {
	M        harness.Minfer
	Probe    harness.Probe
	Progress *harness.Progress
	HasGPU   bool
	GPUWhy   string
	// Publish is called with a gate's partial result after each unit of work
	// (an A/B round), so the run can write its JSON incrementally.
	Publish func(Result)

	mu   sync.Mutex
	cmds []string
	seen map[string]bool
}

// Cmd records the command line of e under key (first one per key wins).
func (env *Env) Cmd(key string, e *harness.Exec) {
	if e == nil {
		return
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.seen == nil {
		env.seen = map[string]bool{}
	}
	if env.seen[key] {
		return
	}
	env.seen[key] = true
	bin := env.M.R.Bin
	if e.Bin != "" {
		bin = e.Bin
	}
	if len(e.Args) > 0 && e.Args[0] != "bench" && e.Args[0] != "logits" && e.Args[0] != "generate" && e.Args[0] != "levers" && e.Args[0] != "info" {
		bin = "" // a wrapped call holds its own program
	}
	env.cmds = append(env.cmds, "# "+key+"\n"+e.Command(bin))
}

// Commands returns the recorded reproducing commands.
func (env *Env) Commands() []string {
	env.mu.Lock()
	defer env.mu.Unlock()
	return append([]string(nil), env.cmds...)
}

func (env *Env) publish(r Result) {
	if env.Publish != nil {
		env.Publish(r)
	}
}

func (env *Env) step(format string, a ...any) { env.Progress.Step(format, a...) }

// correctness is the minfer client of the parity and greedy gates: env.M on
// cfg.CorrectnessModel when one is given.
func correctness(cfg Config, env *Env) harness.Minfer {
	m := env.M
	if cfg.CorrectnessModel != "" {
		m.Model = cfg.CorrectnessModel
	}
	return m
}

// instrumentNote says which model a correctness gate ran on, when it is not
// the run's model.
func instrumentNote(cfg Config) string {
	if cfg.CorrectnessModel == "" {
		if cfg.CorrectnessFallback != "" {
			return fmt.Sprintf(" [instrument: the run's model %s, not a trained one: %s]", cfg.Model, cfg.CorrectnessFallback)
		}
		return ""
	}
	h, err := harness.FileSHA256Cached(cfg.CorrectnessModel)
	if err != nil {
		h = "unreadable: " + err.Error()
	}
	return fmt.Sprintf(" [instrument: the correctness model %s, sha256 %s]", cfg.CorrectnessModel, h)
}

// armEnv is what an arm process of a gate runs with: the arm's settings
// and the launch census (every arm process of every gate carries its
// liveness evidence: counters, not a profiler).
func armEnv(arm Arm, extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range arm.Env {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	m["MINFER_LAUNCH_CENSUS"] = "1"
	return m
}

// refEnv is the reference's environment: arm A's lever value without the
// mutation seam.
func refEnv(cfg Config) map[string]string {
	m := map[string]string{}
	for k, v := range cfg.A.Env {
		if k != "MINFER_TEST_MUTATE" {
			m[k] = v
		}
	}
	return m
}

func canceled(ctx context.Context) bool { return ctx.Err() != nil }

package gates

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minfer-go/minfer/harness"
)

// Verdicts of a lever run (GATES.md), in the order of precedence.
const (
	VerdictFail         = "FAIL"
	VerdictNotCaught    = "NOT CAUGHT"   // a planted mutation no gate caught: the harness failed
	VerdictIncomplete   = "INCOMPLETE"   // interrupted or cut by its own budget; no gate recorded as FAIL for it
	VerdictInconclusive = "INCONCLUSIVE" // a gate SKIP or INCONCLUSIVE
	VerdictPartial      = "PARTIAL"      // fewer than the five gates chosen
	VerdictPass         = "PASS"         // all five gates ran and passed
)

// Exit codes of abtest (GATES.md).
const (
	ExitPass      = 0
	ExitFail      = 1 // a gate failed, or a mutation was not caught
	ExitCannotRun = 2 // bad flags, no model, a lever whose backend cannot run here
	ExitUndecided = 3 // INCOMPLETE, INCONCLUSIVE or PARTIAL
)

// ExitCodeOf maps a verdict to its exit code.
func ExitCodeOf(verdict string) int {
	switch verdict {
	case VerdictPass:
		return ExitPass
	case VerdictFail, VerdictNotCaught:
		return ExitFail
	case VerdictCannotRun:
		return ExitCannotRun
	}
	return ExitUndecided
}

// Overhead splits a run's wall time: the minfer processes of the arms, the
// profilers running (or reading the output of) the arms (ncu, nsys, the nsys
// importer and stats, cuobjdump), the device test binaries, and what is left:
// abtest itself (its start-up, probes, hashing, file writing, plotting,
// waiting). Fraction is that last share only.
type Overhead struct {
	Total          time.Duration `json:"total_ns"`
	InArms         time.Duration `json:"in_arms_ns"` // minfer processes run directly
	Execs          int           `json:"execs"`
	Profilers      time.Duration `json:"profilers_ns"`
	ProfilerExecs  int           `json:"profiler_execs"`
	DeviceTests    time.Duration `json:"device_tests_ns"`
	DeviceTestRuns int           `json:"device_test_runs"`
	Harness        time.Duration `json:"harness_ns"` // Total minus the three above
	Fraction       float64       `json:"fraction"`   // Harness/Total
}

// Record is a lever run: configuration, provenance, every gate's result and
// raw values. It is written as JSON after every round.
type Record struct {
	Schema           int                 `json:"schema"`
	Lever            string              `json:"lever"`
	Doc              string              `json:"doc"`
	Path             string              `json:"path"`
	A                string              `json:"a"`
	B                string              `json:"b"`
	Mutate           string              `json:"mutate,omitempty"`
	CommandLine      string              `json:"command_line"`
	Started          time.Time           `json:"started"`
	Finished         time.Time           `json:"finished"`
	Complete         bool                `json:"complete"`
	IncompleteReason string              `json:"incomplete_reason,omitempty"`
	Env              harness.Environment `json:"environment"`
	Config           Config              `json:"config"`
	Gates            []Result            `json:"gates"`
	Verdict          string              `json:"verdict"`
	VerdictLine      string              `json:"verdict_line"`
	CaughtBy         []string            `json:"caught_by,omitempty"` // mutation runs: the gates that went red
	Overhead         Overhead            `json:"overhead"`
	Reproduce        []string            `json:"reproduce"`

	mu       sync.Mutex
	workBase map[string]harness.WorkTime // the runner's accounts when the run started
	baseSet  bool
}

// MarkStart sets when the run started and the runner's accounts at that
// moment, so the overhead counts everything abtest did since (for `abtest
// run`: its process start, before the lever registry and the environment).
func (r *Record) MarkStart(t time.Time, work map[string]harness.WorkTime) {
	r.Started, r.workBase, r.baseSet = t, work, true
}

// UpdateOverhead recomputes the overhead up to now from the runner's
// accounts (the caller holds the lock).
func (r *Record) UpdateOverhead(run *harness.Runner) {
	now := run.Work()
	d := func(kind string) (time.Duration, int) {
		w, b := now[kind], r.workBase[kind]
		return w.Wall - b.Wall, w.Execs - b.Execs
	}
	o := Overhead{Total: time.Since(r.Started)}
	o.InArms, o.Execs = d(harness.WorkMinfer)
	o.Profilers, o.ProfilerExecs = d(harness.WorkProfilers)
	o.DeviceTests, o.DeviceTestRuns = d(harness.WorkDeviceTests)
	o.Harness = max(o.Total-o.InArms-o.Profilers-o.DeviceTests, 0)
	if o.Total > 0 {
		o.Fraction = float64(o.Harness) / float64(o.Total)
	}
	r.Overhead = o
}

// Lock guards a record that a round is updating while it is written.
func (r *Record) Lock()   { r.mu.Lock() }
func (r *Record) Unlock() { r.mu.Unlock() }

// Decide sets the verdict from the gates: PASS only when all five gates
// ran and passed; otherwise the first of FAIL, NOT CAUGHT, INCOMPLETE,
// INCONCLUSIVE, PARTIAL that applies. The verdict line names every gate
// that did not run or could not decide.
func (r *Record) Decide() {
	var pass, fail, undecided, caught, cannotRun []string
	ran := map[string]bool{}
	for _, g := range r.Gates {
		ran[g.Gate] = true
		if g.CannotRun && g.Status != Fail {
			cannotRun = append(cannotRun, fmt.Sprintf("%s: %s", g.Gate, g.Reason))
			continue
		}
		switch g.Status {
		case Pass:
			pass = append(pass, g.Gate)
		case Fail:
			fail = append(fail, g.Gate)
			if g.Control != "" && g.Control != Fail {
				caught = append(caught, g.Gate)
			}
		default:
			why := g.Reason
			if len(why) > 90 {
				why = why[:90] + "…"
			}
			undecided = append(undecided, fmt.Sprintf("%s %s: %s", g.Gate, g.Status, why))
		}
	}
	var notChosen []string
	for _, g := range AllGates {
		if !ran[g] && !r.Config.Between { // a run between builds has three gates
			notChosen = append(notChosen, g)
		}
	}
	mutation := r.Mutate != ""
	switch {
	case len(fail) > 0 && (!mutation || len(caught) > 0):
		r.Verdict = VerdictFail
	case len(cannotRun) > 0:
		// the baseline does not fit the machine (oom.go): no judgement of
		// the lever, a planted mutation included
		r.Verdict = VerdictCannotRun
	case mutation && r.Complete && len(caught) == 0:
		r.Verdict = VerdictNotCaught
	case len(fail) > 0:
		r.Verdict = VerdictFail
	case !r.Complete:
		r.Verdict = VerdictIncomplete
	case len(undecided) > 0:
		r.Verdict = VerdictInconclusive
	case len(notChosen) > 0:
		r.Verdict = VerdictPartial
	default:
		r.Verdict = VerdictPass
	}
	total := len(AllGates)
	if r.Config.Between {
		total = len(r.Gates)
	}
	line := fmt.Sprintf("%s: %s=%s vs %s — %d of %d gates PASS", r.Verdict, r.Lever, r.B, r.A, len(pass), total)
	if len(pass) > 0 {
		line += " (" + strings.Join(pass, ", ") + ")"
	}
	if len(fail) > 0 {
		line += fmt.Sprintf("; FAIL: %s", strings.Join(fail, ", "))
	}
	if len(cannotRun) > 0 {
		line += "; could not run: " + strings.Join(cannotRun, "; ")
	}
	if len(undecided) > 0 {
		line += "; could not decide: " + strings.Join(undecided, "; ")
	}
	if len(notChosen) > 0 {
		line += "; not run: " + strings.Join(notChosen, ", ")
		if r.Complete {
			line += " (not chosen: a PASS needs all five gates)"
		}
	}
	if !r.Complete {
		line += " — run interrupted: " + r.IncompleteReason
	}
	if len(r.Config.Deviations) > 0 {
		line += " — deviations from the registry: " + strings.Join(r.Config.Deviations, ", ")
	}
	r.CaughtBy = nil
	if mutation {
		r.CaughtBy = caught
		switch {
		case len(caught) > 0:
			line += fmt.Sprintf(" — mutation %s caught by %s", r.Mutate, strings.Join(caught, ", "))
		case r.Complete && len(cannotRun) == 0:
			line += fmt.Sprintf(" — MUTATION %s NOT CAUGHT (the harness failed)", r.Mutate)
			if m := r.maskedSlowdown(); m != "" {
				line += " — " + m
			}
		}
	}
	r.VerdictLine = line
}

// maskedSlowdown says why a slow_decode / slow_prefill mutation could not
// show in gate 3: arm B was faster than arm A by more than the planted
// slowdown, so B stays faster and no not-slower rule can refuse it. The
// verdict stays NOT CAUGHT (GATES.md: exit 1); the line tells the user to
// plant it on a lever whose arms run that metric alike.
func (r *Record) maskedSlowdown() string {
	site, frac, _ := strings.Cut(r.Mutate, "=")
	key := map[string]string{"slow_decode": "tg", "slow_prefill": "pp"}[site]
	if key == "" {
		return ""
	}
	f := 1.0 // bare: twice as slow (engine/levers)
	if frac != "" {
		v, err := strconv.ParseFloat(frac, 64)
		if err != nil {
			return ""
		}
		f = v
	}
	for _, g := range r.Gates {
		if g.Gate != GateAB || g.AB == nil {
			continue
		}
		for _, m := range g.AB.Metrics {
			if m.Key == key && float64(m.Median) > 1+f {
				return fmt.Sprintf("arm B ran %s x%.3f faster than arm A, more than the planted %g%% slowdown: B stays faster and no not-slower rule can see it; plant it on a lever whose arms run %s alike (e.g. MINFER_MMQ for decode)",
					m.Name, float64(m.Median), f*100, m.Name)
			}
		}
	}
	return ""
}

// ExitCode is the verdict's exit code.
func (r *Record) ExitCode() int { return ExitCodeOf(r.Verdict) }

// Run applies the selected gates in order. save is called with the record
// after every gate and every A/B round (under the record's lock).
func Run(ctx context.Context, cfg Config, env *Env, rec *Record, save func(*Record)) {
	// MarkStart by the caller (before its environment capture, so that
	// counts too); else the run starts now.
	if !rec.baseSet {
		rec.MarkStart(time.Now(), env.M.R.Work())
	}
	rec.Schema = 1
	rec.Lever, rec.Doc, rec.Path = cfg.Lever.Name, cfg.Lever.Doc, cfg.Lever.Path
	rec.A, rec.B, rec.Mutate = cfg.A.Value, cfg.B.Value, cfg.Mutate
	rec.Config = cfg
	if cfg.TmpDir == "" {
		dir, err := os.MkdirTemp("", "abtest-")
		if err == nil {
			cfg.TmpDir = dir
			defer os.RemoveAll(dir)
		}
	}
	update := func() {
		rec.UpdateOverhead(env.M.R)
		rec.Reproduce = env.Commands()
		rec.Decide()
	}
	idx := -1
	env.Publish = func(r Result) {
		rec.Lock()
		if idx >= 0 && idx < len(rec.Gates) {
			rec.Gates[idx] = r
		}
		update()
		rec.Unlock()
		if save != nil {
			save(rec)
		}
	}
	rec.Complete = false
	rec.IncompleteReason = "running"
	for _, g := range cfg.Gates {
		if ctx.Err() != nil {
			break
		}
		rec.Lock()
		rec.Gates = append(rec.Gates, Result{Gate: g, Defends: Defends(g), Status: Skip, Reason: "running"})
		idx = len(rec.Gates) - 1
		rec.Unlock()
		t0 := time.Now()
		r := runGate(ctx, g, cfg, env)
		r.Wall = time.Since(t0)
		env.Publish(r)
	}
	if cfg.Mutate != "" && ctx.Err() == nil {
		controls(ctx, cfg, env, rec)
	}
	rec.Lock()
	if ctx.Err() != nil {
		rec.Complete = false
		rec.IncompleteReason = "interrupted (" + ctx.Err().Error() + ")"
		for _, g := range cfg.Gates {
			found := false
			for _, r := range rec.Gates {
				found = found || r.Gate == g
			}
			if !found {
				rec.Gates = append(rec.Gates, Result{Gate: g, Defends: Defends(g), Status: Skip, Reason: "not run: interrupted"})
			}
		}
	} else {
		rec.Complete = true
		rec.IncompleteReason = ""
	}
	rec.Finished = time.Now()
	update()
	rec.Unlock()
	if save != nil {
		save(rec)
	}
}

// runGate runs one gate.
func runGate(ctx context.Context, g string, cfg Config, env *Env) Result {
	switch g {
	case GateParity:
		r := Parity(ctx, cfg, env)
		r.Reason += instrumentNote(cfg)
		return r
	case GateGreedy:
		r := Greedy(ctx, cfg, env)
		r.Reason += instrumentNote(cfg)
		return r
	case GateAB:
		return AB(ctx, cfg, env)
	case GateSuite:
		return Suite(ctx, cfg, env)
	case GateProfile:
		return Profile(ctx, cfg, env)
	}
	return Result{Gate: g, Status: Fail, Reason: "unknown gate"}
}

// controls re-runs, in a mutation run, every gate that failed with the
// mutation removed from arm B: a gate caught the mutation only if its
// evidence moved because of it (it fails with the mutation and not
// without), so a lever that fails on its own is not counted as a catch.
func controls(ctx context.Context, cfg Config, env *Env, rec *Record) {
	ctl := cfg
	ctl.Mutate = ""
	ctl.B.Env = map[string]string{}
	for k, v := range cfg.B.Env {
		if k != "MINFER_TEST_MUTATE" {
			ctl.B.Env[k] = v
		}
	}
	for i := range rec.Gates {
		if rec.Gates[i].Status != Fail || ctx.Err() != nil {
			continue
		}
		env.step("control: %s without the mutation", rec.Gates[i].Gate)
		pub := env.Publish
		env.Publish = nil // the control's partial results are not the gate's
		c := runGate(ctx, rec.Gates[i].Gate, ctl, env)
		env.Publish = pub
		if ctx.Err() != nil {
			return
		}
		rec.Lock()
		rec.Gates[i].Control = c.Status
		rec.Gates[i].Evidence += fmt.Sprintf(" [control without the mutation: %s: %s]", c.Status, c.Reason)
		rec.Unlock()
	}
}

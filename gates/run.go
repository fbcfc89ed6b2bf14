package gates

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minfer-go/minfer/harness"
)

// Verdicts of a lever run.
const (
	VerdictPass         = "PASS"
	VerdictFail         = "FAIL"
	VerdictInconclusive = "INCONCLUSIVE" // nothing failed, but some gate was skipped
	VerdictIncomplete   = "INCOMPLETE"
)

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

// Decide sets the verdict from the gates: PASS only when every selected gate
// passed; SKIP is never counted as PASS.
func (r *Record) Decide() {
	var pass, fail, skip []string
	for _, g := range r.Gates {
		switch g.Status {
		case Pass:
			pass = append(pass, g.Gate)
		case Fail:
			fail = append(fail, g.Gate)
		default:
			skip = append(skip, g.Gate)
		}
	}
	switch {
	case !r.Complete:
		r.Verdict = VerdictIncomplete
	case len(fail) > 0:
		r.Verdict = VerdictFail
	case len(skip) > 0:
		r.Verdict = VerdictInconclusive
	default:
		r.Verdict = VerdictPass
	}
	line := fmt.Sprintf("%s: %s=%s vs %s — %d PASS", r.Verdict, r.Lever, r.B, r.A, len(pass))
	if len(fail) > 0 {
		line += fmt.Sprintf(", %d FAIL (%s)", len(fail), strings.Join(fail, ", "))
	}
	if len(skip) > 0 {
		line += fmt.Sprintf(", %d SKIP (%s; not counted as PASS)", len(skip), strings.Join(skip, ", "))
	}
	if !r.Complete {
		line += " — run interrupted: " + r.IncompleteReason
	}
	r.CaughtBy = nil
	if r.Mutate != "" {
		r.CaughtBy = fail
		if len(fail) == 0 {
			line += fmt.Sprintf(" — MUTATION %s NOT CAUGHT", r.Mutate)
		} else {
			line += fmt.Sprintf(" — mutation %s caught by %s", r.Mutate, strings.Join(fail, ", "))
		}
	}
	r.VerdictLine = line
}

// ExitCode: 0 when nothing failed, 1 when a gate failed or the run was cut.
func (r *Record) ExitCode() int {
	if r.Verdict == VerdictPass || r.Verdict == VerdictInconclusive {
		return 0
	}
	return 1
}

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
		var r Result
		switch g {
		case GateParity:
			r = Parity(ctx, cfg, env)
			r.Reason += instrumentNote(cfg)
		case GateGreedy:
			r = Greedy(ctx, cfg, env)
			r.Reason += instrumentNote(cfg)
		case GateAB:
			r = AB(ctx, cfg, env)
		case GateSuite:
			r = Suite(ctx, cfg, env)
		case GateProfile:
			r = Profile(ctx, cfg, env)
		default:
			r = Result{Gate: g, Status: Fail, Reason: "unknown gate"}
		}
		r.Wall = time.Since(t0)
		env.Publish(r)
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

package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/report"
)

// Nightly runs every lever of leverList ("all" or NAME[=B],...) with
// all five gates and writes the summary under f.Out.
func Nightly(ctx context.Context, f *Options, leverList, thresholdFlag string, cmdline string) (*gates.NightlySummary, string, error) {
	threshold, err := report.ParseThreshold(thresholdFlag)
	if err != nil {
		return nil, "", CannotRun("--threshold: %v", err)
	}
	s, err := newSetup(ctx, f)
	if err != nil {
		return nil, "", err
	}
	var specs []string
	if leverList == "all" || leverList == "" {
		for _, l := range s.levers {
			if l.ABAble() { // reserved ones become SKIP entries below
				specs = append(specs, l.Name)
			}
		}
	} else {
		for _, n := range strings.Split(leverList, ",") {
			if n = strings.TrimSpace(n); n != "" {
				specs = append(specs, n)
			}
		}
	}
	// A reserved lever switches nothing: it is listed as a SKIP with its
	// reason, never run (a run could only measure noise).
	var reserved []gates.NightlyEntry
	kept := specs[:0]
	for _, sp := range specs {
		name, _, _ := strings.Cut(sp, "=")
		if l, err := harness.FindLever(s.levers, name); err == nil && l.Reserved != "" {
			reserved = append(reserved, gates.NightlyEntry{Lever: l.Name, Backend: l.Backend, Verdict: gates.VerdictSkip, Line: "reserved, switches nothing in this build: " + l.Reserved})
			continue
		}
		kept = append(kept, sp)
	}
	specs = kept
	if len(specs) == 0 {
		return nil, "", CannotRun("--levers: no lever to run")
	}
	// A lever whose path does not exist on this backend is a SKIP with its
	// reason (abtest run refuses it).
	var skipped []gates.NightlyEntry
	kept = specs[:0]
	for _, sp := range specs {
		name, _, _ := strings.Cut(sp, "=")
		if l, err := harness.FindLever(s.levers, name); err == nil {
			if why := skipCUDA(l, s, f.Device); why != "" {
				skipped = append(skipped, gates.NightlyEntry{Lever: l.Name, A: l.ArmA, B: l.ArmB, Backend: l.Backend, Workload: l.Workload, Verdict: gates.VerdictSkip, Line: why})
				continue
			}
		}
		kept = append(kept, sp)
	}
	specs = kept
	// Validate every spec before spending an hour on the first ones.
	cfgs := make([]gates.Config, len(specs))
	for i, sp := range specs {
		if cfgs[i], err = s.config(f, sp, ""); err != nil {
			return nil, "", err
		}
	}
	prevPath, prev, prevSkipped := gates.PreviousNightly(f.Out)
	sum := &gates.NightlySummary{Date: time.Now().UTC().Format("2006-01-02T150405"), Threshold: threshold, PP: f.PP, TG: f.TG}
	sum.Entries = append(sum.Entries, skipped...)
	envCfg := gates.Config{Model: s.m.Model}
	if len(cfgs) > 0 {
		envCfg = cfgs[0]
	}
	env := s.environment(ctx, envCfg)
	sum.Machine, sum.Commit, sum.Model, sum.ModelSHA256 = machine(env), env.Commit, env.Model, env.ModelSHA256
	prog := harness.NewProgress(os.Stderr, 0)
	models := &workloadModels{s: s, f: f, paths: map[string]string{}, prog: prog}

	for i, cfg := range cfgs {
		if ctx.Err() != nil {
			break
		}
		if cfg.SuiteCache == "" {
			// Levers whose arm B has the same settings share one suite run.
			cfg.SuiteCache = filepath.Join(f.Out, ".suite-cache")
		}
		e := gates.NightlyEntry{Lever: cfg.Lever.Name, A: cfg.A.Value, B: cfg.B.Value, Backend: cfg.Lever.Backend,
			Workload: strings.TrimSpace(cfg.Lever.Workload)}
		nf := *f
		nf.OnWorkload, nf.Given = true, nil // the nightly runs every lever on its workload
		if err := s.prepare(ctx, &nf, &cfg, models, prog, true); err != nil {
			e.Verdict, e.Line = gates.VerdictCannotRun, fmt.Sprintf("could not set up its workload %q: %v", e.Workload, err)
			sum.Entries = append(sum.Entries, e)
			continue
		}
		e.PP = cfg.PP
		rec, base := s.runConfig(ctx, cfg, f.Out, cmdline+" # lever "+specs[i]+workloadComment(cfg), os.Stderr, time.Time{})
		e.Model, e.ModelSHA256 = rec.Env.Model, rec.Env.ModelSHA256
		if cfg.Model != "" {
			e.Model = cfg.Model
		}
		e.Verdict, e.Line = rec.Verdict, rec.VerdictLine
		if rel, err := filepath.Rel(f.Out, base+".md"); err == nil {
			e.Report = filepath.ToSlash(rel)
		}
		for _, g := range rec.Gates {
			if g.AB == nil {
				continue
			}
			for _, m := range g.AB.Metrics {
				if m.Key == "pp" {
					e.PPA, e.PPB, e.PPRatio = m.A, m.B, m.Median
				} else {
					e.TGA, e.TGB, e.TGRatio = m.A, m.B, m.Median
				}
			}
		}
		sum.Entries = append(sum.Entries, e)
	}
	sum.Entries = append(sum.Entries, reserved...)
	sum.Complete = ctx.Err() == nil
	sum.Compare(prevPath, prev)
	if len(prevSkipped) > 0 {
		note := "unreadable newer nightly results skipped (" + strings.Join(prevSkipped, "; ") + ")"
		if sum.PrevNote != "" {
			note = sum.PrevNote + "; " + note
		}
		sum.PrevNote = note
	}
	sum.Decide()
	if err := os.MkdirAll(f.Out, 0o755); err != nil {
		return nil, "", &Error{2, fmt.Errorf("nightly: --out: %w", err)}
	}
	path := filepath.Join(f.Out, "nightly-"+sum.Date)
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return nil, "", &Error{2, err}
	}
	if err := os.WriteFile(path+".json", b, 0o644); err != nil {
		return nil, "", &Error{2, err}
	}
	if err := os.WriteFile(path+".md", []byte(report.NightlyMarkdown(sum, cmdline)), 0o644); err != nil {
		return nil, "", &Error{2, err}
	}
	return sum, path, nil
}

// workloadModels gives a lever its declared workload (abtest nightly, and
// abtest run --workload): its own model, synthesized once per run into
// --synth-dir (synthModel, the cache abtest run and perf use), and its own
// pp.
type workloadModels struct {
	s     *setup
	f     *Options
	paths map[string]string // "SHAPE:TYPE" -> model path
	prog  *harness.Progress
}

// apply points cfg at the lever's workload (its model and/or pp). The
// correctness model is picked afterwards for whatever model the run has
// (setup.correctnessFor).
func (w *workloadModels) apply(ctx context.Context, cfg *gates.Config) error {
	wl, err := harness.ParseWorkload(cfg.Lever.Workload)
	if err != nil {
		return err
	}
	if wl.PP > 0 {
		cfg.PP = wl.PP
	}
	if !wl.HasModel() {
		return nil
	}
	key := wl.ModelName()
	path, ok := w.paths[key]
	if !ok {
		w.prog.Note("workload: %s runs on %s: synthesizing (or reusing) it in the synth dir", cfg.Lever.Name, key)
		if path, _, err = synthModel(ctx, w.s.m.R, w.f.SynthDir, wl.Shape, wl.Type, w.f.Seed); err != nil {
			return err
		}
		w.paths[key] = path
	}
	cfg.Model = path
	return nil
}

// workloadComment is the reproduce line's note of a lever run off the
// nightly's default workload ("" when on it).
func workloadComment(cfg gates.Config) string {
	if strings.TrimSpace(cfg.Lever.Workload) == "" {
		return ""
	}
	c := fmt.Sprintf(" (workload %s: --pp %d", strings.TrimSpace(cfg.Lever.Workload), cfg.PP)
	if cfg.Model != "" {
		c += " --model " + cfg.Model
	}
	return c + ")"
}

// skipCUDA says why a lever of the CUDA backend is not run here ("" when it
// is): without a device its arms would both run the CPU backend and the
// lever would switch nothing, so any PASS would be a lie.
func skipCUDA(l harness.Lever, s *setup, device string) string {
	if l.Backend != "cuda" {
		return ""
	}
	if device == "cpu" {
		return "backend cuda, but --device cpu: not run (a CUDA lever switches nothing on the CPU)"
	}
	if !s.hasGPU {
		return "backend cuda, no CUDA device on this machine (" + s.why + "): not run"
	}
	return ""
}

func machine(e harness.Environment) string {
	if e.GPU != nil {
		return e.GPU.Name
	}
	return e.CPUModel
}

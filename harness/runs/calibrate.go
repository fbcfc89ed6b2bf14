package runs

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/report"
)

// calibrationWorkloads expands --workload: "all" is every distinct
// workload the registry declares plus the default, on the run's backend.
func calibrationWorkloads(s *setup, spec string) []string {
	if spec != "all" {
		return []string{spec}
	}
	seen := map[string]bool{"default": true}
	out := []string{"default"}
	for _, l := range s.levers {
		w := strings.TrimSpace(l.Workload)
		if l.ABAble() && w != "" && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	sort.Strings(out[1:])
	return out
}

// Calibrate runs an A/A calibration of each workload of spec (a registry
// workload, "default" or "all") and writes it under f.Out/calibration/.
func Calibrate(ctx context.Context, f *Options, spec, cmdline string) error {
	if err := f.Check(); err != nil {
		return err
	}
	s, err := newSetup(ctx, f)
	if err != nil {
		return err
	}
	backend := s.backend(f.Device)
	prog := harness.NewProgress(os.Stderr, 0)
	wm := &workloadModels{s: s, f: f, paths: map[string]string{}, prog: prog}
	for _, w := range calibrationWorkloads(s, spec) {
		cfg := gates.Config{Lever: harness.Lever{Lever: levers.Lever{Name: "calibration", Workload: w}}, Backend: backend, Device: f.Device, Model: s.m.Model,
			A:      gates.Arm{Name: "A", Value: "defaults", Env: map[string]string{}},
			Rounds: f.Rounds, PP: f.PP, TG: f.TG, Reps: f.Reps, Depth: f.Depth, WarmupMS: f.WarmupMS, BenchWarm: f.BenchWarm, Gates: []string{gates.GateAB}}
		if w != "default" {
			if _, err := harness.ParseWorkload(w); err != nil {
				return CannotRun("--workload: %v", err)
			}
			if err := wm.apply(ctx, &cfg); err != nil {
				return CannotRun("workload %q: %v", w, err)
			}
		}
		cfg.Defaults()
		if err := calibrateOne(ctx, s, cfg, f.Out, cmdline, prog); err != nil {
			return err
		}
	}
	return nil
}

// calibrateOne runs one A/A calibration and writes it.
func calibrateOne(ctx context.Context, s *setup, cfg gates.Config, out, cmdline string, prog *harness.Progress) error {
	m := s.m
	m.Model = cfg.Model
	env := &gates.Env{M: m, Probe: s.probe, Progress: harness.NewProgress(os.Stderr, 2+cfg.Rounds), HasGPU: s.hasGPU, GPUWhy: s.why}
	e := s.environment(ctx, cfg)
	prog.Note("calibrate: %s, %d A/A rounds of pp%d tg%d%s r%d on %s", cfg.Lever.Workload, cfg.Rounds, cfg.PP, cfg.TG, cfg.TestSuffix(), cfg.Reps, cfg.Backend)
	c, err := gates.Calibrate(ctx, cfg, env, nil)
	if err != nil {
		if ctx.Err() != nil {
			return &Error{gates.ExitUndecided, fmt.Errorf("calibration interrupted after %d rounds: %v", len(c.AB.Rounds), err)}
		}
		return &Error{gates.ExitFail, fmt.Errorf("calibration of %s: %v", cfg.Lever.Workload, err)}
	}
	c.CommandLine, c.Workload, c.Commit, c.Host, c.CPU = cmdline, cfg.Lever.Workload, e.Commit, e.Host, e.CPUModel
	if e.GPU != nil {
		c.GPU, c.Clocks = e.GPU.Name, e.GPU
	}
	if c.Model == "" || c.Model == harness.EmbeddedModel {
		c.Model = e.Model
	}
	file := gates.CalibrationFile(out, gates.MachineName(c.Backend, e.GPU, c.CPU), c.Model, c.PP, c.TG, c.Depth, c.Reps)
	if err := gates.WriteCalibration(file, c); err != nil {
		return &Error{gates.ExitCannotRun, err}
	}
	md := strings.TrimSuffix(file, ".json") + ".md"
	if err := os.WriteFile(md, []byte(report.CalibrationMarkdown(c, file)), 0o644); err != nil {
		return &Error{gates.ExitCannotRun, err}
	}
	prog.Note("calibration %s: %s", file, report.CalibrationSummary(c))
	return nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/report"
)

func newCalibrateCmd() *cobra.Command {
	var f runFlags
	var workloads string
	cmd := &cobra.Command{
		Use:   "calibrate [--workload SPEC|all] [--out reports]",
		Short: "A/A rounds (the same build and settings in both arms) that record this machine's per-round noise for a workload; abtest run pre-registers its rounds from it",
		Long: "Runs gate 3's interleaved rounds with arm A on both sides and records, per metric (pp, tg) and timing\n" +
			"basis (wall; device where the backend times its splits), the sd of the per-round log ratio, with the\n" +
			"date, GPU, clocks and commit, into OUT/calibration/<machine>/<model>-pp<P>-tg<T>-r<R>.json (and .md).\n" +
			"It also states the rounds each sd pre-registers at GATES.md's default bars and how often the\n" +
			"improvement claim fires on resampled A/A rounds. --workload takes a registry workload (\"qwen2-0.5b:Q8_0 pp5\"),\n" +
			"\"default\" (the embedded model, or --model/--shape) or \"all\" (every workload a lever declares, plus the default).\n" +
			"Exit 0: written; 2: could not run; 3: interrupted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCalibrate(cmd.Context(), &f, workloads, strings.Join(os.Args, " "))
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&workloads, "workload", "default", "default, all, or a workload SPEC (SHAPE:TYPE and/or ppN)")
	_ = cmd.Flags().Set("rounds", "11")
	cmd.Flags().Lookup("rounds").DefValue = "11"
	return cmd
}

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

func runCalibrate(ctx context.Context, f *runFlags, spec, cmdline string) error {
	if err := f.check(); err != nil {
		return err
	}
	s, err := newSetup(ctx, f)
	if err != nil {
		return err
	}
	backend := s.backend(f.device)
	prog := harness.NewProgress(os.Stderr, 0)
	wm := &workloadModels{s: s, f: f, paths: map[string]string{}, prog: prog}
	for _, w := range calibrationWorkloads(s, spec) {
		cfg := gates.Config{Lever: harness.Lever{Name: "calibration", Workload: w}, Backend: backend, Device: f.device, Model: s.m.Model,
			A:      gates.Arm{Name: "A", Value: "defaults", Env: map[string]string{}},
			Rounds: f.rounds, PP: f.pp, TG: f.tg, Reps: f.reps, WarmupMS: f.warmupMS, BenchWarm: f.benchWarm, Gates: []string{gates.GateAB}}
		if w != "default" {
			if _, err := harness.ParseWorkload(w); err != nil {
				return cannotRun("--workload: %v", err)
			}
			if err := wm.apply(ctx, &cfg); err != nil {
				return cannotRun("workload %q: %v", w, err)
			}
		}
		cfg.Defaults()
		if err := calibrateOne(ctx, s, cfg, f.out, cmdline, prog); err != nil {
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
	prog.Note("calibrate: %s, %d A/A rounds of pp%d tg%d r%d on %s", cfg.Lever.Workload, cfg.Rounds, cfg.PP, cfg.TG, cfg.Reps, cfg.Backend)
	c, err := gates.Calibrate(ctx, cfg, env, nil)
	if err != nil {
		if ctx.Err() != nil {
			return exitError{gates.ExitUndecided, fmt.Errorf("calibration interrupted after %d rounds: %v", len(c.AB.Rounds), err)}
		}
		return exitError{gates.ExitFail, fmt.Errorf("calibration of %s: %v", cfg.Lever.Workload, err)}
	}
	c.CommandLine, c.Workload, c.Commit, c.Host, c.CPU = cmdline, cfg.Lever.Workload, e.Commit, e.Host, e.CPUModel
	if e.GPU != nil {
		c.GPU, c.Clocks = e.GPU.Name, e.GPU
	}
	if c.Model == "" || c.Model == harness.EmbeddedModel {
		c.Model = e.Model
	}
	file := gates.CalibrationFile(out, gates.MachineName(c.Backend, e.GPU, c.CPU), c.Model, c.PP, c.TG, c.Reps)
	if err := gates.WriteCalibration(file, c); err != nil {
		return exitError{gates.ExitCannotRun, err}
	}
	md := strings.TrimSuffix(file, ".json") + ".md"
	if err := os.WriteFile(md, []byte(report.CalibrationMarkdown(c, file)), 0o644); err != nil {
		return exitError{gates.ExitCannotRun, err}
	}
	prog.Note("calibration %s: %s", file, report.CalibrationSummary(c))
	return nil
}

package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/report"
)

// PROptions are the settings of `abtest pr`: the two builds, the workload
// matrix, the class the change declares for its outputs, the environment
// of the head only, and the per-run settings of abtest run.
type PROptions struct {
	Options
	Base, Head string // folders holding a minfer binary (and its kernels file)
	Workloads  string // "all", or embedded / SHAPE:TYPE[@ppN], comma-separated
	Tolerance  string // a tolerance class (name or phrase); "" bitwise
	HeadEnv    []string
}

// prBuild resolves a build folder: its minfer (required), its kernels file
// (the one *.fatbin, optional on the CPU), their hashes and the binary's
// commit stamp.
func prBuild(dir string) (gates.PRBuild, error) {
	b := gates.PRBuild{Dir: dir, Minfer: filepath.Join(dir, "minfer")}
	abs, err := filepath.Abs(b.Minfer)
	if err != nil {
		return b, err
	}
	b.Minfer = abs
	st, err := os.Stat(b.Minfer)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return b, fmt.Errorf("%s: no minfer binary there (want %s)", dir, b.Minfer)
	}
	if b.MinferSHA256, err = harness.FileSHA256Cached(b.Minfer); err != nil {
		return b, err
	}
	if stamp, ok := harness.ReadVCSStamp(b.Minfer); ok {
		b.Commit = stamp.Revision
		if stamp.Modified {
			b.Commit += "+modified"
		}
	}
	fats, _ := filepath.Glob(filepath.Join(dir, "*.fatbin"))
	switch len(fats) {
	case 0:
	case 1:
		b.Kernels, _ = filepath.Abs(fats[0])
		if b.KernelSHA256, err = harness.FileSHA256Cached(b.Kernels); err != nil {
			return b, err
		}
	default:
		return b, fmt.Errorf("%s: %d kernels files (%s): want one", dir, len(fats), strings.Join(fats, ", "))
	}
	return b, nil
}

// exactBin is the minfer that computes gate 1's exact reference in a pr:
// the base's (the reference's own, "") when its registry has
// MINFER_CPU_EXACT, else the head's, so a base older than the lever still
// gets its activation-quantization misses judged (the exact evaluation of
// the same weights does not depend on the build that does it).
func exactBin(baseLevers []harness.Lever, head string) string {
	if _, err := harness.FindLever(baseLevers, "MINFER_CPU_EXACT"); err == nil {
		return ""
	}
	return head
}

// prWorkloads expands --workloads: "all" is every workload a lever
// declares plus the embedded model; each is "embedded" or
// SHAPE:TYPE[@ppN].
func prWorkloads(s *setup, spec string) ([]string, error) {
	if spec == "all" || spec == "" {
		seen := map[string]bool{}
		var out []string
		for _, l := range s.levers {
			w, err := harness.ParseWorkload(l.Workload)
			if err != nil || !l.ABAble() || !w.HasModel() {
				continue
			}
			name := w.ModelName()
			if w.PP > 0 {
				name += fmt.Sprintf("@pp%d", w.PP)
			}
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
		sort.Strings(out)
		return append([]string{"embedded"}, out...), nil
	}
	var out []string
	for _, w := range strings.Split(spec, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if _, _, err := parsePRWorkload(w); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--workloads: none given")
	}
	return out, nil
}

// parsePRWorkload reads embedded or SHAPE:TYPE[@ppN] as a workload (the
// registry's grammar underneath).
func parsePRWorkload(w string) (harness.Workload, bool, error) {
	if w == "embedded" {
		return harness.Workload{}, true, nil
	}
	model, pp, hasPP := strings.Cut(w, "@")
	spec := model
	if hasPP {
		spec += " " + pp
	}
	wl, err := harness.ParseWorkload(spec)
	if err != nil || !wl.HasModel() {
		return wl, false, fmt.Errorf("--workloads: %q: want embedded or SHAPE:TYPE[@ppN]", w)
	}
	return wl, false, nil
}

// prTolerance parses --tolerance: a class name of the registry
// (kv-precision, activation-quantization, accumulation-order,
// f16-weight-tile), a class phrase, or "" (bitwise).
func prTolerance(flag string, ls []harness.Lever) (harness.Tolerance, error) {
	if flag == "" || flag == "bitwise" {
		return harness.ParseTolerance("")
	}
	for _, l := range ls {
		if t, err := harness.ParseTolerance(l.Tolerance); err == nil && !t.Bitwise && t.Class == flag {
			return t, nil
		}
	}
	return harness.ParseTolerance(flag)
}

// PR runs the base build against the head build over the workload matrix
// and writes the page (OUT/<date>-<base>-<head>.md), its JSON and the Go
// benchmark lines; each workload's full report goes in the folder beside it.
func PR(ctx context.Context, o *PROptions, cmdline string, progressTo *os.File) (*gates.PRRun, string, error) {
	if o.Base == "" || o.Head == "" {
		return nil, "", CannotRun("--base and --head are required (folders holding a minfer binary and its kernels file)")
	}
	base, err := prBuild(o.Base)
	if err != nil {
		return nil, "", CannotRun("--base: %v", err)
	}
	head, err := prBuild(o.Head)
	if err != nil {
		return nil, "", CannotRun("--head: %v", err)
	}
	headEnv := map[string]string{}
	for _, kv := range o.HeadEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, "MINFER_") {
			return nil, "", CannotRun("--head-env %q: want MINFER_NAME=VALUE", kv)
		}
		headEnv[k] = v
	}
	opts := o.Options
	opts.Minfer = base.Minfer // the registry, the probe and the synth of the base build
	if err := opts.Check(); err != nil {
		return nil, "", err
	}
	s, err := newSetup(ctx, &opts)
	if err != nil {
		return nil, "", err
	}
	for k, v := range headEnv {
		l, err := harness.FindLever(s.levers, k)
		if err == nil {
			err = l.Validate(v)
		}
		if err != nil {
			return nil, "", CannotRun("--head-env: %v", err)
		}
	}
	tol, err := prTolerance(o.Tolerance, s.levers)
	if err != nil {
		return nil, "", CannotRun("--tolerance: %v", err)
	}
	wls, err := prWorkloads(s, o.Workloads)
	if err != nil {
		return nil, "", CannotRun("%v", err)
	}
	run := &gates.PRRun{Schema: 1, Started: time.Now(), CommandLine: cmdline, Base: base, Head: head, HeadEnv: headEnv, Tolerance: tol.String()}
	name := fmt.Sprintf("%s-%s-%s", run.Started.UTC().Format("2006-01-02T150405"), commit9(base.Commit), commit9(head.Commit))
	page := filepath.Join(opts.Out, name)
	prog := harness.NewProgress(progressTo, 0)
	wm := &workloadModels{s: s, f: &opts, paths: map[string]string{}, prog: prog}
	backend := s.backend(opts.Device)
	for _, w := range wls {
		if ctx.Err() != nil {
			break
		}
		wl, embedded, _ := parsePRWorkload(w)
		armEnv := func(b gates.PRBuild, extra map[string]string) map[string]string {
			m := map[string]string{}
			if b.Kernels != "" {
				m["MINFER_KERNELS"] = b.Kernels
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		cfg := gates.Config{Lever: harness.Lever{Lever: levers.Lever{Name: "pr " + w, Doc: "the head build against the base build", Path: "the whole build", Workload: wl.Raw}},
			Between: true, Tol: tol, Device: opts.Device, Backend: backend, Model: s.m.Model,
			A:     gates.Arm{Name: "A", Value: "base", Env: armEnv(base, nil), Bin: base.Minfer},
			B:     gates.Arm{Name: "B", Value: "head", Env: armEnv(head, headEnv), Bin: head.Minfer},
			Gates: gates.PRGates, Rounds: opts.Rounds, PP: opts.PP, TG: opts.TG, Reps: opts.Reps, WarmupMS: opts.WarmupMS, BenchWarm: opts.BenchWarm,
			GraphTol: opts.GraphTol, GenN: opts.GenN, BarPP: opts.BarPP, BarTG: opts.BarTG, ClaimBar: opts.ClaimBar}
		cfg.ExactBin = exactBin(s.levers, head.Minfer)
		if !embedded {
			if err := wm.apply(ctx, &cfg); err != nil {
				return nil, "", CannotRun("workload %s: %v", w, err)
			}
		}
		if cfg.CorrectnessModel, cfg.CorrectnessFallback, err = s.correctnessFor(ctx, opts.CorrectnessModels, cfg.Model, opts.SynthDir, false, prog); err != nil {
			return nil, "", CannotRun("correctness model: %v", err)
		}
		cfg.Defaults()
		s.planRounds(ctx, &opts, &cfg, prog)
		slug := strings.NewReplacer(":", "-", "@", "-").Replace(w)
		rec, detail := s.runConfigAt(ctx, cfg, func(*gates.Record) string { return filepath.Join(page, slug) }, cmdline+" # workload "+w, progressTo, time.Time{})
		rel, _ := filepath.Rel(opts.Out, detail+".md")
		run.Workloads = append(run.Workloads, gates.PRWorkload{Workload: w, Record: rec, Report: filepath.ToSlash(rel)})
	}
	run.Complete = ctx.Err() == nil && len(run.Workloads) == len(wls)
	run.Finished = time.Now()
	run.Decide()
	if err := writePR(page, run); err != nil {
		return run, page, CannotRun("writing the page: %v", err)
	}
	return run, page, nil
}

func writePR(page string, run *gates.PRRun) error {
	if err := os.MkdirAll(filepath.Dir(page), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(page+".json", b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(page+".md", []byte(report.PRMarkdown(run)), 0o644); err != nil {
		return err
	}
	f, err := os.Create(page + ".bench.txt")
	if err != nil {
		return err
	}
	report.PRBenchLines(f, run)
	return f.Close()
}

func commit9(c string) string {
	if c == "" {
		return "unknown"
	}
	c = strings.TrimSuffix(c, "+modified")
	if len(c) > 9 {
		return c[:9]
	}
	return c
}

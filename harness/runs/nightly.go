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

// NightlyOptions are abtest nightly's own flags.
type NightlyOptions struct {
	Levers    string // "all" or NAME[=B],...
	Threshold string // "2%"
	// Shard is "" (every lever), "i/N" or "auto/N" ($JOB_COMPLETION_INDEX).
	Shard string
	// BalanceFrom is a nightly summary, or a folder of them (the newest),
	// whose lever times balance the shards ("": the previous nightly in
	// --out).
	BalanceFrom     string
	SuiteEveryShard bool
	// Control is a lever spec every shard runs besides its part, so the
	// merge can compare the shards' machines on one lever.
	Control string
	Getenv  func(string) string // os.Getenv when nil
}

// nightlyItem is one lever spec of the night: run, or an entry decided
// before running (reserved, or a backend this machine lacks).
type nightlyItem struct {
	spec  string
	cfg   gates.Config
	entry *gates.NightlyEntry // set: not run
}

// Nightly runs every lever of o.Levers (or, with o.Shard, this shard's
// part of them) with all five gates and writes the summary under f.Out,
// after every lever, so a shard killed by its scheduler leaves a partial
// one.
func Nightly(ctx context.Context, f *Options, o NightlyOptions, cmdline string) (*gates.NightlySummary, string, error) {
	threshold, err := report.ParseThreshold(o.Threshold)
	if err != nil {
		return nil, "", CannotRun("--threshold: %v", err)
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var shard *gates.ShardInfo
	if o.Shard != "" {
		i, n, err := gates.ParseShard(o.Shard, getenv)
		if err != nil {
			return nil, "", CannotRun("--shard %v", err)
		}
		shard = &gates.ShardInfo{Index: i, Count: n, SuiteEveryShard: o.SuiteEveryShard, Control: o.Control}
	} else if o.BalanceFrom != "" || o.SuiteEveryShard || o.Control != "" {
		return nil, "", CannotRun("--balance-from, --suite-every-shard and --control apply to a shard: give --shard i/N")
	}
	s, err := newSetup(ctx, f)
	if err != nil {
		return nil, "", err
	}
	items, err := s.nightlyItems(f, o.Levers)
	if err != nil {
		return nil, "", err
	}
	if o.Control != "" {
		if items, err = s.withControl(f, items, o.Control); err != nil {
			return nil, "", err
		}
	}
	prevPath, prev, prevSkipped := gates.PreviousNightly(f.Out)
	times := gates.SecondsByLever(prev)
	mine := map[string]bool{}
	for _, it := range items {
		mine[it.spec] = true
	}
	if shard != nil {
		if err := balance(shard, items, o.BalanceFrom, f.Out, prevPath, prev); err != nil {
			return nil, "", err
		}
		mine = map[string]bool{}
		for _, sp := range shard.Levers() {
			mine[sp] = true
		}
		if shard.Control != "" {
			mine[shard.Control] = true
		}
		if !o.SuiteEveryShard && shard.Index != 0 {
			for i := range items {
				items[i].cfg.SuiteDeferredTo = fmt.Sprintf("0/%d", shard.Count)
			}
		}
	}
	sum := &gates.NightlySummary{Date: time.Now().UTC().Format("2006-01-02T150405"), Threshold: threshold, PP: f.PP, TG: f.TG, Shard: shard, CommandLine: cmdline}
	envCfg := gates.Config{Model: s.m.Model}
	for _, it := range items {
		if it.entry == nil {
			envCfg = it.cfg
			break
		}
	}
	env := s.environment(ctx, envCfg)
	sum.Machine, sum.Commit, sum.Model, sum.ModelSHA256 = machine(env), env.Commit, env.Model, env.ModelSHA256
	if env.GPU != nil {
		sum.GPU = env.GPU.UUID
	}
	if err := os.MkdirAll(f.Out, 0o755); err != nil {
		return nil, "", &Error{2, fmt.Errorf("nightly: --out: %w", err)}
	}
	path := filepath.Join(f.Out, "nightly-"+sum.Date)
	if shard != nil {
		path = filepath.Join(f.Out, gates.ShardFileBase(sum.Date, shard.Index, shard.Count))
	}
	prog := harness.NewProgress(os.Stderr, 0)
	models := &workloadModels{s: s, f: f, paths: map[string]string{}, prog: prog}
	eta := harness.ETA{Start: time.Now()}
	var todo []nightlyItem
	for _, it := range items {
		if mine[it.spec] {
			todo = append(todo, it)
		}
	}
	for i, it := range todo {
		if ctx.Err() != nil {
			break
		}
		var pending []float64
		for _, p := range todo[i:] {
			if p.entry == nil {
				pending = append(pending, times[p.spec])
			}
		}
		if it.entry != nil {
			sum.Entries = append(sum.Entries, *it.entry)
			continue
		}
		prog.Note("nightly: lever %d of %d, %s; %s", i+1, len(todo), it.spec, eta.Line(pending))
		t0 := time.Now()
		e := s.nightlyLever(ctx, f, it, models, prog, cmdline)
		e.Seconds = time.Since(t0).Seconds()
		eta.Done(e.Seconds)
		sum.Entries = append(sum.Entries, e)
		if err := writeNightly(path, sum, false); err != nil {
			return nil, "", err
		}
	}
	if shard != nil && shard.Index == 0 && !shard.SuiteEveryShard && ctx.Err() == nil {
		s.suitesForOtherShards(ctx, shard, items, prog)
	}
	sum.Complete = ctx.Err() == nil
	if shard == nil {
		sum.Compare(prevPath, prev)
		if len(prevSkipped) > 0 {
			note := "unreadable newer nightly results skipped (" + strings.Join(prevSkipped, "; ") + ")"
			if sum.PrevNote != "" {
				note = sum.PrevNote + "; " + note
			}
			sum.PrevNote = note
		}
	} else {
		sum.PrevNote = "a shard's part of the night: abtest merge compares the whole night with the previous one"
	}
	sum.Decide()
	if err := writeNightly(path, sum, true); err != nil {
		return nil, "", err
	}
	return sum, path, nil
}

// nightlyItems resolves the lever list: every spec validated before an hour
// is spent on the first ones. A reserved lever switches nothing: it is a
// SKIP with its reason, never run (a run could only measure noise); so is a
// lever whose path does not exist on this backend (abtest run refuses it).
func (s *setup) nightlyItems(f *Options, leverList string) ([]nightlyItem, error) {
	var specs []string
	if leverList == "all" || leverList == "" {
		for _, l := range s.levers {
			if l.ABAble() || l.Reserved != "" {
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
	if len(specs) == 0 {
		return nil, CannotRun("--levers: no lever to run")
	}
	var items []nightlyItem
	runnable := 0
	for _, sp := range specs {
		name, _, _ := strings.Cut(sp, "=")
		it := nightlyItem{spec: sp}
		if l, err := harness.FindLever(s.levers, name); err == nil {
			if l.Reserved != "" {
				it.entry = &gates.NightlyEntry{Spec: sp, Lever: l.Name, Backend: l.Backend, Verdict: gates.VerdictSkip, Line: "reserved, switches nothing in this build: " + l.Reserved}
			} else if why := skipCUDA(l, s, f.Device); why != "" {
				it.entry = &gates.NightlyEntry{Spec: sp, Lever: l.Name, A: l.ArmA, B: l.ArmB, Backend: l.Backend, Workload: l.Workload, Verdict: gates.VerdictSkip, Line: why}
			}
		}
		if it.entry == nil {
			cfg, err := s.config(f, sp, "")
			if err != nil {
				return nil, err
			}
			if cfg.SuiteCache == "" {
				// Levers whose arm B has the same settings share one suite run.
				cfg.SuiteCache = filepath.Join(f.Out, ".suite-cache")
			}
			it.cfg = cfg
			runnable++
		}
		items = append(items, it)
	}
	if runnable == 0 && leverList != "all" && leverList != "" {
		return nil, CannotRun("--levers: no lever to run (every one is reserved)")
	}
	return items, nil
}

// balance splits the night's specs over the shards by each lever's time in
// a previous nightly: --balance-from, else the previous one in --out, else
// by count. Every shard must read the same source to split alike; the
// summary names it (with its sha256), and the merge refuses shards that
// split differently.
func balance(sh *gates.ShardInfo, items []nightlyItem, from, out, prevPath string, prev *gates.NightlySummary) error {
	for _, it := range items {
		sh.All = append(sh.All, it.spec)
	}
	src, srcPath := prev, prevPath
	if from != "" {
		src, srcPath = nil, from
		if st, err := os.Stat(from); os.IsNotExist(err) {
			// The first night of a pool: the folder the merge keeps the
			// nights in does not exist yet. Every shard sees the same.
			sh.Partition = gates.Partition(partitioned(sh), nil, sh.Count, 0)
			sh.Balance = "by count (--balance-from " + from + " does not exist yet)"
			return nil
		} else if err == nil && st.IsDir() {
			var skipped []string
			srcPath, src, skipped = gates.PreviousNightly(from)
			if src == nil && len(skipped) > 0 {
				return CannotRun("--balance-from %s: no readable nightly summary there%s", from, joinNote(skipped))
			}
		} else {
			b, err := os.ReadFile(from)
			if err != nil {
				return CannotRun("--balance-from: %v", err)
			}
			var ns gates.NightlySummary
			if err := json.Unmarshal(b, &ns); err != nil {
				return CannotRun("--balance-from %s: %v", from, err)
			}
			src = &ns
		}
	}
	times := gates.SecondsByLever(src)
	pre := 0.0
	if !sh.SuiteEveryShard {
		pre = gates.SuiteSecondsOf(src, sh.Count)
	}
	sh.Partition = gates.Partition(partitioned(sh), times, sh.Count, pre)
	switch {
	case len(times) > 0:
		h, _ := harness.FileSHA256(srcPath)
		sh.Balance = fmt.Sprintf("by the lever times of %s (sha256 %.12s)", filepath.Base(srcPath), h)
	case src != nil:
		sh.Balance = fmt.Sprintf("by count (%s records no lever times)", filepath.Base(srcPath))
	case from != "":
		sh.Balance = "by count (no nightly summary in " + from + ")"
	default:
		sh.Balance = "by count (no previous nightly in " + out + ")"
	}
	return nil
}

// partitioned is the night's specs less the control lever, which every
// shard runs.
func partitioned(sh *gates.ShardInfo) []string {
	var out []string
	for _, sp := range sh.All {
		if sp != sh.Control {
			out = append(out, sp)
		}
	}
	return out
}

// withControl makes sure the control lever is one of the night's items (a
// lever that runs, not a SKIP: a control that does not run compares
// nothing).
func (s *setup) withControl(f *Options, items []nightlyItem, spec string) ([]nightlyItem, error) {
	for _, it := range items {
		if it.spec == spec {
			if it.entry != nil {
				return nil, CannotRun("--control %s: %s", spec, it.entry.Line)
			}
			return items, nil
		}
	}
	more, err := s.nightlyItems(f, spec)
	if err != nil {
		return nil, err
	}
	if more[0].entry != nil {
		return nil, CannotRun("--control %s: %s", spec, more[0].entry.Line)
	}
	return append(items, more[0]), nil
}

func joinNote(skipped []string) string {
	if len(skipped) == 0 {
		return ""
	}
	return " (unreadable: " + strings.Join(skipped, "; ") + ")"
}

// nightlyLever runs one lever of the night on its declared workload.
func (s *setup) nightlyLever(ctx context.Context, f *Options, it nightlyItem, models *workloadModels, prog *harness.Progress, cmdline string) gates.NightlyEntry {
	cfg := it.cfg
	e := gates.NightlyEntry{Spec: it.spec, Lever: cfg.Lever.Name, A: cfg.A.Value, B: cfg.B.Value, Backend: cfg.Lever.Backend,
		Workload: strings.TrimSpace(cfg.Lever.Workload)}
	nf := *f
	nf.OnWorkload, nf.Given = true, nil // the nightly runs every lever on its workload
	if err := s.prepare(ctx, &nf, &cfg, models, prog, true); err != nil {
		e.Verdict, e.Line = gates.VerdictCannotRun, fmt.Sprintf("could not set up its workload %q: %v", e.Workload, err)
		return e
	}
	e.PP = cfg.PP
	rec, base := s.runConfig(ctx, cfg, f.Out, cmdline+" # lever "+it.spec+workloadComment(cfg), os.Stderr, time.Time{})
	e.Model, e.ModelSHA256 = rec.Env.Model, rec.Env.ModelSHA256
	if cfg.Model != "" {
		e.Model = cfg.Model
	}
	e.Verdict, e.Line = rec.Verdict, rec.VerdictLine
	if rel, err := filepath.Rel(f.Out, base+".md"); err == nil {
		e.Report = filepath.ToSlash(rel)
	}
	for _, g := range rec.Gates {
		if g.Gate == gates.GateSuite {
			e.SuiteSeconds = g.Wall.Seconds()
		}
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
	return e
}

// suitesForOtherShards is shard 0's share of the device suite: gate 4 of
// every lever the other shards run (with its arm B's settings, through the
// suite cache), kept in the shard's summary for the merge.
func (s *setup) suitesForOtherShards(ctx context.Context, sh *gates.ShardInfo, items []nightlyItem, prog *harness.Progress) {
	own := map[string]bool{}
	for _, sp := range sh.Levers() {
		own[sp] = true
	}
	for _, it := range items {
		if own[it.spec] || it.entry != nil || ctx.Err() != nil {
			continue
		}
		prog.Note("nightly: suite gate of %s for the merge (shard %s runs every lever's suite)", it.spec, sh.Name())
		env := &gates.Env{M: s.m, Probe: s.probe, Progress: prog, HasGPU: s.hasGPU, GPUWhy: s.why}
		t0 := time.Now()
		r := gates.Suite(ctx, it.cfg, env)
		r.Wall = time.Since(t0)
		sh.Suites = append(sh.Suites, gates.LeverSuite{Lever: it.cfg.Lever.Name, B: it.cfg.B.Value, Result: r})
	}
}

// writeNightly writes the summary's .json and .md (final false: a partial
// one, rewritten after every lever).
func writeNightly(path string, sum *gates.NightlySummary, final bool) error {
	if !final {
		sum.Decide()
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return &Error{2, err}
	}
	tmp := path + ".json.tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return &Error{2, fmt.Errorf("nightly: %w", err)}
	}
	if err := os.Rename(tmp, path+".json"); err != nil {
		return &Error{2, fmt.Errorf("nightly: %w", err)}
	}
	md := report.NightlyMarkdown(sum, sum.CommandLine)
	if final && sum.Shard == nil {
		// The night's place in the history: its plots and open alerts.
		sec, err := NightlyHistory(sum, filepath.Dir(path))
		if err != nil {
			sec = fmt.Sprintf("\n## History\n\nNot drawn: %v.\n", err)
		}
		md += sec
	}
	if err := os.WriteFile(path+".md", []byte(md), 0o644); err != nil {
		return &Error{2, fmt.Errorf("nightly: %w", err)}
	}
	return nil
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
	if wl.Depth > 0 && !w.f.changed("depth") {
		cfg.Depth = wl.Depth
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
	if cfg.Depth > 0 {
		c += fmt.Sprintf(" --depth %d", cfg.Depth)
	}
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

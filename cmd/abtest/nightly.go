package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/report"
	"github.com/minfer-go/minfer/harness/stats"
)

// VerdictSkip is a nightly lever that was not run (a CUDA lever on a machine
// without a device); it is never counted as PASS.
const VerdictSkip = "SKIP"

// VerdictCannotRun is a nightly lever whose run could not be set up (its
// workload, its model's needs).
const VerdictCannotRun = "COULD NOT RUN"

// nightlyEntry is one lever's line of the nightly summary.
type nightlyEntry struct {
	Lever   string `json:"lever"`
	A       string `json:"a"`
	B       string `json:"b"`
	Backend string `json:"backend"`
	// Workload is the lever's declared workload ("" the nightly's default);
	// Model, ModelSHA256 and PP are what the lever ran on (Model "" and
	// the sha unset when it did not run). A summary from before per-lever
	// workloads has none of them: every lever ran the summary's model.
	Workload    string        `json:"workload,omitempty"`
	Model       string        `json:"model,omitempty"`
	ModelSHA256 string        `json:"model_sha256,omitempty"`
	PP          int           `json:"pp,omitempty"`
	Verdict     string        `json:"verdict"`
	Line        string        `json:"line"`
	Report      string        `json:"report,omitempty"` // relative to the summary
	PPA         []float64     `json:"pp_a,omitempty"`
	PPB         []float64     `json:"pp_b,omitempty"`
	TGA         []float64     `json:"tg_a,omitempty"`
	TGB         []float64     `json:"tg_b,omitempty"`
	PPRatio     harness.Num   `json:"pp_ratio"` // median per-round B/A
	TGRatio     harness.Num   `json:"tg_ratio"`
	Against     []nightlyDiff `json:"against_previous,omitempty"`
}

// nightlyDiff is arm B of one metric against the previous nightly's arm B.
type nightlyDiff struct {
	Metric  string      `json:"metric"`
	Ratio   harness.Num `json:"ratio"` // median(now) / median(previous)
	Lo      harness.Num `json:"lo"`
	Hi      harness.Num `json:"hi"`
	Verdict string      `json:"verdict"` // ~, faster, slower, ?, not comparable
	// Note says why a metric is not comparable (the lever ran another
	// model or pp the previous night).
	Note string `json:"note,omitempty"`
}

// VerdictNotComparable: the lever ran another workload (model or pp) in the
// previous nightly; its speeds are not compared, so neither a regression
// nor an improvement.
const VerdictNotComparable = "not comparable"

type nightlySummary struct {
	Date        string  `json:"date"`
	Machine     string  `json:"machine"` // GPU name, else CPU model
	Commit      string  `json:"commit"`
	Model       string  `json:"model"` // the default workload's model
	ModelSHA256 string  `json:"model_sha256"`
	PP          int     `json:"pp,omitempty"` // the default workload's prefill (0: a summary from before it was recorded)
	TG          int     `json:"tg,omitempty"`
	Threshold   float64 `json:"threshold"`
	// Verdict is the night's, by GATES.md's precedence over its levers
	// (FAIL, could not run, INCOMPLETE, INCONCLUSIVE, PARTIAL, PASS), a
	// regression counting as a FAIL; Complete false when interrupted.
	Verdict  string `json:"verdict"`
	Complete bool   `json:"complete"`
	// Suite is kept for summaries from before each lever ran its own suite
	// gate (through the suite cache); new summaries leave it empty.
	Suite       *gates.Result  `json:"suite,omitempty"`
	Entries     []nightlyEntry `json:"entries"`
	Previous    string         `json:"previous,omitempty"` // the summary compared against
	PrevNote    string         `json:"previous_note,omitempty"`
	Regressions []string       `json:"regressions,omitempty"`
}

func newNightlyCmd() *cobra.Command {
	var f runFlags
	var leverList, threshold string
	cmd := &cobra.Command{
		Use:   "nightly [--levers all|L1,L2] [--out reports/nightly]",
		Short: "every lever with all five gates, then one summary page (verdicts, speed, regressions against the previous nightly)",
		Long: "Every lever with arms, all five gates each (the suite through a cache: levers whose arm B has the same\n" +
			"settings share one suite run), then one summary page. Exit codes as abtest run: 0 every lever PASS,\n" +
			"1 a FAIL or a regression, 2 a lever could not run, 3 INCONCLUSIVE / PARTIAL / INCOMPLETE / SKIP.\n" +
			"A lever runs on --model and --pp unless it declares a workload (`minfer levers`: WORKLOAD): then on\n" +
			"that model (synthesized once into --synth-dir with --seed) and/or pp. Parity and greedy run on\n" +
			"--correctness-model fitted to each lever's model: quantized to its weight type (once, into\n" +
			"--synth-dir), or not used for another architecture (then on the lever's model itself).\n" +
			"Arm B is compared with the previous nightly's only on the same workload (model sha256 and pp);\n" +
			"a lever whose workload changed is \"not comparable\", never a regression.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			th, err := report.ParseThreshold(threshold)
			if err != nil {
				return exitError{2, err}
			}
			sum, path, err := runNightly(cmd.Context(), &f, leverList, th, strings.Join(os.Args, " "))
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: nightly %s: summary %s.md\n", sum.Verdict, path)
			if code := sum.exitCode(); code != 0 {
				return exitError{code, nil}
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&leverList, "levers", "all", "all (every lever with arms), or a comma-separated list (NAME or NAME=B)")
	cmd.Flags().StringVar(&threshold, "threshold", "2%", "smallest change against the previous nightly that counts as a regression")
	_ = cmd.Flags().Set("out", "reports/nightly")
	return cmd
}

// decide sets the night's verdict by GATES.md's precedence.
func (s *nightlySummary) decide() {
	has := map[string]bool{}
	for _, e := range s.Entries {
		has[e.Verdict] = true
	}
	switch {
	case has[gates.VerdictFail] || has[gates.VerdictNotCaught] || len(s.Regressions) > 0 || s.Suite != nil && s.Suite.Status == gates.Fail:
		s.Verdict = gates.VerdictFail
	case has[VerdictCannotRun]:
		s.Verdict = VerdictCannotRun
	case !s.Complete || has[gates.VerdictIncomplete]:
		s.Verdict = gates.VerdictIncomplete
	case has[gates.VerdictInconclusive] || has[VerdictSkip]:
		s.Verdict = gates.VerdictInconclusive
	case has[gates.VerdictPartial]:
		s.Verdict = gates.VerdictPartial
	default:
		s.Verdict = gates.VerdictPass
	}
}

// exitCode is abtest run's code for the night's verdict.
func (s *nightlySummary) exitCode() int {
	if s.Verdict == VerdictCannotRun {
		return gates.ExitCannotRun
	}
	return gates.ExitCodeOf(s.Verdict)
}

func runNightly(ctx context.Context, f *runFlags, leverList string, threshold float64, cmdline string) (*nightlySummary, string, error) {
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
	var reserved []nightlyEntry
	kept := specs[:0]
	for _, sp := range specs {
		name, _, _ := strings.Cut(sp, "=")
		if l, err := harness.FindLever(s.levers, name); err == nil && l.Reserved != "" {
			reserved = append(reserved, nightlyEntry{Lever: l.Name, Backend: l.Backend, Verdict: VerdictSkip, Line: "reserved, switches nothing in this build: " + l.Reserved})
			continue
		}
		kept = append(kept, sp)
	}
	specs = kept
	if len(specs) == 0 {
		return nil, "", cannotRun("--levers: no lever to run")
	}
	// A lever whose path does not exist on this backend is a SKIP with its
	// reason (abtest run refuses it).
	var skipped []nightlyEntry
	kept = specs[:0]
	for _, sp := range specs {
		name, _, _ := strings.Cut(sp, "=")
		if l, err := harness.FindLever(s.levers, name); err == nil {
			if why := skipCUDA(l, s, f.device); why != "" {
				skipped = append(skipped, nightlyEntry{Lever: l.Name, A: l.ArmA, B: l.ArmB, Backend: l.Backend, Workload: l.Workload, Verdict: VerdictSkip, Line: why})
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
	prevPath, prev, prevSkipped := previousNightly(f.out)
	sum := &nightlySummary{Date: time.Now().UTC().Format("2006-01-02T150405"), Threshold: threshold, PP: f.pp, TG: f.tg}
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
			cfg.SuiteCache = filepath.Join(f.out, ".suite-cache")
		}
		e := nightlyEntry{Lever: cfg.Lever.Name, A: cfg.A.Value, B: cfg.B.Value, Backend: cfg.Lever.Backend,
			Workload: strings.TrimSpace(cfg.Lever.Workload)}
		nf := *f
		nf.onWorkload, nf.fl = true, nil // the nightly runs every lever on its workload
		if err := s.prepare(ctx, &nf, &cfg, models, prog, true); err != nil {
			e.Verdict, e.Line = VerdictCannotRun, fmt.Sprintf("could not set up its workload %q: %v", e.Workload, err)
			sum.Entries = append(sum.Entries, e)
			continue
		}
		e.PP = cfg.PP
		rec, base := s.runConfig(ctx, cfg, f.out, cmdline+" # lever "+specs[i]+workloadComment(cfg), os.Stderr, time.Time{})
		e.Model, e.ModelSHA256 = rec.Env.Model, rec.Env.ModelSHA256
		if cfg.Model != "" {
			e.Model = cfg.Model
		}
		e.Verdict, e.Line = rec.Verdict, rec.VerdictLine
		if rel, err := filepath.Rel(f.out, base+".md"); err == nil {
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
	sum.compare(prevPath, prev)
	if len(prevSkipped) > 0 {
		note := "unreadable newer nightly results skipped (" + strings.Join(prevSkipped, "; ") + ")"
		if sum.PrevNote != "" {
			note = sum.PrevNote + "; " + note
		}
		sum.PrevNote = note
	}
	sum.decide()
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return nil, "", exitError{2, fmt.Errorf("nightly: --out: %w", err)}
	}
	path := filepath.Join(f.out, "nightly-"+sum.Date)
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return nil, "", exitError{2, err}
	}
	if err := os.WriteFile(path+".json", b, 0o644); err != nil {
		return nil, "", exitError{2, err}
	}
	if err := os.WriteFile(path+".md", []byte(nightlyMarkdown(sum, cmdline)), 0o644); err != nil {
		return nil, "", exitError{2, err}
	}
	return sum, path, nil
}

// workloadModels gives a lever its declared workload (abtest nightly, and
// abtest run --workload): its own model, synthesized once per run into
// --synth-dir (synthModel, the cache abtest run and perf use), and its own
// pp.
type workloadModels struct {
	s     *setup
	f     *runFlags
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
		if path, _, err = synthModel(ctx, w.s.m.R, w.f.synthDir, wl.Shape, wl.Type, w.f.seed); err != nil {
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

// previousNightly is the newest readable nightly-*.json in dir. The newer
// files it could not read or parse come back in skipped (name: reason), so
// the summary says it compared against an older run instead of doing so
// silently.
func previousNightly(dir string) (path string, prev *nightlySummary, skipped []string) {
	ms, _ := filepath.Glob(filepath.Join(dir, "nightly-*.json")) // the pattern is fixed: no ErrBadPattern
	sort.Strings(ms)
	for i := len(ms) - 1; i >= 0; i-- {
		b, err := os.ReadFile(ms[i])
		if err == nil {
			var s nightlySummary
			if err = json.Unmarshal(b, &s); err == nil {
				return ms[i], &s, skipped
			}
		}
		skipped = append(skipped, filepath.Base(ms[i])+": "+err.Error())
	}
	return "", nil, skipped
}

// compare sets each lever's arm-B change against the previous nightly and
// lists the significant slowdowns beyond the threshold. Like is compared
// with like: the same lever and arm B on the same workload (model sha256 and
// pp); a lever whose workload changed is "not comparable", never a
// regression or an improvement.
func (s *nightlySummary) compare(prevPath string, prev *nightlySummary) {
	if prev == nil {
		s.PrevNote = "no previous nightly result in the output folder: nothing to compare against"
		return
	}
	s.Previous = filepath.Base(prevPath)
	if prev.Machine != s.Machine {
		s.PrevNote = fmt.Sprintf("previous nightly %s ran on %q, this one on %q: speeds not compared", prev.Date, prev.Machine, s.Machine)
		return
	}
	if prev.ModelSHA256 != s.ModelSHA256 {
		s.PrevNote = fmt.Sprintf("the default model changed (previous nightly %s: sha256 %.12s, now %.12s): the levers on it are not comparable",
			prev.Date, prev.ModelSHA256, s.ModelSHA256)
	}
	for i := range s.Entries {
		e := &s.Entries[i]
		for _, p := range prev.Entries {
			if p.Lever != e.Lever || p.B != e.B {
				continue
			}
			if len(e.PPB)+len(e.TGB) == 0 || len(p.PPB)+len(p.TGB) == 0 {
				continue // one side did not run: nothing to compare
			}
			if why := s.notComparable(prev, p, *e); why != "" {
				e.Against = append(e.Against, nightlyDiff{Metric: "pp, tg", Ratio: harness.Num(math.NaN()), Lo: harness.Num(math.NaN()), Hi: harness.Num(math.NaN()),
					Verdict: VerdictNotComparable, Note: why})
				continue
			}
			for _, m := range []struct {
				name       string
				base, head []float64
			}{{"pp", p.PPB, e.PPB}, {"tg", p.TGB, e.TGB}} {
				if len(m.base) == 0 || len(m.head) == 0 {
					continue
				}
				d := stats.CompareMedians(m.base, m.head, s.Threshold)
				e.Against = append(e.Against, nightlyDiff{Metric: m.name, Ratio: harness.Num(d.Ratio), Lo: harness.Num(d.Lo), Hi: harness.Num(d.Hi), Verdict: d.Verdict})
				if d.Verdict == stats.VerdictSlower {
					s.Regressions = append(s.Regressions, fmt.Sprintf("%s=%s %s: arm B %.4fx of %s [%.4f, %.4f]", e.Lever, e.B, m.name, d.Ratio, prev.Date, d.Lo, d.Hi))
				}
			}
		}
	}
}

// entryWorkload is the model sha256 and pp a lever ran on; known is false
// for an entry of a summary from before they were recorded (it ran the
// summary's model at an unrecorded pp).
func entryWorkload(sum *nightlySummary, e nightlyEntry) (sha string, pp int, known bool) {
	sha, pp = e.ModelSHA256, e.PP
	if sha == "" {
		sha = sum.ModelSHA256
	}
	if pp == 0 {
		pp = sum.PP
	}
	return sha, pp, pp > 0
}

// notComparable says why arm B now (e) and then (p, of prev) ran different
// workloads ("" when they ran the same). An entry of a summary from before
// workloads were recorded is taken as the default workload: before them
// every lever ran it, so it compares with a lever that still runs the
// default model and pp, and with no lever that declares its own.
func (s *nightlySummary) notComparable(prev *nightlySummary, p, e nightlyEntry) string {
	desc := func(model, sha string, pp int) string {
		name := "?"
		if model != "" {
			name = filepath.Base(model)
		}
		ps := "pp not recorded"
		if pp > 0 {
			ps = fmt.Sprintf("pp%d", pp)
		}
		return fmt.Sprintf("%s (sha256 %.12s) %s", name, sha, ps)
	}
	pm := p.Model
	if pm == "" {
		pm = prev.Model
	}
	em := e.Model
	if em == "" {
		em = s.Model
	}
	psha, ppp, pknown := entryWorkload(prev, p)
	esha, epp, _ := entryWorkload(s, e)
	if !pknown {
		if e.Workload == "" && psha == esha && epp == s.PP {
			return ""
		}
		return fmt.Sprintf("workload changed: then %s (before per-lever workloads), now %s", desc(pm, psha, ppp), desc(em, esha, epp))
	}
	if psha != esha || ppp != epp {
		return fmt.Sprintf("workload changed: then %s, now %s", desc(pm, psha, ppp), desc(em, esha, epp))
	}
	return ""
}

func med(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Summary(xs).Median
}

func num(x float64, format string) string {
	if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
		return "-"
	}
	return fmt.Sprintf(format, x)
}

// entryWorkloadCell names the model (file name, sha256 prefix) and pp a
// lever ran on, with its declared workload when it has one.
func entryWorkloadCell(e nightlyEntry) string {
	c := "-"
	if e.Model != "" {
		c = fmt.Sprintf("%s (%.12s)", filepath.Base(e.Model), e.ModelSHA256)
	}
	if e.PP > 0 {
		c += fmt.Sprintf(" / pp%d", e.PP)
	}
	if e.Workload != "" {
		c += " [declared: " + e.Workload + "]"
	}
	return c
}

func nightlyMarkdown(s *nightlySummary, cmdline string) string {
	var b strings.Builder
	count := map[string]int{}
	for _, e := range s.Entries {
		count[e.Verdict]++
	}
	fmt.Fprintf(&b, "**Nightly: %s** — %d levers: %d PASS, %d FAIL, %d INCONCLUSIVE (a gate could not decide), %d PARTIAL, %d SKIP (not run; never counted as PASS), %d other; %d regressions against the previous nightly\n\n",
		s.Verdict, len(s.Entries), count[gates.VerdictPass], count[gates.VerdictFail], count[gates.VerdictInconclusive], count[gates.VerdictPartial], count[VerdictSkip],
		len(s.Entries)-count[gates.VerdictPass]-count[gates.VerdictFail]-count[gates.VerdictInconclusive]-count[gates.VerdictPartial]-count[VerdictSkip], len(s.Regressions))
	fmt.Fprintf(&b, "# abtest nightly %s\n\n", s.Date)
	fmt.Fprintf(&b, "Machine %s, commit %s, model %s (sha256 %s), pp%d tg%d: the default workload; a lever that declares its own (`minfer levers`: WORKLOAD) runs on that, as its row says.\n\n",
		s.Machine, s.Commit, s.Model, s.ModelSHA256, s.PP, s.TG)
	fmt.Fprintf(&b, "Every lever ran all five gates; the suite gate ran through a cache, so levers whose arm B has the same settings share one run (each report says so).\n\n")

	fmt.Fprintf(&b, "## Verdict per lever\n\n")
	var rows [][]string
	for _, e := range s.Entries {
		link := "-"
		if e.Report != "" {
			link = fmt.Sprintf("[report](%s)", e.Report)
		}
		rows = append(rows, []string{e.Lever, e.A + " → " + e.B, e.Backend, entryWorkloadCell(e), "**" + e.Verdict + "**", e.Line, link})
	}
	fmt.Fprintf(&b, "%s\n", report.Table([]string{"lever", "A → B", "backend", "model (sha256) / pp", "verdict", "verdict line / reason", "report"}, rows))

	fmt.Fprintf(&b, "## Speed (tok/s, median over the interleaved rounds; B/A is the median per-round ratio)\n\n")
	rows = nil
	for _, e := range s.Entries {
		if len(e.PPB) == 0 && len(e.TGB) == 0 {
			continue
		}
		rows = append(rows, []string{e.Lever, entryWorkloadCell(e), num(med(e.PPA), "%.1f"), num(med(e.PPB), "%.1f"), num(float64(e.PPRatio), "%.4f"),
			num(med(e.TGA), "%.2f"), num(med(e.TGB), "%.2f"), num(float64(e.TGRatio), "%.4f"), num(1000/med(e.TGB), "%.4f")})
	}
	fmt.Fprintf(&b, "%s\n", report.Table([]string{"lever", "model (sha256) / pp", "pp A", "pp B", "pp B/A", "tg A", "tg B", "tg B/A", "decode ms/token B"}, rows))

	fmt.Fprintf(&b, "## Against the previous nightly (arm B now / arm B then; threshold %.1f%%)\n\n", s.Threshold*100)
	if s.PrevNote != "" {
		fmt.Fprintf(&b, "%s.\n\n", s.PrevNote)
	}
	rows = nil
	for _, e := range s.Entries {
		for _, d := range e.Against {
			v := d.Verdict
			switch v {
			case stats.VerdictSlower:
				v = "**REGRESSION (slower)**"
			case VerdictNotComparable:
				v = "not comparable: " + d.Note
			}
			rows = append(rows, []string{e.Lever, d.Metric, num(float64(d.Ratio), "%.4f"), fmt.Sprintf("[%s, %s]", num(float64(d.Lo), "%.4f"), num(float64(d.Hi), "%.4f")), v})
		}
	}
	if s.Previous != "" {
		fmt.Fprintf(&b, "Previous: %s.\n\n", s.Previous)
		if len(rows) > 0 {
			fmt.Fprintf(&b, "%s\n", report.Table([]string{"lever", "metric", "now / previous", "95% CI", "verdict"}, rows))
		}
	}
	if len(s.Regressions) > 0 {
		fmt.Fprintf(&b, "Regressions:\n\n")
		for _, r := range s.Regressions {
			fmt.Fprintf(&b, "- %s\n", r)
		}
		fmt.Fprintf(&b, "\n")
	}
	fmt.Fprintf(&b, "## Reproduce\n\n```sh\n%s\n```\n", cmdline)
	return b.String()
}

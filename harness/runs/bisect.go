package runs

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
	"github.com/minfer-go/minfer/report"
)

// BisectOptions are the settings of `abtest bisect`.
type BisectOptions struct {
	Options
	Good, Bad string
	Workload  string // embedded, or SHAPE:TYPE[@ppN]
	Mode      string // auto, speed, output (--lever: the lever's gain)
	Metric    string // auto, pp, tg
	Threshold string // smallest slowdown (or loss of gain) that counts
	Repo      string // the git repository (default ".")
	// Builds holds one prebuilt folder per commit (named by the commit's
	// hash or a prefix of at least 7), for a machine without Go; its
	// commits.txt lists the commits when there is no repository.
	Builds   string
	BuildDir string // where commits are built (default OUT/.builds)
	// StepRounds are a probe's first rounds; an undecided probe adds
	// StepRounds/2 more until MaxRounds.
	StepRounds, MaxRounds int
}

// bisector is one bisect's state: its setup, ends, builds and measure.
type bisector struct {
	o       *BisectOptions
	s       *setup
	run     *gates.BisectRun
	builds  map[string]string // commit -> folder ("" when untestable)
	legacy  map[string]bool   // commit -> its bench takes the format as -o
	why     map[string]string // commit -> why untestable
	model   string
	pp      int
	backend string
	thr     float64
	lever   harness.Lever
	prog    *harness.Progress
	// the ends' median log B/A ratio (lever mode), set by the reproduction
	goodLog, badLog float64
	// the ends' greedy tokens per prompt (output mode)
	goodTok, badTok [][]int32
}

// Bisect finds the first commit between --good and --bad at which the
// workload got slower, the lever's gain vanished, or greedy output changed,
// and writes its report under OUT.
func Bisect(ctx context.Context, o *BisectOptions, cmdline string, progressTo *os.File) (*gates.BisectRun, string, error) {
	if o.Good == "" || o.Bad == "" {
		return nil, "", CannotRun("bisect: --good and --bad are required")
	}
	thr, err := report.ParseThreshold(o.Threshold)
	if err != nil {
		return nil, "", CannotRun("--threshold: %v", err)
	}
	switch o.Metric {
	case "auto", "pp", "tg":
	default:
		return nil, "", CannotRun("--metric %q: want auto, pp or tg", o.Metric)
	}
	switch o.Mode {
	case "auto", gates.BisectSpeed, gates.BisectOutput:
	default:
		return nil, "", CannotRun("--mode %q: want auto, speed or output (a lever's gain: --lever)", o.Mode)
	}
	if o.Rounds < 3 || o.PP < 1 || o.TG < 1 || o.Reps < 1 || o.GenN < 1 || o.BenchWarm < 1 || o.Timeout < 0 {
		return nil, "", CannotRun("bisect: --rounds >= 3, and --pp, --tg, --reps, --gen-n, --bench-warmup-ms positive")
	}
	if o.StepRounds < 3 || o.MaxRounds < o.StepRounds {
		return nil, "", CannotRun("--step-rounds %d / --max-rounds %d: want 3 <= step rounds <= max rounds", o.StepRounds, o.MaxRounds)
	}
	if o.BuildDir == "" {
		o.BuildDir = filepath.Join(o.Out, ".builds")
	}
	commits, subjects, err := bisectCommits(ctx, o.Repo, o.Builds, o.Good, o.Bad)
	if err != nil {
		return nil, "", CannotRun("bisect: %v", err)
	}
	prog := harness.NewProgress(progressTo, 0)
	b := &bisector{o: o, thr: thr, builds: map[string]string{}, legacy: map[string]bool{}, why: map[string]string{}, prog: prog}
	b.run = &gates.BisectRun{Schema: 1, Started: time.Now(), CommandLine: cmdline, Good: o.Good, Bad: o.Bad, Commits: commits, Subjects: subjects,
		Workload: o.Workload, Threshold: thr, Builds: b.builds}
	good, bad := commits[0], commits[len(commits)-1]
	prog.Note("bisect: %d commits after %s up to %s", len(commits)-1, gates.Short(good), gates.Short(bad))
	for _, c := range []string{good, bad} {
		if dir := b.build(ctx, c); dir == "" {
			return nil, "", CannotRun("bisect: the end %s cannot be tested: %s", gates.Short(c), b.why[c])
		}
	}
	if err := b.setUp(ctx); err != nil {
		return nil, "", err
	}
	if err := b.reproduce(ctx, good, bad); err != nil {
		return nil, "", err
	}
	base := filepath.Join(o.Out, fmt.Sprintf("%s-%s-%s", b.run.Started.UTC().Format("2006-01-02T150405"), gates.Short(good), gates.Short(bad)))
	complete := true
	if b.run.Reproduce.Outcome == gates.LikeBad {
		complete = b.search(ctx, commits)
	}
	b.run.Finished = time.Now()
	b.run.Decide(complete)
	if err := writeBisect(base, b.run); err != nil {
		return b.run, base, &Error{2, err}
	}
	return b.run, base, nil
}

// bisectCommits lists good and the first-parent commits after it up to
// bad, oldest first, with their subjects: from the repository, else from
// the builds folder's commits.txt ("HASH<TAB>SUBJECT" per line, oldest
// first), which a machine without the repository carries.
func bisectCommits(ctx context.Context, repo, builds, good, bad string) ([]string, []string, error) {
	if repo == "" {
		repo = "."
	}
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := git("rev-parse", "--git-dir"); err != nil {
		if builds == "" {
			return nil, nil, fmt.Errorf("%s is not a git repository (and no --builds with a commits.txt): %v", repo, err)
		}
		return commitsFile(filepath.Join(builds, "commits.txt"), good, bad)
	}
	g, err := git("rev-parse", "--verify", good+"^{commit}")
	if err != nil {
		return nil, nil, fmt.Errorf("--good %s: %v", good, err)
	}
	bd, err := git("rev-parse", "--verify", bad+"^{commit}")
	if err != nil {
		return nil, nil, fmt.Errorf("--bad %s: %v", bad, err)
	}
	if _, err := git("merge-base", "--is-ancestor", g, bd); err != nil {
		return nil, nil, fmt.Errorf("--good %s is not an ancestor of --bad %s", good, bad)
	}
	gs, _ := git("log", "-1", "--format=%s", g)
	out, err := git("log", "--first-parent", "--reverse", "--format=%H%x09%s", g+".."+bd)
	if err != nil {
		return nil, nil, err
	}
	commits, subjects := []string{g}, []string{gs}
	for _, l := range strings.Split(out, "\n") {
		if h, s, ok := strings.Cut(l, "\t"); ok {
			commits, subjects = append(commits, h), append(subjects, s)
		}
	}
	if len(commits) < 2 || commits[len(commits)-1] != bd {
		return nil, nil, fmt.Errorf("no first-parent line from %s to %s", good, bad)
	}
	return commits, subjects, nil
}

func commitsFile(path, good, bad string) ([]string, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var commits, subjects []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		h, s, _ := strings.Cut(strings.TrimSpace(sc.Text()), "\t")
		if h != "" {
			commits, subjects = append(commits, h), append(subjects, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	find := func(rev string) int {
		for i, c := range commits {
			if len(rev) >= 7 && strings.HasPrefix(c, rev) {
				return i
			}
		}
		return -1
	}
	gi, bi := find(good), find(bad)
	if gi < 0 || bi < 0 || gi >= bi {
		return nil, nil, fmt.Errorf("%s: --good %s and --bad %s must both be listed (hashes, at least 7 characters), good first", path, good, bad)
	}
	return commits[gi : bi+1], subjects[gi : bi+1], nil
}

// build is the folder of commit c's build ("" when it cannot be tested;
// why says so): a prebuilt folder from --builds, else a build of the commit
// in a clean checkout (go build, and the kernels where nvcc is present),
// kept in BuildDir for the next bisect. A build whose stamp names another
// commit, or a modified tree, is refused.
func (b *bisector) build(ctx context.Context, c string) string {
	if dir, ok := b.builds[c]; ok {
		return dir
	}
	dir, why := b.buildDir(ctx, c)
	if why == "" {
		st, err := prBuild(dir)
		switch {
		case err != nil:
			why = err.Error()
		case st.Commit == "":
			why = "its minfer has no VCS build stamp: nothing proves it is this commit"
		case st.Commit != c:
			why = "its minfer's build stamp says commit " + st.Commit
		}
	}
	if why == "" {
		// A build from before `bench --format` takes the format as -o:
		// asked once, from its help, and said in the report.
		if has, err := benchTakesFormat(ctx, filepath.Join(dir, "minfer")); err != nil {
			why = err.Error()
		} else if !has {
			b.legacy[c] = true
			b.prog.Note("bisect: %s's bench predates --format: its format is given as -o json", gates.Short(c))
		}
	}
	if why != "" {
		b.why[c], dir = why, ""
		b.prog.Note("bisect: %s skipped: %s", gates.Short(c), why)
	}
	b.builds[c] = dir
	return dir
}

func (b *bisector) buildDir(ctx context.Context, c string) (string, string) {
	if b.o.Builds != "" {
		es, err := os.ReadDir(b.o.Builds)
		if err != nil {
			return "", err.Error()
		}
		for _, e := range es {
			if e.IsDir() && (e.Name() == c || len(e.Name()) >= 7 && strings.HasPrefix(c, e.Name())) {
				return filepath.Join(b.o.Builds, e.Name()), ""
			}
		}
		return "", "no prebuilt folder for it in " + b.o.Builds
	}
	dir, err := filepath.Abs(filepath.Join(b.o.BuildDir, c))
	if err != nil {
		return "", err.Error()
	}
	if st, ok := harness.ReadVCSStamp(filepath.Join(dir, "minfer")); ok && st.Revision == c && !st.Modified {
		return dir, "" // built by an earlier bisect
	}
	b.prog.Note("bisect: building %s in a clean checkout", gates.Short(c))
	wt, err := os.MkdirTemp("", "abtest-bisect-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(wt)
	repo := b.o.Repo
	if repo == "" {
		repo = "."
	}
	// A shared local clone, not a git worktree: go build stamps the
	// commit only where .git is a directory.
	for _, args := range [][]string{{"clone", "-q", "--shared", "--no-checkout", repo, wt}, {"-C", wt, "checkout", "-q", "--detach", c}} {
		if out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
			return "", fmt.Sprintf("git %s: %v: %s", args[0], err, lastLine(out))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err.Error()
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=true", "-o", filepath.Join(dir, "minfer"), "./cmd/minfer") // -buildvcs: GOFLAGS may turn it off
	cmd.Dir = wt
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Sprintf("does not build (go build ./cmd/minfer: %v: %s)", err, lastLine(out))
	}
	script := filepath.Join(wt, "scripts", "build-kernels.sh")
	if _, err := os.Stat(script); err == nil && gates.FindTool("nvcc") != "" {
		k := exec.CommandContext(ctx, script, filepath.Join(dir, "minfer-kernels.fatbin"))
		k.Dir = wt
		if out, err := k.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Sprintf("its kernels do not build (%s: %v: %s)", "scripts/build-kernels.sh", err, lastLine(out))
		}
	}
	return dir, ""
}

// formatFlag finds bench's --format in its help (cobra's "--format", Go
// flag's "-format").
var formatFlag = regexp.MustCompile(`(?m)(^|\s)--?format\b`)

// benchTakesFormat asks a minfer build's `bench --help` whether its bench
// has --format (a build from before it takes the format as -o json: bisect's
// old commits, abtest perf's base). A help that does not run is an error,
// never a guess.
func benchTakesFormat(ctx context.Context, bin string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "bench", "--help").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("minfer bench --help: %v: %s", err, lastLine(out))
	}
	return formatFlag.Match(out), nil
}

func lastLine(out []byte) string {
	ls := strings.Split(strings.TrimSpace(string(out)), "\n")
	return ls[len(ls)-1]
}

// setUp reads the registry, probes the machine and places the workload.
func (b *bisector) setUp(ctx context.Context) error {
	// The registry, the probes and the synthesized workload come from
	// abtest's own minfer (--minfer, else beside abtest): the ends may be
	// builds from before today's command line.
	opts := b.o.Options
	s, err := newSetup(ctx, &opts)
	if err != nil {
		return err
	}
	b.s = s
	b.backend = s.backend(opts.Device)
	env := s.environment(ctx, gates.Config{})
	b.run.Machine = machine(env)
	wl, embedded, err := parsePRWorkload(b.o.Workload)
	if err != nil {
		return CannotRun("--workload: %v", err)
	}
	cfg := gates.Config{Lever: harness.Lever{}, PP: opts.PP, Model: s.m.Model}
	cfg.Lever.Workload = wl.Raw
	if !embedded {
		wm := &workloadModels{s: s, f: &opts, paths: map[string]string{}, prog: b.prog}
		if err := wm.apply(ctx, &cfg); err != nil {
			return CannotRun("--workload %s: %v", b.o.Workload, err)
		}
	}
	b.model, b.pp = cfg.Model, cfg.PP
	if b.o.Lever != "" {
		name, bval, hasB := strings.Cut(b.o.Lever, "=")
		l, err := harness.FindLever(s.levers, name)
		if err != nil {
			return CannotRun("--lever: %v", err)
		}
		if !l.HasArms() {
			return CannotRun("--lever %s has no arms to compare", name)
		}
		if hasB {
			l.ArmB = bval
		} else if l.NeedsB() {
			return CannotRun("--lever %s: its arm B has no default: give it as --lever %s=B", name, name)
		}
		b.lever = l
		b.run.Mode, b.run.Lever = gates.BisectLever, l.Name+"="+l.ArmB
	}
	return nil
}

// client runs a build's minfer on the workload.
func (b *bisector) client(c string) harness.Minfer {
	m := b.s.m
	m.Bin, m.Model, m.LegacyBench = filepath.Join(b.builds[c], "minfer"), b.model, b.legacy[c]
	return m
}

// armEnv is a build's environment: its kernels file, the in-process
// warmup, and the lever's value when given.
func (b *bisector) armEnv(c, leverValue string) map[string]string {
	env := map[string]string{"MINFER_BENCH_WARMUP_MS": fmt.Sprint(b.o.BenchWarm)}
	if fats, _ := filepath.Glob(filepath.Join(b.builds[c], "*.fatbin")); len(fats) == 1 {
		env["MINFER_KERNELS"], _ = filepath.Abs(fats[0])
	}
	if leverValue != "" {
		env[b.lever.Name] = leverValue
	}
	return env
}

// benchArm is one process kind of an interleaved round.
type benchArm struct {
	label, commit, lever string
}

// sample is one bench process's tok/s (wall and, on CUDA, device).
type sample struct{ pp, tg, ppDev, tgDev float64 }

func (s sample) value(metric, basis string) float64 {
	switch {
	case metric == "pp" && basis == gates.BasisDevice:
		return s.ppDev
	case metric == "pp":
		return s.pp
	case basis == gates.BasisDevice:
		return s.tgDev
	}
	return s.tg
}

// interleave runs n rounds of the arms, each round in a rotated order
// (reversed every other cycle), after one untimed warmup process per arm,
// so drift and position hit every arm alike. out[a][r] is arm a's round r.
func (b *bisector) interleave(ctx context.Context, arms []benchArm, n int, out [][]sample) ([][]sample, error) {
	if out == nil {
		out = make([][]sample, len(arms))
		for _, a := range arms {
			m := b.client(a.commit)
			if _, _, err := m.Bench(ctx, "warmup "+a.label, b.armEnv(a.commit, a.lever), b.pp, b.o.TG, 1); err != nil {
				return nil, fmt.Errorf("%s: %w", a.label, err)
			}
		}
	}
	k := len(arms)
	for r := 0; r < n; r++ {
		round := len(out[0])
		order := make([]int, k)
		for i := range order {
			order[i] = (i + round) % k
		}
		if (round/k)%2 == 1 {
			slices.Reverse(order)
		}
		res := make([]sample, k)
		for _, ai := range order {
			a := arms[ai]
			br, _, err := b.client(a.commit).Bench(ctx, a.label, b.armEnv(a.commit, a.lever), b.pp, b.o.TG, b.o.Reps)
			if err != nil {
				return out, fmt.Errorf("%s: %w", a.label, err)
			}
			var s sample
			if t, ok := br.Test("pp"); ok {
				s.pp = t.Value()
				s.ppDev, _ = t.DeviceValue()
			}
			if t, ok := br.Test("tg"); ok {
				s.tg = t.Value()
				s.tgDev, _ = t.DeviceValue()
			}
			res[ai] = s
		}
		for i := range arms {
			out[i] = append(out[i], res[i])
		}
	}
	return out, nil
}

// basisOf is device time when every sample has it (CUDA), else wall time.
func basisOf(sets ...[]sample) string {
	for _, set := range sets {
		for _, s := range set {
			if !(s.ppDev > 0 && s.tgDev > 0) {
				return gates.BasisWall
			}
		}
	}
	return gates.BasisDevice
}

func values(set []sample, metric, basis string) []float64 {
	out := make([]float64, len(set))
	for i, s := range set {
		out[i] = s.value(metric, basis)
	}
	return out
}

// reproduce runs the ends against each other and decides the mode and the
// metric; a difference it cannot reproduce is not bisected.
func (b *bisector) reproduce(ctx context.Context, good, bad string) error {
	t0 := time.Now()
	if b.run.Mode == "" && b.o.Mode != gates.BisectSpeed {
		step, err := b.outputStep(ctx, good, bad, true)
		if err != nil {
			return &Error{2, fmt.Errorf("bisect: greedy output of the ends: %w", err)}
		}
		if step.Outcome == gates.LikeBad || b.o.Mode == gates.BisectOutput {
			b.run.Mode = gates.BisectOutput
			step.Seconds = time.Since(t0).Seconds()
			b.run.Reproduce = &step
			return nil
		}
	}
	if b.run.Mode == "" {
		b.run.Mode = gates.BisectSpeed
	}
	step, err := b.endsStep(ctx, good, bad, b.o.Metric)
	if err != nil {
		return &Error{2, fmt.Errorf("bisect: the ends' interleaved run: %w", err)}
	}
	step.Seconds = time.Since(t0).Seconds()
	b.run.Reproduce = &step
	b.run.Metric = step.Metric
	return nil
}

// endsStep runs two commits as the ends of one interleaved run: like bad
// when the second is slower (speed) or the lever's gain is smaller (lever)
// by more than the threshold, with the whole 95% interval beyond 1. metric
// auto picks the metric that moved most.
func (b *bisector) endsStep(ctx context.Context, good, bad, metric string) (gates.BisectStep, error) {
	step := gates.BisectStep{Commit: bad, Index: -1}
	metrics := []string{"pp", "tg"}
	if metric != "auto" {
		metrics = []string{metric}
	}
	if b.run.Mode == gates.BisectLever {
		arms := []benchArm{{"good A", good, b.lever.ArmA}, {"good B", good, b.lever.ArmB}, {"bad A", bad, b.lever.ArmA}, {"bad B", bad, b.lever.ArmB}}
		out, err := b.interleave(ctx, arms, b.o.Rounds, nil)
		if err != nil {
			return step, err
		}
		basis := basisOf(out...)
		b.run.Basis = basis
		best := math.Inf(-1)
		for _, m := range metrics {
			gr, _ := stats.Ratios(values(out[0], m, basis), values(out[1], m, basis))
			br, _ := stats.Ratios(values(out[2], m, basis), values(out[3], m, basis))
			var d []float64
			for i := range gr {
				d = append(d, math.Log(gr[i])-math.Log(br[i]))
			}
			med := median(d)
			if med <= best {
				continue
			}
			best = med
			lo, hi, cov := stats.MedianCI(d, gates.BisectConfidence)
			step.Metric, step.Rounds, step.Good, step.Bad = m, len(d), gr, br
			step.Pos = &gates.Position{S: d, Median: med, Lo: lo, Hi: hi, Coverage: cov}
			b.goodLog, b.badLog = median(logs(gr)), median(logs(br))
			gain := func(x float64) string { return fmt.Sprintf("%+.2f%%", (math.Exp(x)-1)*100) }
			if lo > 0 && med >= math.Log1p(b.thr) {
				step.Outcome = gates.LikeBad
				step.Why = fmt.Sprintf("%s's %s gain (%s B/A) is %s at %s and %s at %s: smaller by %s [%.1f%% interval %s, %s], beyond the %.1f%% threshold",
					b.lever.Name, m, basis, gain(b.goodLog), gates.Short(good), gain(b.badLog), gates.Short(bad), gain(med), cov*100, gain(lo), gain(hi), b.thr*100)
			} else {
				step.Outcome = gates.LikeGood
				step.Why = fmt.Sprintf("%s's %s gain (%s B/A) at %s is %s, at %s %s: no loss beyond %.1f%% at %.1f%% confidence (difference %s [%s, %s])",
					b.lever.Name, m, basis, gates.Short(good), gain(b.goodLog), gates.Short(bad), gain(b.badLog), b.thr*100, cov*100, gain(med), gain(lo), gain(hi))
			}
		}
		return step, nil
	}
	out, err := b.interleave(ctx, []benchArm{{"good " + gates.Short(good), good, ""}, {"bad " + gates.Short(bad), bad, ""}}, b.o.Rounds, nil)
	if err != nil {
		return step, err
	}
	basis := basisOf(out...)
	b.run.Basis = basis
	best := -1.0
	for _, m := range metrics {
		g, bd := values(out[0], m, basis), values(out[1], m, basis)
		r, err := stats.Ratios(g, bd)
		if err != nil {
			return step, err
		}
		med := median(r)
		// The metric that moved most, either way: a slowdown is what a
		// bisect is usually for, but which commit made a workload faster
		// is the same search.
		if moved := math.Abs(math.Log(med)); moved <= best {
			continue
		} else {
			best = moved
		}
		lo, hi, cov := stats.MedianCI(r, gates.BisectConfidence)
		step.Metric, step.Rounds, step.Good, step.Bad = m, len(r), g, bd
		step.Pos = &gates.Position{S: logs(r), Median: math.Log(med), Lo: math.Log(lo), Hi: math.Log(hi), Coverage: cov}
		switch {
		case hi < 1 && med <= 1-b.thr:
			step.Outcome = gates.LikeBad
			step.Why = fmt.Sprintf("%s is %.2f%% slower than %s in %s (%s time, median per-round ratio %.4f, %.1f%% interval [%.4f, %.4f]), beyond the %.1f%% threshold",
				gates.Short(bad), (1-med)*100, gates.Short(good), m, basis, med, cov*100, lo, hi, b.thr*100)
		case lo > 1 && med >= 1+b.thr:
			step.Outcome = gates.LikeBad
			step.Why = fmt.Sprintf("%s is %.2f%% faster than %s in %s (%s time, median per-round ratio %.4f, %.1f%% interval [%.4f, %.4f]), beyond the %.1f%% threshold: bisecting the speed-up",
				gates.Short(bad), (med-1)*100, gates.Short(good), m, basis, med, cov*100, lo, hi, b.thr*100)
		default:
			step.Outcome = gates.LikeGood
			step.Why = fmt.Sprintf("%s against %s in %s: median per-round ratio %.4f, %.1f%% interval [%.4f, %.4f]: no change beyond the %.1f%% threshold with confidence",
				gates.Short(bad), gates.Short(good), m, med, cov*100, lo, hi, b.thr*100)
		}
	}
	return step, nil
}

func logs(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 {
			out = append(out, math.Log(x))
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Summary(xs).Median
}

// tokens is a build's greedy output for every prompt.
func (b *bisector) tokens(ctx context.Context, c string) ([][]int32, error) {
	var out [][]int32
	for _, p := range harness.DefaultPrompts() {
		g, _, err := b.client(c).Generate(ctx, "generate "+gates.Short(c)+" "+p.Name, b.armEnv(c, ""), p, b.o.GenN)
		if err != nil {
			return nil, err
		}
		out = append(out, g.IDs)
	}
	return out, nil
}

// outputStep compares commit c's greedy output with the ends' (ends: c is
// the bad end and good the good one, and their outputs are recorded).
func (b *bisector) outputStep(ctx context.Context, good, c string, ends bool) (gates.BisectStep, error) {
	step := gates.BisectStep{Commit: c, Index: -1}
	if ends {
		var err error
		if b.goodTok, err = b.tokens(ctx, good); err != nil {
			return step, err
		}
	}
	tok, err := b.tokens(ctx, c)
	if err != nil {
		return step, err
	}
	if ends {
		b.badTok = tok
	}
	prompts := harness.DefaultPrompts()
	diff := firstDiff(b.goodTok, tok)
	switch {
	case diff < 0:
		step.Outcome, step.Why = gates.LikeGood, fmt.Sprintf("greedy output of all %d prompts (%d tokens each) identical to %s's", len(prompts), b.o.GenN, gates.Short(good))
	case ends:
		step.Outcome, step.Why = gates.LikeBad, fmt.Sprintf("greedy output differs from %s's (prompt %q first)", gates.Short(good), prompts[diff].Name)
	case firstDiff(b.badTok, tok) < 0:
		step.Outcome, step.Why = gates.LikeBad, fmt.Sprintf("greedy output identical to the bad end's, not the good end's (prompt %q differs)", prompts[diff].Name)
	default:
		step.Outcome, step.Why = gates.LikeBad, fmt.Sprintf("greedy output differs from both ends' (prompt %q first): changed since good", prompts[diff].Name)
	}
	return step, nil
}

// firstDiff is the index of the first prompt whose tokens differ (-1: none).
func firstDiff(a, b [][]int32) int {
	for i := range a {
		if i >= len(b) || !slices.Equal(a[i], b[i]) {
			return i
		}
	}
	return -1
}

// probe judges commit c against both ends: more rounds while undecided, up
// to MaxRounds.
func (b *bisector) probe(ctx context.Context, good, bad, c string) (gates.BisectStep, error) {
	step := gates.BisectStep{Commit: c, Metric: b.run.Metric}
	switch b.run.Mode {
	case gates.BisectOutput:
		s, err := b.outputStep(ctx, good, c, false)
		s.Metric = ""
		return s, err
	case gates.BisectLever:
		// The probe's lever gain against the midpoint of the ends'.
		if ls, err := b.client(c).Levers(ctx); err != nil {
			return step, err
		} else if _, err := harness.FindLever(ls, b.lever.Name); err != nil {
			step.Outcome, step.Why = gates.Untestable, "its build has no lever "+b.lever.Name
			return step, nil
		}
		arms := []benchArm{{"probe A", c, b.lever.ArmA}, {"probe B", c, b.lever.ArmB}}
		var out [][]sample
		var err error
		for n := b.o.StepRounds; ; n = min(b.o.StepRounds/2, b.o.MaxRounds-step.Rounds) {
			if out, err = b.interleave(ctx, arms, n, out); err != nil {
				return step, err
			}
			r, _ := stats.Ratios(values(out[0], b.run.Metric, b.run.Basis), values(out[1], b.run.Metric, b.run.Basis))
			pos := gates.RatioPosition(b.goodLog, b.badLog, r)
			step.Outcome, step.Rounds, step.Probe, step.Pos = pos.Judge(), len(r), r, &pos
			if step.Outcome != gates.Unknown || step.Rounds >= b.o.MaxRounds {
				break
			}
		}
		step.Why = fmt.Sprintf("%s gain %+.2f%% (median of %d rounds) against the ends' %+.2f%% and %+.2f%%", b.run.Metric,
			(math.Exp(median(logs(step.Probe)))-1)*100, step.Rounds, (math.Exp(b.goodLog)-1)*100, (math.Exp(b.badLog)-1)*100)
	default:
		arms := []benchArm{{"good", good, ""}, {"probe " + gates.Short(c), c, ""}, {"bad", bad, ""}}
		var out [][]sample
		var err error
		for n := b.o.StepRounds; ; n = min(b.o.StepRounds/2, b.o.MaxRounds-step.Rounds) {
			if out, err = b.interleave(ctx, arms, n, out); err != nil {
				return step, err
			}
			g, p, bd := values(out[0], b.run.Metric, b.run.Basis), values(out[1], b.run.Metric, b.run.Basis), values(out[2], b.run.Metric, b.run.Basis)
			pos := gates.SpeedPosition(g, p, bd)
			step.Outcome, step.Rounds, step.Good, step.Probe, step.Bad, step.Pos = pos.Judge(), len(p), g, p, bd, &pos
			if step.Outcome != gates.Unknown || step.Rounds >= b.o.MaxRounds {
				break
			}
		}
		step.Why = fmt.Sprintf("%s median %.4g tok/s against good %.4g and bad %.4g in the same %d rounds", b.run.Metric, median(step.Probe), median(step.Good), median(step.Bad), step.Rounds)
	}
	p := step.Pos
	step.Why += fmt.Sprintf("; distance from the midpoint toward good %+.4f [%.1f%% interval %+.4f, %+.4f]", p.Median, p.Coverage*100, p.Lo, p.Hi)
	if step.Outcome == gates.Unknown {
		step.Why += fmt.Sprintf(": undecided at the %d-round cap", b.o.MaxRounds)
	}
	return step, nil
}

// search bisects the commits; false when interrupted.
func (b *bisector) search(ctx context.Context, commits []string) bool {
	good, bad := commits[0], commits[len(commits)-1]
	bis := gates.NewBisection(commits)
	eta := harness.ETA{Start: time.Now()}
	setRange := func() (lg, fb int, between []int) {
		lg, fb, between = bis.Range()
		b.run.LastGood, b.run.FirstBad, b.run.Between = commits[lg], commits[fb], nil
		for _, k := range between {
			b.run.Between = append(b.run.Between, commits[k])
		}
		return lg, fb, between
	}
	for {
		i, ok := bis.Next()
		if !ok {
			break
		}
		if ctx.Err() != nil {
			setRange() // an interrupted search still says where it stood
			return false
		}
		c := commits[i]
		pending := make([]float64, bis.StepsLeft())
		b.prog.Note("bisect: step %d, %s (%s); %d commits left in the range, about %d steps; %s", len(b.run.Steps)+1, gates.Short(c), b.run.Subjects[i],
			len(b.rangeLeft(bis)), len(pending), eta.Line(pending))
		t0 := time.Now()
		var step gates.BisectStep
		if b.build(ctx, c) == "" {
			step = gates.BisectStep{Commit: c, Outcome: gates.Untestable, Why: b.why[c]}
		} else {
			var err error
			if step, err = b.probe(ctx, good, bad, c); err != nil {
				if ctx.Err() != nil {
					setRange()
					return false
				}
				step = gates.BisectStep{Commit: c, Outcome: gates.Untestable, Why: "its run failed: " + err.Error()}
			}
		}
		step.Index, step.Subject, step.Seconds = i, b.run.Subjects[i], time.Since(t0).Seconds()
		eta.Done(step.Seconds)
		b.prog.Note("bisect: %s is %s: %s", gates.Short(c), step.Outcome, step.Why)
		bis.Record(i, step.Outcome)
		b.run.Steps = append(b.run.Steps, step)
	}
	_, fb, between := setRange()
	if len(between) > 0 || ctx.Err() != nil {
		return ctx.Err() == nil
	}
	// Confirm: last good against first bad in one interleaved run, and
	// the per-kernel difference between them.
	b.prog.Note("bisect: confirming %s against %s", gates.Short(b.run.FirstBad), gates.Short(b.run.LastGood))
	t0 := time.Now()
	var final gates.BisectStep
	var err error
	if b.run.Mode == gates.BisectOutput {
		final, err = b.finalOutput(ctx, b.run.LastGood, b.run.FirstBad)
	} else {
		final, err = b.endsStep(ctx, b.run.LastGood, b.run.FirstBad, b.run.Metric)
	}
	if err != nil {
		final = gates.BisectStep{Outcome: gates.Unknown, Why: "the final re-run failed: " + err.Error()}
	}
	final.Commit, final.Index, final.Seconds = b.run.FirstBad, fb, time.Since(t0).Seconds()
	b.run.Final = &final
	b.run.Profile = b.kernelDiff(ctx)
	return ctx.Err() == nil
}

func (b *bisector) rangeLeft(bis *gates.Bisection) []int {
	_, _, between := bis.Range()
	return between
}

// finalOutput re-runs the greedy output of last good and first bad: like
// bad when they differ.
func (b *bisector) finalOutput(ctx context.Context, lastGood, firstBad string) (gates.BisectStep, error) {
	g, err := b.tokens(ctx, lastGood)
	if err != nil {
		return gates.BisectStep{}, err
	}
	f, err := b.tokens(ctx, firstBad)
	if err != nil {
		return gates.BisectStep{}, err
	}
	if d := firstDiff(g, f); d >= 0 {
		return gates.BisectStep{Outcome: gates.LikeBad, Why: fmt.Sprintf("greedy output differs (prompt %q first)", harness.DefaultPrompts()[d].Name)}, nil
	}
	return gates.BisectStep{Outcome: gates.LikeGood, Why: "greedy output identical: the change did not reproduce"}, nil
}

// kernelDiff is the launch census (and ncu on a GPU) of last good against
// first bad, as a gate result whose evidence the report prints.
func (b *bisector) kernelDiff(ctx context.Context) *gates.Result {
	lg, fb := b.run.LastGood, b.run.FirstBad
	cfg := gates.Config{Between: true, Backend: b.backend, Device: b.o.Device, Model: b.model, PP: b.pp, TG: b.o.TG,
		A: gates.Arm{Name: "A", Value: gates.Short(lg), Env: b.armEnv(lg, ""), Bin: filepath.Join(b.builds[lg], "minfer"), LegacyBench: b.legacy[lg]},
		B: gates.Arm{Name: "B", Value: gates.Short(fb), Env: b.armEnv(fb, ""), Bin: filepath.Join(b.builds[fb], "minfer"), LegacyBench: b.legacy[fb]}}
	tmp, err := os.MkdirTemp("", "abtest-bisect-profile-")
	if err == nil {
		defer os.RemoveAll(tmp)
		cfg.TmpDir = tmp
	}
	env := &gates.Env{M: b.s.m, Probe: b.s.probe, Progress: b.prog, HasGPU: b.s.hasGPU, GPUWhy: b.s.why}
	d := gates.KernelDiff(ctx, cfg, env)
	res := &gates.Result{Gate: gates.GateProfile, Profile: d, Evidence: fmt.Sprintf("launch census: %d kernels differ", len(d.Diff))}
	if d.NCUNote != "" {
		res.Evidence += "; ncu: " + d.NCUNote
	}
	if len(d.Missing) > 0 {
		res.Evidence += "; missing: " + strings.Join(d.Missing, "; ")
	}
	return res
}

// writeBisect writes the report and its JSON.
func writeBisect(base string, r *gates.BisectRun) error {
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", j, 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".md", []byte(report.BisectMarkdown(r)), 0o644)
}

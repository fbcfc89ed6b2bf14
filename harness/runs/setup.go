package runs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
	"github.com/minfer-go/minfer/report"
)

// findMinfer resolves --minfer: the flag, minfer next to abtest, or PATH.
func findMinfer(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", CannotRun("minfer binary: %v", err)
		}
		return filepath.Abs(flag)
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "minfer")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("minfer")
	if err != nil {
		return "", CannotRun("no minfer binary next to abtest or in PATH (use --minfer PATH)")
	}
	return filepath.Abs(p)
}

// setup resolves the binary, reads its levers, probes the machine.
type setup struct {
	m      harness.Minfer
	levers []harness.Lever
	probe  harness.Probe
	hasGPU bool
	why    string
	infos  map[string]harness.ModelInfo // model path ("": the embedded default) -> minfer info
}

func newSetup(ctx context.Context, f *Options) (*setup, error) {
	bin, err := findMinfer(f.Minfer)
	if err != nil {
		return nil, err
	}
	switch f.Device {
	case "auto", "cpu", "cuda":
	default:
		return nil, CannotRun("--device %q: want auto, cpu or cuda", f.Device)
	}
	s := &setup{probe: harness.DefaultProbe()}
	s.hasGPU, s.why = s.probe.HasGPU(ctx)
	if f.Device == "cuda" && !s.hasGPU {
		return nil, CannotRun("--device cuda: %s", s.why)
	}
	s.m = harness.Minfer{R: &harness.Runner{Bin: bin, Timeout: f.Timeout, GPUMem: gpumem.NewMonitor()}, Device: f.Device}
	if f.Model != "" && (f.Shape != "" || f.Type != "") {
		return nil, CannotRun("give --model or --shape/--type, not both")
	}
	if f.Model != "" {
		if _, err := os.Stat(f.Model); err != nil {
			return nil, CannotRun("model: %v", err)
		}
		abs, err := filepath.Abs(f.Model)
		if err != nil { // an empty Model would silently mean the embedded default
			return nil, CannotRun("model: %v", err)
		}
		s.m.Model = abs
	}
	if f.Shape != "" || f.Type != "" {
		if f.Shape == "" || f.Type == "" {
			return nil, CannotRun("--shape and --type go together")
		}
		path, _, err := synthModel(ctx, s.m.R, f.SynthDir, f.Shape, f.Type, f.Seed)
		if err != nil {
			return nil, err
		}
		s.m.Model = path
	}
	for i, cm := range f.CorrectnessModels {
		if _, err := os.Stat(cm); err != nil {
			return nil, CannotRun("correctness model: %v", err)
		}
		abs, err := filepath.Abs(cm)
		if err != nil {
			return nil, CannotRun("correctness model: %v", err)
		}
		f.CorrectnessModels[i] = abs
	}
	s.levers, err = s.m.Levers(ctx)
	if err != nil {
		return nil, CannotRun("reading the lever registry (minfer levers --json): %v", err)
	}
	if len(f.SuiteBins) == 0 {
		// The test binaries built beside minfer (the device bundle's
		// cuda.test, the README's bin/tests/); gate 4 keeps only the
		// project's of the run's backend, by their build stamp.
		dir := filepath.Dir(bin)
		f.SuiteBins = []string{filepath.Join(dir, "*.test"), filepath.Join(dir, "tests", "*.test")}
	}
	return s, nil
}

// synthDir is the cache of synthesized and derived models: dir, or by
// default the user cache dir /minfer/abtest-synth.
func synthDir(dir string) string {
	if dir != "" {
		return dir
	}
	base, err := os.UserCacheDir()
	if err != nil || base == "" {
		base = os.TempDir()
	}
	return filepath.Join(base, "minfer", "abtest-synth")
}

// synthPath is where the synthetic model of shape/type/seed is cached:
// synthDir(dir), file harness.SynthFileName.
func synthPath(dir, shape, typ string, seed uint64) string {
	return filepath.Join(synthDir(dir), harness.SynthFileName(shape, typ, seed))
}

// writeOnce makes the file at path unless a non-empty one is there (cached):
// make writes a temporary name that is renamed when it returns nil, so an
// interrupted make is never reused.
func writeOnce(path string, make func(tmp string) error) (cached bool, err error) {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return true, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp := fmt.Sprintf("%s.tmp%d", path, os.Getpid())
	defer os.Remove(tmp)
	if err := make(tmp); err != nil {
		return false, err
	}
	return false, os.Rename(tmp, path)
}

// synthModel returns the cached synthetic model for shape/type/seed, writing
// it once with `minfer synth --shape S --type T --seed N -o PATH`
// (writeOnce); cached says the file was already there. Every later run,
// round and lever reuses the file. abtest run/nightly and perf all
// synthesize through here.
func synthModel(ctx context.Context, r *harness.Runner, dir, shape, typ string, seed uint64) (path string, cached bool, err error) {
	for _, p := range []string{shape, typ} {
		if strings.ContainsAny(p, "/\\ ") || p == "." || p == ".." {
			return "", false, CannotRun("--shape/--type %q: not a plain name", p)
		}
	}
	path = synthPath(dir, shape, typ, seed)
	cached, err = writeOnce(path, func(tmp string) error {
		_, err := r.Run(ctx, "synth", nil, "synth", "--shape", shape, "--type", typ, "--seed", strconv.FormatUint(seed, 10), "-o", tmp)
		return err
	})
	if err != nil {
		return "", false, CannotRun("minfer synth (%s): %v", path, err)
	}
	abs, err := filepath.Abs(path)
	return abs, cached, err
}

// info is `minfer info` of model ("": the embedded default), read once.
func (s *setup) info(ctx context.Context, model string) (harness.ModelInfo, error) {
	if inf, ok := s.infos[model]; ok {
		return inf, nil
	}
	inf, _, err := harness.Minfer{R: s.m.R, Model: model}.Info(ctx)
	if err != nil {
		return inf, fmt.Errorf("minfer info %s: %w", model, err)
	}
	if s.infos == nil {
		s.infos = map[string]harness.ModelInfo{}
	}
	s.infos[model] = inf
	return inf, nil
}

// correctnessFor picks the model parity and greedy run on, for a run on
// model: they must run the lever's path, which runs only on the model's
// architecture and weight type. With no correctness models: "" (the run's
// model) and no fallback to report. Of cms, the first of the model's
// architecture (or of an unknown one) is taken; with none of it (a qwen2
// model has no qwen3 q/k norm): "" and the fallback, which the report
// states (GATES.md: the random-weight model only where no trained model of
// the architecture exists, and the report says so). Of the same file type,
// or either type unknown: as given. Else quantized to the model's file type
// (`minfer quantize`, which requantizes a Q8_0 file), once, into the synth
// dir under a name carrying its sha256, so a changed model is never reused
// stale: on a Q8_0 model both arms of a K-quant or Q4_0 lever would read the
// same Q8_0 weights and agree whatever its path does, and a random-weight
// model's top-1 margins are too small to resolve. With untied (the lever's
// path needs an output matrix of its own) a tied trained model is written
// again with `quantize --untie`: its embedding also as output.weight, the
// same weights and logits, so the gates still judge a trained model.
func (s *setup) correctnessFor(ctx context.Context, cms []string, model, dir string, untied bool, prog *harness.Progress) (cm, fallback string, err error) {
	if len(cms) == 0 {
		return "", "", nil
	}
	mi, err := s.info(ctx, model)
	if err != nil {
		return "", "", err
	}
	var others []string
	untie := false
	for _, c := range cms {
		ci, err := s.info(ctx, c)
		if err != nil {
			return "", "", err
		}
		if ci.Architecture == "" || mi.Architecture == "" || ci.Architecture == mi.Architecture {
			cm = c
			untie = untied && ci.HParams.TiedOutput
			if !untie && (ci.FileType == "" || mi.FileType == "" || strings.EqualFold(ci.FileType, mi.FileType)) {
				return cm, "", nil
			}
			break
		}
		others = append(others, fmt.Sprintf("%s: %s", filepath.Base(c), ci.Architecture))
	}
	if cm == "" {
		fallback = fmt.Sprintf("no trained model of architecture %s among the correctness models (%s)", mi.Architecture, strings.Join(others, ", "))
		prog.Note("correctness: %s: parity and greedy run on the model itself", fallback)
		return "", fallback, nil
	}
	sha, err := harness.FileSHA256Cached(cm)
	if err != nil {
		return "", "", err
	}
	typ := mi.FileType
	if typ == "" { // unknown (only an untie gets here): it keeps the trained model's type
		ci, err := s.info(ctx, cm)
		if err != nil {
			return "", "", err
		}
		if typ = ci.FileType; typ == "" {
			return "", "", fmt.Errorf("%s and %s name no file type: no type to write the untied copy in", filepath.Base(cm), filepath.Base(model))
		}
	}
	args, sfx, why := []string{"quantize", cm}, "", "the run's weight type"
	if untie {
		args, sfx, why = []string{"quantize", "--untie", cm}, "-untied", "the run's weight type, its tied embedding written again as an output matrix of its own (the lever's path runs only on untied models)"
	}
	out := filepath.Join(synthDir(dir), fmt.Sprintf("%s-%s-as-%s%s.gguf", strings.TrimSuffix(filepath.Base(cm), ".gguf"), sha[:12], typ, sfx))
	if _, err := writeOnce(out, func(tmp string) error {
		prog.Note("correctness: quantizing %s to %s, %s", filepath.Base(cm), typ, why)
		_, err := s.m.R.Run(ctx, "quantize", nil, append(args, tmp, typ)...)
		return err
	}); err != nil {
		return "", "", fmt.Errorf("minfer %s to %s: %w", strings.Join(args, " "), typ, err)
	}
	return out, "", nil
}

// config builds the gate configuration for one lever spec.
func (s *setup) config(f *Options, spec, baseline string) (gates.Config, error) {
	name, bval, hasB := strings.Cut(spec, "=")
	lv, err := harness.FindLever(s.levers, name)
	if err != nil {
		return gates.Config{}, CannotRun("%v", err)
	}
	if lv.Reserved != "" {
		return gates.Config{}, CannotRun("%s switches no path in this build (reserved: %s)", lv.Name, lv.Reserved)
	}
	if !hasB {
		if lv.NeedsB() {
			return gates.Config{}, CannotRun("%s's arm B has no default: give it as --lever %s=B (arm A is %s=%s; values: %s)",
				lv.Name, lv.Name, lv.Name, lv.ArmA, strings.Join(lv.ValidValues(), ", "))
		}
		bval = lv.ArmB
	}
	aval := baseline
	if aval == "" {
		aval = lv.ArmA
	}
	if aval == "" || bval == "" {
		return gates.Config{}, CannotRun("%s declares no arms: give --lever %s=B --baseline A (valid values: %s)", lv.Name, lv.Name, strings.Join(lv.ValidValues(), ", "))
	}
	for _, v := range []string{aval, bval} {
		if err := lv.Validate(v); err != nil {
			return gates.Config{}, CannotRun("%v", err)
		}
	}
	if aval, bval, err = pathArms(lv, aval, bval); err != nil {
		return gates.Config{}, err
	}
	if aval == bval {
		// The usual slip: naming a kill switch's baseline value as the
		// candidate (--lever MINFER_NO_X=1, whose arm A is already 1).
		hint := ""
		if hasB && baseline == "" && lv.ArmA == bval && lv.ArmB != "" {
			hint = fmt.Sprintf(": %s's baseline (arm A) is %s=%s and its candidate (arm B) %s=%s; run --lever %s to measure the path it switches",
				lv.Name, lv.Name, lv.ArmA, lv.Name, lv.ArmB, lv.Name)
		}
		return gates.Config{}, CannotRun("arms A and B are both %s=%s%s", lv.Name, aval, hint)
	}
	tol, err := harness.ParseTolerance(lv.Tolerance)
	if err != nil {
		return gates.Config{}, CannotRun("%s: %v", lv.Name, err)
	}
	backend := s.backend(f.Device)
	if !lv.RunsOn(backend) {
		return gates.Config{}, CannotRun("%s switches a path of the %s backend only; this run's arms would run on the %s (%s): refused, since a lever that switches nothing there would pass gates it never ran",
			lv.Name, lv.Backend, backend, s.backendWhy(f.Device))
	}
	cfg := gates.Config{Lever: lv, Tol: tol, Mutate: f.Mutate, Device: f.Device, Backend: backend, Model: s.m.Model,
		A:      gates.Arm{Name: "A", Value: aval, Env: map[string]string{lv.Name: aval}},
		B:      gates.Arm{Name: "B", Value: bval, Env: map[string]string{lv.Name: bval}},
		Rounds: f.Rounds, PP: f.PP, TG: f.TG, Reps: f.Reps, Depth: f.Depth, WarmupMS: f.WarmupMS, BenchWarm: f.BenchWarm,
		GraphTol: f.GraphTol, GenN: f.GenN, SuiteBins: f.SuiteBins, SuiteCache: f.SuiteCache, Kernels: f.Kernels,
		LeverDefaults: map[string]string{}}
	for _, l := range s.levers {
		cfg.LeverDefaults[l.Name] = l.Default
	}
	// The arm with the path off benches with the lever's BenchOff flags,
	// so both arms time the same work (MINFER_DRAFT: "--draft none").
	for _, arm := range []*gates.Arm{&cfg.A, &cfg.B} {
		v := arm.Value
		if v == harness.Unset {
			v = lv.Default
		}
		if len(lv.BenchOff) > 0 && lv.Liveness != nil && !lv.Liveness.RunsPath(v) {
			arm.BenchArgs = lv.BenchOff
		}
	}
	// The settings the path needs are pinned in both arms: the levers it
	// requires, and the KV cache format its rule on this backend reads
	// (harness.Lever.Pins), so that every gate's arm processes, the CPU
	// reference (arm A's settings) and the device suite run where the path
	// runs. An any_depth pin is checked here like them but kept out of the
	// arms' settings: the gates apply it in the correctness gates alone
	// (gates.AnyDepthGate), so the A/B times the route as users get it.
	pins := lv.Pins(backend)
	for _, p := range pins {
		other, err := harness.FindLever(s.levers, p.Name)
		if err == nil && p.Name == harness.CacheTypeLever && p.Value == "auto" {
			err = fmt.Errorf("auto names no KV cache format")
		}
		if err == nil {
			err = other.Validate(p.Value)
		}
		if err != nil {
			return cfg, CannotRun("%s: %v", p.Why, err)
		}
		if p.Name == lv.Name {
			return cfg, CannotRun("%s: pins the lever under test", p.Why)
		}
		if old, ok := cfg.A.Env[p.Name]; ok && old != p.Value {
			return cfg, CannotRun("%s, and %s=%s is pinned too", p.Why, p.Name, old)
		}
		if p.By == harness.PinAnyDepth {
			continue
		}
		cfg.A.Env[p.Name], cfg.B.Env[p.Name] = p.Value, p.Value
	}
	// --with pins another lever in both arms; never the lever under test,
	// the mutation seam or a value a required lever pins otherwise.
	for _, w := range f.With {
		name, v, ok := strings.Cut(w, "=")
		if !ok || !strings.HasPrefix(name, "MINFER_") {
			return cfg, CannotRun("--with %q: want MINFER_NAME=VALUE", w)
		}
		if name == lv.Name || name == "MINFER_TEST_MUTATE" {
			return cfg, CannotRun("--with %s: sets the lever under test or the mutation seam in both arms", w)
		}
		other, err := harness.FindLever(s.levers, name)
		if err == nil {
			err = other.Validate(v)
		}
		if err != nil {
			return cfg, CannotRun("--with %s: %v", w, err)
		}
		if old, ok := cfg.A.Env[name]; ok && old != v {
			why := fmt.Sprintf("another --with sets %s=%s", name, old)
			for _, p := range pins {
				if p.Name == name {
					why = p.Why + ", pinned in both arms"
				}
			}
			return cfg, CannotRun("--with %s: %s", w, why)
		}
		cfg.A.Env[name], cfg.B.Env[name] = v, v
		cfg.With = append(cfg.With, gates.WithLever{Lever: other, Value: v})
		cfg.Deviations = append(cfg.Deviations, fmt.Sprintf("--with %s=%s in both arms (registry default: %s)", name, v, other.Default))
	}
	// The bars are the registry's; a flag that changes one is a deviation.
	bars := lv.BarsOrDefault()
	cfg.BarPP, cfg.BarTG, cfg.ClaimBar, cfg.MaxRounds = bars.PP, bars.TG, bars.Claim, bars.MaxRounds
	cfg.Memory = lv.MemoryOrDefault()
	for _, d := range []struct {
		flag string
		dst  *float64
		v    float64
	}{{"bar-pp", &cfg.BarPP, f.BarPP}, {"bar-tg", &cfg.BarTG, f.BarTG}, {"claim-bar", &cfg.ClaimBar, f.ClaimBar}} {
		if f.changed(d.flag) && d.v != *d.dst {
			cfg.Deviations = append(cfg.Deviations, fmt.Sprintf("--%s %g (registry: %g)", d.flag, d.v, *d.dst))
			*d.dst = d.v
		}
	}
	if f.Mutate != "" {
		// "phantom" names the lever under test: its candidate path never
		// runs in arm B.
		if f.Mutate == "phantom" {
			cfg.Mutate = "phantom=" + lv.Name
		}
		mut, err := harness.FindLever(s.levers, "MINFER_TEST_MUTATE")
		if err == nil {
			err = mut.Validate(cfg.Mutate)
		}
		if err != nil {
			return cfg, CannotRun("--mutate: %v", err)
		}
		cfg.B.Env["MINFER_TEST_MUTATE"] = cfg.Mutate
	}
	for _, g := range strings.Split(f.Gates, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		ok := false
		for _, k := range gates.AllGates {
			ok = ok || k == g
		}
		if !ok {
			return cfg, CannotRun("--gates: unknown gate %q (valid: %s)", g, strings.Join(gates.AllGates, ","))
		}
		cfg.Gates = append(cfg.Gates, g)
	}
	if err := f.Check(); err != nil {
		return cfg, err
	}
	if f.Prompts != "" {
		ps, err := harness.ReadPrompts(f.Prompts)
		if err != nil {
			return cfg, CannotRun("--prompts: %v", err)
		}
		cfg.Prompts = ps
	}
	cfg.Defaults()
	return cfg, nil
}

// pathArms: an arm of a path lever (MINFER_KERNELS; not a paired model,
// which pairArms fits) whose value is none of the lever's literal values
// (nvrtc) is a file: it must exist (could not run otherwise, as minfer
// refuses a named file that does not), and the arms get its absolute path,
// since they may run elsewhere.
func pathArms(lv harness.Lever, vals ...string) (string, string, error) {
	if lv.KindS == "path" && lv.HasArms() && !lv.PairedModel {
		for i, v := range vals {
			if v == harness.Unset || slices.Contains(lv.Values, v) {
				continue
			}
			st, err := os.Stat(v)
			if err == nil && st.IsDir() {
				err = fmt.Errorf("a directory, not a file")
			}
			if err != nil {
				return "", "", CannotRun("%s=%s: %v", lv.Name, v, err)
			}
			if vals[i], err = filepath.Abs(v); err != nil {
				return "", "", CannotRun("%s=%s: %v", lv.Name, v, err)
			}
		}
	}
	return vals[0], vals[1], nil
}

// backend is where the arms of a run on device run: the CUDA backend for
// --device cuda, or auto with a device present; else the CPU.
func (s *setup) backend(device string) string {
	if device == "cuda" || device == "auto" && s.hasGPU {
		return "cuda"
	}
	return "cpu"
}

func (s *setup) backendWhy(device string) string {
	switch {
	case device == "cpu":
		return "--device cpu"
	case device == "cuda":
		return "--device cuda"
	case s.hasGPU:
		return "--device auto with a CUDA device"
	}
	return "--device auto, and " + s.why
}

// environment captures the provenance of a run of cfg (on cfg.Model: a
// nightly lever with its own workload runs another model than s.m's).
func (s *setup) environment(ctx context.Context, cfg gates.Config) harness.Environment {
	e := s.probe.Capture(ctx, s.m.R.Bin, cfg.Model)
	if cfg.Model == "" {
		// The embedded default: minfer says where it lives (else the A/B
		// warmup's bench JSON fills it in later).
		if p, err := s.m.ModelPath(ctx); err == nil {
			e.SetModel(p, "")
		}
	}
	e.Levers = map[string]string{}
	for _, l := range s.levers {
		v := l.Default
		if v == "" {
			v = harness.Unset
		}
		e.Levers[l.Name] = v
	}
	e.Pinned = map[string]string{"MINFER_BENCH_WARMUP_MS": fmt.Sprintf("%d (warmup process) / %d (timed rounds)", cfg.WarmupMS, cfg.BenchWarm)}
	if inf, err := s.info(ctx, cfg.Model); err == nil {
		e.ModelFileType = inf.FileType
	}
	return e
}

// RunLever runs the gates of f.Lever and writes its reports under f.Out;
// the error is a run that could not run (*Error).
func RunLever(ctx context.Context, f *Options, cmdline string, progressTo *os.File) (*gates.Record, string, error) {
	if f.Lever == "" {
		return nil, "", CannotRun("--lever is required (abtest levers lists them)")
	}
	s, err := newSetup(ctx, f)
	if err != nil {
		return nil, "", err
	}
	cfg, err := s.config(f, f.Lever, f.Baseline)
	if err != nil {
		return nil, "", err
	}
	prog := harness.NewProgress(progressTo, 0)
	if err := s.prepare(ctx, f, &cfg, &workloadModels{s: s, f: f, paths: map[string]string{}, prog: prog}, prog, false); err != nil {
		return nil, "", err
	}
	// The run's clock starts with the abtest process: its start-up, the
	// lever registry and the environment capture count as its overhead.
	rec, base := s.runConfig(ctx, cfg, f.Out, cmdline, progressTo, harness.ProcessStart)
	if f.BenchOut != "" {
		bf, err := os.Create(f.BenchOut)
		if err != nil {
			return rec, base, CannotRun("--bench-out: %v", err)
		}
		report.BenchLines(bf, rec)
		bf.Close()
	}
	return rec, base, nil
}

// prepare fits a lever's configuration to its workload before it runs (the
// same for abtest run and every lever of a nightly): the declared workload
// (forced for a nightly; for abtest run unless the user gave
// --model/--shape/--pp or --workload=false, and on the CPU only when
// --workload is given), the correctness model, the check that the path can
// run on the model and sizes at all (else could not run), and the rounds
// pre-registered from a calibration of this machine and workload.
func (s *setup) prepare(ctx context.Context, f *Options, cfg *gates.Config, wm *workloadModels, prog *harness.Progress, force bool) error {
	useWorkload := f.OnWorkload && !f.changed("model") && !f.changed("shape") && !f.changed("pp")
	if cfg.Backend == "cpu" {
		useWorkload = false // the CPU paths run on the default model (their needs say so)
	}
	// --workload given explicitly (or a nightly) puts the lever on its
	// workload whatever else was given.
	useWorkload = useWorkload || force || f.changed("workload") && f.OnWorkload
	switch {
	case useWorkload && strings.TrimSpace(cfg.Lever.Workload) != "":
		if err := wm.apply(ctx, cfg); err != nil {
			return CannotRun("%s's workload %q: %v", cfg.Lever.Name, cfg.Lever.Workload, err)
		}
	case f.changed("workload") && f.OnWorkload:
		prog.Note("note: %s declares no workload: --workload keeps --model and --pp", cfg.Lever.Name)
	}
	if err := s.pairArms(ctx, f, cfg, prog); err != nil {
		return err
	}
	if cfg.CorrectnessFallback == "" {
		var err error
		untied := false
		if r := cfg.Lever.Rule(cfg.Backend); r != nil {
			untied = r.Needs.Untied
		}
		if cfg.CorrectnessModel, cfg.CorrectnessFallback, err = s.correctnessFor(ctx, f.CorrectnessModels, cfg.Model, f.SynthDir, untied, prog); err != nil {
			return CannotRun("correctness model: %v", err)
		}
	}
	if err := s.checkNeeds(ctx, cfg, prog); err != nil {
		return err
	}
	// A run off the lever's declared workload still runs as told (its path
	// runs there, by the needs just checked); it is said here once, and in
	// the report's header and a liveness failure's reason.
	if note := cfg.Lever.WorkloadMismatch(cfg.Model, cfg.PP); note != "" && !force {
		prog.Note("note: %s (run as told; --workload, or `abtest nightly`, runs it on its workload)", note)
	}
	s.planRounds(ctx, f, cfg, prog)
	return nil
}

// checkNeeds refuses a run whose model or sizes cannot run the lever's path
// at all (its rule's needs: weight types, architecture, forward sizes):
// every gate's liveness would fail by construction. A correctness model
// that cannot run it is dropped for the run's own model.
func (s *setup) checkNeeds(ctx context.Context, cfg *gates.Config, prog *harness.Progress) error {
	rule := cfg.Lever.Rule(cfg.Backend)
	if rule == nil {
		return nil
	}
	n := rule.Needs
	problem := func(model string) (string, error) {
		if n.Arch == "" && len(n.WeightTypes) == 0 && !n.Untied {
			return "", nil
		}
		inf, err := s.info(ctx, model)
		if err != nil {
			return "", err
		}
		if n.Untied && inf.HParams.TiedOutput {
			return fmt.Sprintf("needs a model with an output matrix of its own, %s ties it to the token embedding", modelName(model)), nil
		}
		if n.Arch != "" && inf.Architecture != "" && inf.Architecture != n.Arch {
			return fmt.Sprintf("needs a %s model, %s is %s", n.Arch, modelName(model), inf.Architecture), nil
		}
		if len(n.WeightTypes) > 0 && len(inf.TypeHistogram) > 0 {
			found := false
			for _, t := range n.WeightTypes {
				found = found || inf.TypeHistogram[t] > 0
			}
			if !found {
				return fmt.Sprintf("needs matmul weights of %s, %s has %s", strings.Join(n.WeightTypes, "/"), modelName(model), inf.Histogram()), nil
			}
		}
		return "", nil
	}
	p, err := problem(cfg.Model)
	if err != nil {
		return CannotRun("minfer info: %v", err)
	}
	if p != "" {
		return CannotRun("%s's path %s (declared workload %q; run it there with --workload, or give --model/--shape of such a model)", cfg.Lever.Name, p, cfg.Lever.Workload)
	}
	if n.MaxNT > 0 && !n.NTRuns(1) && !n.NTRuns(cfg.PP) {
		return CannotRun("%s's path runs only in forwards of %d..%d tokens, and this run's pp is %d (declared workload %q)", cfg.Lever.Name, max(n.MinNT, 1), n.MaxNT, cfg.PP, cfg.Lever.Workload)
	}
	if n.MinNT > 1 && !n.NTRuns(cfg.PP) {
		return CannotRun("%s's path runs only in forwards of at least %d tokens, and this run's pp is %d", cfg.Lever.Name, n.MinNT, cfg.PP)
	}
	if cfg.CorrectnessModel != "" {
		if p, err := problem(cfg.CorrectnessModel); err == nil && p != "" {
			cfg.CorrectnessFallback = fmt.Sprintf("the correctness model %s cannot run %s's path (%s)", filepath.Base(cfg.CorrectnessModel), cfg.Lever.Name, p)
			prog.Note("correctness: %s: parity and greedy run on the run's model", cfg.CorrectnessFallback)
			cfg.CorrectnessModel = ""
		}
	}
	return nil
}

func modelName(model string) string {
	if model == "" {
		return "the embedded default model"
	}
	return filepath.Base(model)
}

// planRounds pre-registers gate 3's rounds from the newest matching
// calibration (--calibration, else under --out): enough for the not-slower
// check to refuse twice the bar with probability 0.8, within the lever's
// cap. Without one the run keeps --rounds and its gate states the power its
// own rounds reached. --rounds given beside a calibration is a deviation.
func (s *setup) planRounds(ctx context.Context, f *Options, cfg *gates.Config, prog *harness.Progress) {
	if !slices.Contains(cfg.Gates, gates.GateAB) {
		return
	}
	dir := f.Calibration
	if dir == "" {
		dir = calibrationDir(f.Out)
	}
	sha := ""
	path := cfg.Model
	if path == "" {
		if p, err := s.m.ModelPath(ctx); err == nil {
			path = p
		}
	}
	if path != "" {
		sha, _ = harness.FileSHA256Cached(path)
	}
	machine := gates.MachineName(cfg.Backend, s.gpuClocks(ctx), harness.CPUModel("/proc/cpuinfo"))
	cal, file, notes := gates.FindCalibration(dir, machine, cfg.Backend, sha, cfg.PP, cfg.TG, cfg.Depth, cfg.Reps, time.Now())
	for _, n := range notes {
		prog.Note("calibration: %s", n)
	}
	if cal == nil {
		prog.Note("calibration: none for %s on %s (pp%d tg%d r%d) under %s: %d rounds, power from their own noise (abtest calibrate records it)", modelName(path), machine, cfg.PP, cfg.TG, cfg.Reps, dir, cfg.Rounds)
		return
	}
	plan := cal.PlanFor(file, cfg.BarPP, cfg.BarTG, cfg.Lever.HostWork, cfg.MaxRounds)
	cfg.Power = plan
	if f.changed("rounds") && f.Rounds != plan.N {
		cfg.Deviations = append(cfg.Deviations, fmt.Sprintf("--rounds %d (the calibration pre-registers %d)", f.Rounds, plan.N))
		return
	}
	cfg.Rounds = plan.N
	prog.Note("calibration %s: %d rounds (%s)", file, plan.N, plan.Why)
}

// gpuClocks is the first GPU's reading (nil without one).
func (s *setup) gpuClocks(ctx context.Context) *harness.Clocks {
	if !s.hasGPU {
		return nil
	}
	c, err := s.probe.ReadClocks(ctx)
	if err != nil {
		return nil
	}
	return c
}

// runConfig runs the gates of one configuration and writes its reports;
// the overhead counts from start (zero: now, with the runner's accounts so
// far excluded).
func (s *setup) runConfig(ctx context.Context, cfg gates.Config, out, cmdline string, progressTo *os.File, start time.Time) (*gates.Record, string) {
	return s.runConfigAt(ctx, cfg, func(r *gates.Record) string { return report.Paths(out, r) }, cmdline, progressTo, start)
}

// runConfigAt is runConfig writing its report at the path base picks.
func (s *setup) runConfigAt(ctx context.Context, cfg gates.Config, pick func(*gates.Record) string, cmdline string, progressTo *os.File, start time.Time) (*gates.Record, string) {
	rec := &gates.Record{CommandLine: cmdline}
	if start.IsZero() {
		rec.MarkStart(time.Now(), s.m.R.Work())
	} else {
		rec.MarkStart(start, nil) // the runner was made after start
	}
	steps := 0
	for _, g := range cfg.Gates {
		switch g {
		case gates.GateParity:
			steps += len(cfg.ParityNT)
		case gates.GateGreedy:
			steps += len(cfg.Prompts)
		case gates.GateAB:
			steps += 2 + cfg.Rounds
		default:
			steps++
		}
	}
	prog := harness.NewProgress(progressTo, steps)
	m := s.m
	m.Model = cfg.Model // the lever's own workload model, else s.m's
	env := &gates.Env{M: m, Probe: s.probe, Progress: prog, HasGPU: s.hasGPU, GPUWhy: s.why}
	rec.Env = s.environment(ctx, cfg)
	rec.Lever, rec.Mutate = cfg.Lever.Name, cfg.Mutate
	base := pick(rec)
	prog.Note("%s: A=%s B=%s, report %s.md", cfg.Lever.Name, cfg.A.Value, cfg.B.Value, base)
	save := func(r *gates.Record) {
		r.Lock()
		defer r.Unlock()
		if err := report.WriteJSON(base+".json", r); err != nil {
			prog.Note("writing %s.json: %v", base, err)
		}
	}
	gates.Run(ctx, cfg, env, rec, save)
	for _, g := range rec.Gates {
		if g.AB != nil && len(g.AB.Warmup) > 0 {
			w := g.AB.Warmup[0]
			rec.Env.Backend, rec.Env.MinferGo = w.Backend, w.GoVersion
			rec.Env.KernelSources, rec.Env.Kernels = w.KernelSources, w.Kernels
			if rec.Env.Model == harness.EmbeddedModel && w.Model != "" {
				rec.Env.SetModel(w.Model, w.ModelSHA256)
			}
		}
	}
	finish := func() { // the overhead includes the plotting
		rec.Lock()
		rec.Finished = time.Now()
		rec.UpdateOverhead(s.m.R)
		rec.Unlock()
	}
	if err := report.WriteFinal(base, rec, finish); err != nil {
		prog.Note("writing the report: %v", err)
	}
	return rec, base
}

// calibrationDir is where a run without --calibration looks: the nearest
// folder at or above out that holds calibration/, so `abtest pr --out
// reports/pr` (whose workloads write below it) finds reports/calibration as
// `abtest run --out reports` does; out itself when none does.
func calibrationDir(out string) string {
	for d := filepath.Clean(out); ; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, "calibration")); err == nil && st.IsDir() {
			return d
		}
		if p := filepath.Dir(d); p == d || filepath.Base(d) == ".." {
			return out
		}
	}
}

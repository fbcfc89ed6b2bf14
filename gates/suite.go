package gates

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

// SuiteTimeout bounds one test binary.
const SuiteTimeout = 10 * time.Minute

// SuiteCacheMaxAge is how old a cached suite result may be and still be
// reused (the key already pins the binaries, kernels, settings and GPU).
const SuiteCacheMaxAge = 24 * time.Hour

// SuiteDetail is gate 4's evidence.
type SuiteDetail struct {
	Binaries []profile.TestRun `json:"binaries"`
	Passed   int               `json:"passed"`
	Failed   int               `json:"failed"`
	Skipped  int               `json:"skipped"`
	Failures []string          `json:"failures,omitempty"`
	// Env is the lever settings the binaries ran with (arm B's).
	Env map[string]string `json:"env"`
	// Refused names binaries that are not the project's test binaries of
	// this backend and lever (by their build stamp), and why.
	Refused []string `json:"refused,omitempty"`
	// Reused says where a cached identical run came from ("" ran now).
	Reused string `json:"reused,omitempty"`
}

// ModulePath is the project's module, which a test binary's build stamp
// must name (a binary of another module proves nothing about this one).
func ModulePath() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Path != "" {
		return bi.Main.Path
	}
	return "github.com/minfer-go/minfer"
}

// expandGlobs returns the files the patterns match and the patterns that
// matched nothing (the report names them: a suite that silently shrank
// is not the suite that was asked for).
func expandGlobs(globs []string) (out, unmatched []string) {
	seen := map[string]bool{}
	for _, g := range globs {
		ms, _ := filepath.Glob(g) // patterns are validated by the CLI
		if len(ms) == 0 {
			unmatched = append(unmatched, g)
		}
		for _, m := range ms {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out, unmatched
}

// testPackage reads a test binary's build stamp: the package it tests
// (module-relative, "cuda/driver"), or why it is not the project's.
func testPackage(bin string) (string, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("no Go build stamp: %v", err)
	}
	mod := ModulePath()
	if bi.Main.Path != mod {
		return "", fmt.Errorf("built from module %q, not %s", bi.Main.Path, mod)
	}
	pkg, ok := strings.CutSuffix(bi.Path, ".test")
	if !ok {
		return "", fmt.Errorf("%s is not a test binary", bi.Path)
	}
	if pkg == mod {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(pkg, mod+"/")
	if !ok {
		return "", fmt.Errorf("tests package %s, outside %s", pkg, mod)
	}
	return rel, nil
}

// suiteFor reports whether a test binary of package pkg belongs to the
// backend's suite for the lever: on CUDA the device test binaries
// (packages under cuda/), on the CPU the test binaries of the packages
// the lever declares.
func suiteFor(backend string, lv harness.Lever, pkg string) (bool, string) {
	if backend == "cuda" {
		if pkg == "cuda" || strings.HasPrefix(pkg, "cuda/") {
			return true, ""
		}
		return false, "not a device test binary (package " + pkg + ", not under cuda/)"
	}
	for _, p := range lv.Packages {
		if p == pkg {
			return true, ""
		}
	}
	if len(lv.Packages) == 0 {
		return false, lv.Name + " declares no packages (minfer levers --json: packages)"
	}
	return false, fmt.Sprintf("package %s is not one %s touches (%s)", pkg, lv.Name, strings.Join(lv.Packages, ", "))
}

// suiteBinary is one accepted test binary and its package.
type suiteBinary struct {
	Path, Pkg string
}

// suiteBinaries picks, from --suite-bin, the project's test binaries of the
// run's backend and lever (build stamp checked); when none qualify, the
// reason says what was found and why each was refused.
func suiteBinaries(cfg Config, env *Env) ([]suiteBinary, string) {
	bins, unmatched := expandGlobs(cfg.SuiteBins)
	var out []suiteBinary
	var refused []string
	for _, b := range bins {
		pkg, err := testPackage(b)
		if err == nil {
			var ok bool
			var why string
			if ok, why = suiteFor(cfg.Backend, cfg.Lever, pkg); !ok {
				err = fmt.Errorf("%s", why)
			}
		}
		if err != nil {
			refused = append(refused, filepath.Base(b)+": "+err.Error())
			continue
		}
		out = append(out, suiteBinary{Path: b, Pkg: pkg})
	}
	if len(out) > 0 {
		return out, strings.Join(refused, "; ")
	}
	what := "no test binaries given (--suite-bin; default: *.test and tests/*.test beside minfer)"
	if len(bins) > 0 {
		what = "none of the test binaries given is one of the project's " + cfg.Backend + " suite for " + cfg.Lever.Name + ": " + strings.Join(refused, "; ")
	}
	if len(unmatched) > 0 {
		what += "; --suite-bin patterns that matched nothing: " + strings.Join(unmatched, " ")
	}
	return nil, what
}

func baseNames(bins []suiteBinary) []string {
	var out []string
	for _, b := range bins {
		out = append(out, filepath.Base(b.Path))
	}
	return out
}

// PackageDir is where a test binary runs, as `go test` runs it (testdata
// paths are relative to the package): for X.test, the one directory named X
// under root that holds _test.go files (cuda.test -> cuda, driver.test ->
// cuda/driver); root itself when there is none or more than one.
func PackageDir(root, bin string) string {
	name := strings.TrimSuffix(filepath.Base(bin), ".test")
	var found []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if base := d.Name(); p != root && (strings.HasPrefix(base, ".") || base == "bin" || base == "reports" || base == "testdata" || base == "node_modules") {
			return filepath.SkipDir
		}
		if d.Name() == name {
			if ms, _ := filepath.Glob(filepath.Join(p, "*_test.go")); len(ms) > 0 {
				found = append(found, p)
			}
		}
		return nil
	})
	if len(found) == 1 {
		return found[0]
	}
	return root
}

// moduleRoot is the nearest folder at or above the working directory whose
// go.mod declares the project's module (the test binaries read their
// sources and testdata relative to their package there), else the working
// directory.
func moduleRoot() string {
	wd, _ := os.Getwd()
	for d := wd; ; {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "module" && f[1] == ModulePath() {
					return d
				}
			}
		}
		up := filepath.Dir(d)
		if up == d {
			return wd
		}
		d = up
	}
}

// packageDir is a stamped binary's package directory under root when it
// exists there, else PackageDir's guess from the file name.
func packageDir(root string, b suiteBinary) string {
	if b.Pkg != "" {
		d := filepath.Join(root, filepath.FromSlash(b.Pkg))
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return PackageDir(root, b.Path)
}

// runSuite runs each test binary serially with -test.v (never retried) in
// its package directory with the lever settings of leverEnv, and parses its
// output; run filters tests ("" = all); the kernels file, when set, is
// passed as MINFER_KERNELS.
func runSuite(ctx context.Context, r *harness.Runner, bins []suiteBinary, run, kernels string, leverEnv map[string]string) ([]profile.TestRun, error) {
	var out []profile.TestRun
	root := moduleRoot()
	for _, bin := range bins {
		args := []string{"-test.v", "-test.count=1"}
		if run != "" {
			args = append(args, "-test.run", run)
		}
		abs, err := filepath.Abs(bin.Path)
		if err != nil {
			abs = bin.Path
		}
		cctx, cancel := context.WithTimeout(ctx, SuiteTimeout)
		cmd := exec.CommandContext(cctx, abs, args...)
		cmd.Dir = packageDir(root, bin)
		cmd.Env = harness.CleanEnv(cmd.Environ())
		for _, k := range sortedKeys(leverEnv) {
			if v := leverEnv[k]; v != harness.Unset {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		if kernels != "" {
			cmd.Env = append(cmd.Env, "MINFER_KERNELS="+kernels)
		}
		cmd.WaitDelay = 2 * time.Second
		t0 := time.Now()
		b, err := cmd.CombinedOutput()
		if r != nil {
			r.Account(harness.WorkDeviceTests, time.Since(t0))
		}
		cancel()
		tr := profile.ParseGoTestV(string(b))
		tr.Binary = bin.Path
		tr.NoDeviceSkips = strings.Count(string(b), "no CUDA device answers")
		if err != nil && tr.Failed == 0 {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			tr.Failed++
			why := err.Error()
			if cctx.Err() != nil {
				why = "timed out after " + SuiteTimeout.String()
			}
			tr.Failures = append(tr.Failures, fmt.Sprintf("(binary %s: %s; tail: %s)", filepath.Base(bin.Path), why, lastLines(string(b), 5)))
		}
		out = append(out, tr)
	}
	return out, ctx.Err()
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// suiteCacheEntry is one cached suite run.
type suiteCacheEntry struct {
	Key     string            `json:"key"`
	Created time.Time         `json:"created"`
	What    string            `json:"what"` // what the key hashes, readable
	Runs    []profile.TestRun `json:"runs"`
}

// suiteKey hashes everything a suite run's outcome depends on: each
// binary's bytes, the kernels file's, the filter, the lever settings and
// the GPU ("" when something cannot be hashed: no caching then).
func suiteKey(bins []suiteBinary, kernels, filter string, leverEnv map[string]string, gpu string) (string, string) {
	var parts []string
	for _, b := range bins {
		h, err := harness.FileSHA256Cached(b.Path)
		if err != nil {
			return "", ""
		}
		parts = append(parts, filepath.Base(b.Path)+"="+h)
	}
	if kernels != "" {
		h, err := harness.FileSHA256Cached(kernels)
		if err != nil {
			return "", ""
		}
		parts = append(parts, "kernels="+h)
	}
	parts = append(parts, "filter="+filter, "gpu="+gpu)
	for _, k := range sortedKeys(leverEnv) {
		parts = append(parts, k+"="+leverEnv[k])
	}
	what := strings.Join(parts, " ")
	sum := sha256.Sum256([]byte(what))
	return hex.EncodeToString(sum[:]), what
}

// runSuiteCached is runSuite through cfg.SuiteCache: an identical run (same
// key) of the last SuiteCacheMaxAge is reused and said so (the returned
// runs carry it in Reused); a fresh run is stored. Without a cache folder
// it always runs.
func runSuiteCached(ctx context.Context, cfg Config, env *Env, bins []suiteBinary, filter string, leverEnv map[string]string) ([]profile.TestRun, error) {
	kernels, leverEnv := suiteKernels(cfg, env, leverEnv)
	gpu := "none"
	if env.HasGPU {
		if c, err := env.Probe.ReadClocks(ctx); err == nil {
			gpu = c.Name
		}
	}
	key, what := "", ""
	if cfg.SuiteCache != "" {
		// Settings at their registry default do not change a run: two
		// levers whose arm B is the default share one.
		keyed := map[string]string{}
		for k, v := range leverEnv {
			if d, ok := cfg.LeverDefaults[k]; !ok || d != v {
				keyed[k] = v
			}
		}
		key, what = suiteKey(bins, kernels, filter, keyed, gpu)
	}
	file := filepath.Join(cfg.SuiteCache, key+".json")
	if key != "" {
		if b, err := os.ReadFile(file); err == nil {
			var e suiteCacheEntry
			if json.Unmarshal(b, &e) == nil && e.Key == key && time.Since(e.Created) < SuiteCacheMaxAge {
				for i := range e.Runs {
					e.Runs[i].Reused = fmt.Sprintf("%s (ran %s; same binaries, kernels, settings and GPU by sha256)", file, e.Created.UTC().Format(time.RFC3339))
				}
				return e.Runs, nil
			}
		}
	}
	runs, err := runSuite(ctx, env.M.R, bins, filter, kernels, leverEnv)
	if err != nil || key == "" {
		return runs, err
	}
	if b, err := json.MarshalIndent(suiteCacheEntry{Key: key, Created: time.Now(), What: what, Runs: runs}, "", "  "); err == nil {
		if os.MkdirAll(cfg.SuiteCache, 0o755) == nil {
			_ = os.WriteFile(file, b, 0o644) // a cache that cannot be written only costs a rerun
		}
	}
	return runs, nil
}

// suiteKernels is the kernels file the test binaries get as MINFER_KERNELS
// ("": none, they look beside themselves) and the lever settings they run
// with. An arm that sets MINFER_KERNELS itself (the MINFER_KERNELS lever)
// keeps its value: a file (made absolute, hashed into the cache key like
// any kernels file) or nvrtc, which --kernels or the fatbin beside minfer
// never override (--kernels then names only the SASS census's file).
// Otherwise --kernels, else on CUDA the fatbin beside minfer.
func suiteKernels(cfg Config, env *Env, leverEnv map[string]string) (string, map[string]string) {
	if v, ok := leverEnv[kernelsLever]; ok && v != harness.Unset {
		if v == levers.KernelsNVRTC {
			return "", leverEnv
		}
		rest := map[string]string{}
		for k, x := range leverEnv {
			if k != kernelsLever {
				rest[k] = x
			}
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			abs = v
		}
		return abs, rest
	}
	kernels := absKernels(cfg)
	if kernels == "" && cfg.Backend == "cuda" {
		kernels = defaultKernels(env)
	}
	return kernels, leverEnv
}

// kernelsLever is the lever that names the kernels a process loads.
const kernelsLever = "MINFER_KERNELS"

// defaultKernels is the kernels fatbin beside minfer ("" when none): where
// minfer and the test binaries find it.
func defaultKernels(env *Env) string {
	if env.M.R == nil {
		return ""
	}
	ms, _ := filepath.Glob(filepath.Join(filepath.Dir(env.M.R.Bin), "*.fatbin"))
	if len(ms) == 0 {
		return ""
	}
	return ms[0]
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// absKernels is --kernels as an absolute path ("" when not given: the test
// binaries then find the fatbin beside themselves).
func absKernels(cfg Config) string {
	if cfg.Kernels == "" {
		return ""
	}
	p, err := filepath.Abs(cfg.Kernels)
	if err != nil {
		return cfg.Kernels
	}
	return p
}

// suiteEnv is arm B's settings for the test binaries, less a timing-only
// mutation (slow_decode, slow_prefill): it can change no test's outcome,
// since no test asserts a time (the project's rule), so the suite of a
// slow_* mutation run is the unmutated arm B's (and shares its cache
// entry). Every other seam (fail_device_test, phantom, ...) stays. A KV
// cache the lever's path needs (harness.PinKVCache) is left out too: the
// device tests choose their caches test by test (each one's bar belongs to
// its cache), and the path's own device tests pin the cache it reads.
func suiteEnv(cfg Config, b map[string]string) map[string]string {
	drop := map[string]bool{}
	for _, p := range cfg.Lever.Pins(cfg.Backend) {
		if p.By == harness.PinKVCache {
			drop[p.Name] = true
		}
	}
	out := map[string]string{}
	for k, v := range b {
		if k == "MINFER_TEST_MUTATE" && (strings.HasPrefix(v, "slow_decode") || strings.HasPrefix(v, "slow_prefill")) || drop[k] {
			continue
		}
		out[k] = v
	}
	return out
}

// Suite is gate 4: the project's test binaries of the backend and lever
// (build stamp checked) run serially with arm B's lever settings.
func Suite(ctx context.Context, cfg Config, env *Env) Result {
	cfg = forGate(cfg, GateSuite) // a path routed by depth runs from the first KV cell here
	res := Result{Gate: GateSuite, Defends: Defends(GateSuite)}
	if cfg.SuiteDeferredTo != "" {
		res.Status, res.DeferredTo = Skip, cfg.SuiteDeferredTo
		res.Reason = "deferred to shard " + cfg.SuiteDeferredTo + " of this nightly, which runs every lever's suite: abtest merge fills it in"
		return res
	}
	if cfg.Backend == "cuda" && !env.HasGPU {
		res.Status, res.Reason = Skip, "no CUDA device ("+env.GPUWhy+"): the device suite needs one"
		return res
	}
	bins, why := suiteBinaries(cfg, env)
	if len(bins) == 0 {
		res.Status, res.Reason = Skip, why
		return res
	}
	benv := suiteEnv(cfg, cfg.B.Env)
	runs, err := runSuiteCached(ctx, cfg, env, bins, "", benv)
	d := &SuiteDetail{Binaries: runs, Env: benv}
	if why != "" {
		d.Refused = strings.Split(why, "; ")
	}
	res.Suite = d
	noDevice := 0
	for _, r := range runs {
		d.Passed += r.Passed
		d.Failed += r.Failed
		d.Skipped += r.Skipped
		noDevice += r.NoDeviceSkips
		if r.Reused != "" {
			d.Reused = r.Reused
		}
		for _, f := range r.Failures {
			d.Failures = append(d.Failures, filepath.Base(r.Binary)+": "+f)
		}
	}
	env.step("%s suite: %d binaries", cfg.Backend, len(bins))
	res.Evidence = fmt.Sprintf("%d binaries (%s) with arm B's settings: %d passed, %d failed, %d skipped", len(bins), strings.Join(baseNames(bins), ", "), d.Passed, d.Failed, d.Skipped)
	if d.Reused != "" {
		res.Evidence += "; reused " + d.Reused
	}
	if len(d.Refused) > 0 {
		res.Evidence += "; not the suite's: " + strings.Join(d.Refused, "; ")
	}
	if v, ok := benv[kernelsLever]; ok && v != harness.Unset {
		res.Evidence += fmt.Sprintf("; kernels: arm B's %s=%s", kernelsLever, v)
		if cfg.Kernels != "" {
			res.Evidence += " (--kernels " + cfg.Kernels + " names the SASS census's file only)"
		}
	}
	switch {
	case err != nil && canceled(ctx):
		res.Status, res.Reason = Skip, "interrupted: "+err.Error()
	case err != nil:
		res.Status, res.Reason = Fail, err.Error()
	case d.Failed > 0:
		res.Status, res.Reason = Fail, "failures: "+strings.Join(d.Failures, ", ")
	case cfg.Backend == "cuda" && noDevice > 0:
		res.Status, res.Reason = Inconclusive, fmt.Sprintf("%d device tests skipped because no CUDA device answered the test binary", noDevice)
	case d.Passed == 0:
		res.Status, res.Reason = Inconclusive, "no test ran (every test skipped itself or none exists)"
	default:
		what := "device test"
		if cfg.Backend == "cpu" {
			what = "test of " + strings.Join(cfg.Lever.Packages, ", ")
		}
		res.Status, res.Reason = Pass, fmt.Sprintf("every %s passed (none retried)", what)
	}
	return res
}

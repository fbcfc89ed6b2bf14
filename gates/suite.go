package gates

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

// SuiteTimeout bounds one device test binary.
const SuiteTimeout = 10 * time.Minute

// SuiteDetail is gate 4's evidence.
type SuiteDetail struct {
	Binaries []profile.TestRun `json:"binaries"`
	Passed   int               `json:"passed"`
	Failed   int               `json:"failed"`
	Skipped  int               `json:"skipped"`
	Failures []string          `json:"failures,omitempty"`
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

// runSuite runs each test binary serially with -test.v (never retried) in
// its package directory and parses its output; run filters tests ("" =
// all); kernels, when set, is passed as MINFER_KERNELS.
func runSuite(ctx context.Context, r *harness.Runner, bins []string, run, kernels string) ([]profile.TestRun, error) {
	var out []profile.TestRun
	root, _ := os.Getwd()
	for _, bin := range bins {
		args := []string{"-test.v", "-test.count=1"}
		if run != "" {
			args = append(args, "-test.run", run)
		}
		abs, err := filepath.Abs(bin)
		if err != nil {
			abs = bin
		}
		cctx, cancel := context.WithTimeout(ctx, SuiteTimeout)
		cmd := exec.CommandContext(cctx, abs, args...)
		cmd.Dir = PackageDir(root, bin)
		cmd.Env = harness.CleanEnv(cmd.Environ())
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
		tr.Binary = bin
		if err != nil && tr.Failed == 0 {
			tr.Failed++
			why := err.Error()
			if cctx.Err() != nil {
				why = "timed out after " + SuiteTimeout.String()
			}
			tr.Failures = append(tr.Failures, fmt.Sprintf("(binary %s: %s; tail: %s)", filepath.Base(bin), why, lastLines(string(b), 5)))
		}
		out = append(out, tr)
	}
	return out, ctx.Err()
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

// Suite is gate 4.
func Suite(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateSuite, Defends: Defends(GateSuite)}
	bins, unmatched := expandGlobs(cfg.SuiteBins)
	if len(bins) == 0 {
		res.Status = Skip
		if !env.HasGPU {
			res.Reason = "no CUDA device (" + env.GPUWhy + ") and no device test binaries (--suite-bin)"
		} else {
			res.Reason = "no device test binaries matched --suite-bin " + strings.Join(cfg.SuiteBins, " ")
		}
		return res
	}
	runs, err := runSuite(ctx, env.M.R, bins, "", absKernels(cfg))
	d := &SuiteDetail{Binaries: runs}
	res.Suite = d
	for _, r := range runs {
		d.Passed += r.Passed
		d.Failed += r.Failed
		d.Skipped += r.Skipped
		for _, f := range r.Failures {
			d.Failures = append(d.Failures, filepath.Base(r.Binary)+": "+f)
		}
	}
	env.step("device suite: %d binaries", len(bins))
	res.Evidence = fmt.Sprintf("%d binaries: %d passed, %d failed, %d skipped", len(bins), d.Passed, d.Failed, d.Skipped)
	if len(unmatched) > 0 {
		res.Evidence += "; --suite-bin patterns that matched nothing: " + strings.Join(unmatched, " ")
	}
	switch {
	case err != nil:
		res.Status, res.Reason = Fail, "interrupted: "+err.Error()
	case d.Failed > 0:
		res.Status, res.Reason = Fail, "failures: "+strings.Join(d.Failures, ", ")
	case d.Passed == 0:
		res.Status, res.Reason = Skip, "every device test skipped itself (no device answered)"
	default:
		res.Status, res.Reason = Pass, "every device test passed (none retried)"
	}
	return res
}

package gates

import (
	"context"
	"fmt"
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

func expandGlobs(globs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range globs {
		ms, _ := filepath.Glob(g)
		for _, m := range ms {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// runSuite runs each test binary serially with -test.v (never retried) and
// parses its output; run filters tests ("" = all).
func runSuite(ctx context.Context, bins []string, run string) ([]profile.TestRun, error) {
	var out []profile.TestRun
	for _, bin := range bins {
		args := []string{"-test.v", "-test.count=1"}
		if run != "" {
			args = append(args, "-test.run", run)
		}
		cctx, cancel := context.WithTimeout(ctx, SuiteTimeout)
		cmd := exec.CommandContext(cctx, bin, args...)
		cmd.Env = harness.CleanEnv(cmd.Environ())
		cmd.WaitDelay = 2 * time.Second
		b, err := cmd.CombinedOutput()
		cancel()
		r := profile.ParseGoTestV(string(b))
		r.Binary = bin
		if err != nil && r.Failed == 0 {
			r.Failed++
			why := err.Error()
			if cctx.Err() != nil {
				why = "timed out after " + SuiteTimeout.String()
			}
			r.Failures = append(r.Failures, fmt.Sprintf("(binary %s: %s; tail: %s)", filepath.Base(bin), why, lastLines(string(b), 5)))
		}
		out = append(out, r)
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

// Suite is gate 4.
func Suite(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateSuite, Defends: Defends(GateSuite)}
	bins := expandGlobs(cfg.SuiteBins)
	if len(bins) == 0 {
		res.Status = Skip
		if !env.HasGPU {
			res.Reason = "no CUDA device (" + env.GPUWhy + ") and no device test binaries (--suite-bin)"
		} else {
			res.Reason = "no device test binaries matched --suite-bin " + strings.Join(cfg.SuiteBins, " ")
		}
		return res
	}
	runs, err := runSuite(ctx, bins, "")
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

package gates

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/internal/gobuild"
)

func TestMain(m *testing.M) {
	code := m.Run()
	gobuild.Cleanup()
	os.Exit(code)
}

// fake builds the CLI test double once per test binary.
func fake(t *testing.T) harness.Minfer {
	t.Helper()
	fakeBin, err := gobuild.Once("github.com/minfer-go/minfer/harness/internal/fakeminfer", "minfer")
	if err != nil {
		t.Fatal(err)
	}
	return harness.Minfer{R: &harness.Runner{Bin: fakeBin}, Device: "cpu"}
}

func TestRun_InterruptedRunLeavesPartialRecordMarkedIncomplete(t *testing.T) {
	m := fake(t)
	cfg := Config{Lever: harness.Lever{Lever: levers.Lever{Name: "MINFER_NO_FUSE_FFN"}}, Tol: harness.Tolerance{Bitwise: true, Bounded: true, Top1Equal: true},
		A:     Arm{Name: "A", Value: "1", Env: map[string]string{"MINFER_NO_FUSE_FFN": "1"}},
		B:     Arm{Name: "B", Value: "0", Env: map[string]string{"MINFER_NO_FUSE_FFN": "0"}},
		Gates: []string{GateAB, GateSuite}, Rounds: 9, PP: 8, TG: 2, WarmupMS: 1, BenchWarm: 1}
	cfg.Defaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &Record{}
	saves, sawPartial := 0, false
	Run(ctx, cfg, &Env{M: m, GPUWhy: "test"}, rec, func(r *Record) {
		saves++
		for _, g := range r.Gates {
			if g.AB != nil && len(g.AB.Rounds) == 2 {
				sawPartial = sawPartial || r.Verdict == VerdictIncomplete
				cancel() // the SIGINT of a real run
			}
		}
	})
	if !sawPartial {
		t.Error("the record written after round 2 was not marked INCOMPLETE")
	}
	if rec.Complete || rec.Verdict != VerdictIncomplete || rec.ExitCode() != ExitUndecided {
		t.Fatalf("complete %v verdict %s", rec.Complete, rec.Verdict)
	}
	if !strings.Contains(rec.VerdictLine, "interrupted") || len(rec.Gates) != 2 || rec.Gates[1].Reason != "not run: interrupted" {
		t.Fatalf("%s %+v", rec.VerdictLine, rec.Gates)
	}
	if ab := rec.Gates[0].AB; ab == nil || len(ab.Rounds) < 2 {
		t.Fatalf("the finished rounds were lost")
	}
}

func TestCompareLogits_BitwiseAndTolerance(t *testing.T) {
	ref := []float32{1, 2, 3, 0, 5, 1}
	c := CompareLogits("x", ref, append([]float32{}, ref...), 3, 0)
	c.judge(true, true, 0, true)
	if !c.Pass || !c.Bitwise || c.Top1Agree != 2 {
		t.Fatalf("%+v", c)
	}
	y := []float32{1, 2, 3.4, 0, 5, 5.2} // pos 1 flips top-1, diff 4.2
	c = CompareLogits("x", ref, y, 3, 0)
	c.judge(false, true, 0.5, true)
	if c.Pass || float64(c.MaxAbsDiff) < 4.19 || c.Top1Agree != 1 {
		t.Fatalf("%+v", c)
	}
}

func TestDecide_SkipIsNeverPass(t *testing.T) {
	r := &Record{Complete: true, Gates: []Result{{Gate: "parity", Status: Pass}, {Gate: "suite", Status: Skip, Reason: "no GPU"}}}
	r.Decide()
	if r.Verdict != VerdictInconclusive || !strings.Contains(r.VerdictLine, "could not decide: suite SKIP: no GPU") || r.ExitCode() != ExitUndecided {
		t.Fatal(r.VerdictLine)
	}
}

// allGates is a run's gates with the given statuses in GATES.md order.
func allGates(st ...Status) []Result {
	var rs []Result
	for i, g := range AllGates {
		rs = append(rs, Result{Gate: g, Status: st[i], Reason: "why " + g})
	}
	return rs
}

// Hole 1 of issue 13: a subset of gates said PASS and exit 0. PASS now
// needs all five gates run and passed; the verdicts take GATES.md's
// precedence and map to its exit codes.
func TestDecide_PassNeedsAllFiveGatesAndPrecedenceMapsToExitCodes(t *testing.T) {
	for _, c := range []struct {
		name     string
		gates    []Result
		complete bool
		mutate   string
		verdict  string
		code     int
		line     string
	}{
		{"five PASS", allGates(Pass, Pass, Pass, Pass, Pass), true, "", VerdictPass, 0, "5 of 5 gates PASS"},
		{"two chosen", allGates(Pass, Pass, Pass, Pass, Pass)[:2], true, "", VerdictPartial, 3, "not run: ab, suite, profile (not chosen"},
		{"inconclusive beats partial", allGates(Pass, Inconclusive, Pass, Pass, Pass)[:2], true, "", VerdictInconclusive, 3, "greedy INCONCLUSIVE"},
		{"fail beats all", allGates(Pass, Skip, Fail, Inconclusive, Pass)[:3], false, "", VerdictFail, 1, "FAIL: ab"},
		{"interrupted", allGates(Pass, Skip, Skip, Skip, Skip), false, "", VerdictIncomplete, 3, "run interrupted"},
		{"mutation caught", []Result{{Gate: GateAB, Status: Fail, Control: Pass}}, true, "slow_decode=0.03", VerdictFail, 1, "caught by ab"},
		{"mutation unnoticed", []Result{{Gate: GateAB, Status: Pass}}, true, "slow_decode=0.03", VerdictNotCaught, 1, "NOT CAUGHT"},
		{"slowdown masked by a faster arm B", []Result{{Gate: GateAB, Status: Pass, AB: &ABDetail{Metrics: []Metric{{Name: "tg128", Key: "tg", Median: 1.27}}}}}, true, "slow_decode=0.03", VerdictNotCaught, 1, "arm B ran tg128 x1.270 faster than arm A, more than the planted 3% slowdown"},
		{"the lever fails on its own", []Result{{Gate: GateAB, Status: Fail, Control: Fail}}, true, "slow_decode=0.03", VerdictNotCaught, 1, "NOT CAUGHT"},
	} {
		r := &Record{Lever: "MINFER_X", A: "0", B: "1", Complete: c.complete, Mutate: c.mutate, Gates: c.gates, IncompleteReason: "interrupted (context canceled)"}
		r.Decide()
		if r.Verdict != c.verdict || r.ExitCode() != c.code || !strings.Contains(r.VerdictLine, c.line) || !strings.HasPrefix(r.VerdictLine, c.verdict+":") {
			t.Errorf("%s: %s (exit %d), want %s exit %d containing %q", c.name, r.VerdictLine, r.ExitCode(), c.verdict, c.code, c.line)
		}
	}
}

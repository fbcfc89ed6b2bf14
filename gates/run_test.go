package gates

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/harness"
)

var (
	fakeOnce sync.Once
	fakeDir  string
	fakeBin  string
	fakeErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}

// fake builds the CLI test double once per test binary.
func fake(t *testing.T) harness.Minfer {
	t.Helper()
	fakeOnce.Do(func() {
		if fakeDir, fakeErr = os.MkdirTemp("", "gates-fake-"); fakeErr != nil {
			return
		}
		fakeBin = filepath.Join(fakeDir, "minfer")
		if out, err := exec.Command("go", "build", "-o", fakeBin, "github.com/minfer-go/minfer/harness/internal/fakeminfer").CombinedOutput(); err != nil {
			fakeErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return harness.Minfer{R: &harness.Runner{Bin: fakeBin}, Device: "cpu"}
}

func TestRun_InterruptedRunLeavesPartialRecordMarkedIncomplete(t *testing.T) {
	m := fake(t)
	cfg := Config{Lever: harness.Lever{Name: "MINFER_NO_FUSE_FFN"}, Tol: harness.Tolerance{Bitwise: true, Bounded: true, Top1Equal: true},
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
	if rec.Complete || rec.Verdict != VerdictIncomplete || rec.ExitCode() != 1 {
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
	r := &Record{Complete: true, Gates: []Result{{Gate: "parity", Status: Pass}, {Gate: "suite", Status: Skip}}}
	r.Decide()
	if r.Verdict != VerdictInconclusive || !strings.Contains(r.VerdictLine, "not counted as PASS") {
		t.Fatal(r.VerdictLine)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

// TestRun_ReportNamesParityClassDeclaredToleranceAndOverheadSplit: the
// report says which whole-graph class judged each arm and why, names the
// lever's declared A-vs-B class (MINFER_CACHE_TYPE: kv-precision),
// where the commit came from, and splits the overhead from profiler work.
func TestRun_ReportNamesParityClassDeclaredToleranceAndOverheadSplit(t *testing.T) {
	bin := fakeMinfer(t)
	out := t.TempDir()
	code := run([]string{"run", "--minfer", bin, "--out", out, "--device", "cpu", "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity"})
	ms, _ := filepath.Glob(filepath.Join(out, "*", "*.md"))
	if code != 3 || len(ms) != 1 {
		t.Fatalf("exit %d, reports %v", code, ms)
	}
	b, err := os.ReadFile(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"Tolerance class: kv-precision: max|diff| <= 0.5, top-1 equal at every position",
		"arm A: class **absolute**: max|diff| <= 0.5",
		"Why: the arm runs on the reference's backend (cpu: --device cpu)",
		"model weight types: F32:11 Q8_0:15",
		"profilers: 0.0 s (0",
		"| commit ",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	rows := map[string]bool{}
	for _, l := range strings.Split(md, "\n") {
		if f := strings.Split(l, "|"); len(f) > 4 && strings.TrimSpace(f[2]) == "64" {
			rows[strings.TrimSpace(f[1])+" "+strings.TrimSpace(f[3])] = true
		}
	}
	if !rows["A vs CPU ref absolute"] || !rows["B vs CPU ref absolute"] || !rows["A vs B kv-precision"] {
		t.Errorf("class column of the nt=64 rows: %v", rows)
	}
	rec, err := report.ReadJSON(strings.TrimSuffix(ms[0], ".md") + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Env.CommitFrom == "" || rec.Overhead.Harness <= 0 || rec.Overhead.Execs == 0 {
		t.Errorf("commit from %q, overhead %+v", rec.Env.CommitFrom, rec.Overhead)
	}
	if g := rec.Gates[0]; g.Status != gates.Inconclusive || !strings.Contains(g.Reason, "whole-graph and A-vs-B parity hold") || !strings.HasPrefix(g.Liveness, "PASS") {
		t.Errorf("%s: %s", g.Status, g.Reason)
	}
}

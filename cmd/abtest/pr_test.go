package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// builds puts the fake minfer in two build folders, as `abtest pr` wants
// them (a minfer binary each).
func builds(t *testing.T) (base, head string) {
	t.Helper()
	bin := fakeMinfer(t)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"base", "head"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "minfer"), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, "base"), filepath.Join(root, "head")
}

// runPR runs `abtest pr` in-process and returns its exit code, the run and
// the page.
func runPR(t *testing.T, extra ...string) (int, *gates.PRRun, string) {
	t.Helper()
	base, head := builds(t)
	out := t.TempDir()
	args := append([]string{"pr", "--base", base, "--head", head, "--workloads", "embedded", "--device", "cpu", "--out", out,
		"--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10", "--gen-n", "8"}, extra...)
	code := run(args)
	ms, _ := filepath.Glob(filepath.Join(out, "*.json"))
	if len(ms) != 1 {
		t.Fatalf("abtest %v: exit %d, pages %v", args, code, ms)
	}
	b, err := os.ReadFile(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	var p gates.PRRun
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(strings.TrimSuffix(ms[0], ".json") + ".md")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(strings.TrimSuffix(ms[0], ".json") + ".bench.txt"); err != nil {
		t.Errorf("no benchstat lines: %v", err)
	}
	if len(md) > 60000 {
		t.Errorf("page of %d characters", len(md))
	}
	return code, &p, string(md)
}

// The same build as base and head: "~" on every metric, outputs bitwise
// the same, no regression, exit 0.
func TestPR_SameBuildIsTildeEverywhereExit0(t *testing.T) {
	code, p, md := runPR(t)
	if code != 0 || p.Verdict != gates.PRNoRegression {
		t.Fatalf("exit %d: %s\n%s", code, p.VerdictLine, md)
	}
	for _, want := range []string{"**abtest pr: no regression", "| embedded | pp16 (wall)", "| ~ ", "bitwise"} {
		if !strings.Contains(md, want) {
			t.Errorf("page lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "**slower**") {
		t.Errorf("a slowdown on the same build:\n%s", md)
	}
}

// A decode slowdown planted in the head (twice the bar) is reported and
// exits 1.
func TestPR_HeadDecodeSlowdownIsARegressionExit1(t *testing.T) {
	code, p, md := runPR(t, "--head-env", "MINFER_TEST_MUTATE=slow_decode=0.03")
	if code != 1 || p.Verdict != gates.PRRegression || len(p.Workloads) != 1 || len(p.Workloads[0].Slower) == 0 ||
		!strings.Contains(p.Workloads[0].Slower[0], "tg4") || !strings.Contains(md, "**slower**") {
		t.Fatalf("exit %d: %s (%+v)\n%s", code, p.VerdictLine, p.Workloads, md)
	}
}

// Changed outputs (a perturbed logit in the head) are reported and exit 1.
func TestPR_HeadChangedOutputsAreARegressionExit1(t *testing.T) {
	code, p, md := runPR(t, "--head-env", "MINFER_TEST_MUTATE=perturb_logit")
	if code != 1 || p.Verdict != gates.PRRegression || len(p.Workloads[0].Changed) == 0 || !strings.Contains(md, "**changed**") {
		t.Fatalf("exit %d: %s (%+v)\n%s", code, p.VerdictLine, p.Workloads, md)
	}
}

func TestPR_MissingBuildOrBadHeadEnvIsExit2(t *testing.T) {
	base, _ := builds(t)
	if code := run([]string{"pr", "--base", base, "--head", t.TempDir(), "--out", t.TempDir()}); code != 2 {
		t.Errorf("a head folder without minfer: exit %d", code)
	}
	if code := run([]string{"pr", "--base", base, "--head", base, "--head-env", "PATH=/x", "--out", t.TempDir()}); code != 2 {
		t.Errorf("a non-MINFER head env: exit %d", code)
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness/runs"
)

// sassFixture reads the SASS listing fixture and returns it, a temporary
// directory and a writer of files into it.
func sassFixture(t *testing.T) (src, dir string, write func(name, body string) string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "harness", "profile", "testdata", "sass.txt"))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	return string(b), dir, func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// sass-diff: identical listings exit 0; a changed function exits 1 with its
// row (instruction counts, moved opcodes); an unreadable or empty input is
// exit 2.
func TestSASSDiff_ExitCodesAndChangedFunctionRows(t *testing.T) {
	src, dir, write := sassFixture(t)
	a := write("a.sass", src)
	same := write("same.sass", strings.ReplaceAll(src, "/*0020*/", "/*0120*/"))
	changed := write("changed.sass", strings.Replace(src, "@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20 ;", "@!P0 HMMA.16816.F32 R20, R12, R18, R20 ;", 1))
	var out bytes.Buffer
	if err := runs.SASSDiff(context.Background(), a, same, nil, &out); runs.ExitCode(err) != 0 || !strings.Contains(out.String(), "2 identical, 0 changed") {
		t.Errorf("same: exit %d:\n%s", runs.ExitCode(err), out.String())
	}
	out.Reset()
	err := runs.SASSDiff(context.Background(), a, changed, nil, &out)
	if runs.ExitCode(err) != 1 || !strings.Contains(out.String(), "| sm_90a mmq_q4k | 7 -> 7 | HMMA 0 -> 1, IMMA 2 -> 1 |") {
		t.Errorf("changed: exit %d:\n%s", runs.ExitCode(err), out.String())
	}
	for _, bad := range []string{filepath.Join(dir, "missing.sass"), write("empty.sass", "no functions here\n")} {
		if err := runs.SASSDiff(context.Background(), a, bad, nil, &out); runs.ExitCode(err) != 2 {
			t.Errorf("%s: exit %d (%v), want 2", bad, runs.ExitCode(err), err)
		}
	}
}

// sass-diff --runs: a changed function counts as shown no slower only where
// both arms of a PASS MINFER_KERNELS run launched it (exit 0 then); a FAIL
// run, a run where one arm did not launch it, or no run leaves it unshown
// (exit 1, named); a report of another lever, of other kernel sources or
// without a census cannot be used (exit 2).
func TestSASSDiffRuns_ADifferenceIsShownOnlyByAPassRunThatLaunchedItInBothArms(t *testing.T) {
	src, dir, write := sassFixture(t)
	a := write("a.sass", src)
	changed := write("changed.sass", strings.Replace(src, "@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20 ;", "@!P0 HMMA.16816.F32 R20, R12, R18, R20 ;", 1))
	report := func(name, lever, verdict, sources string, ca, cb int) string {
		return write(name+".json", fmt.Sprintf(`{"lever": %q, "verdict": %q, "environment": {"kernel_sources_sha256": %q},
 "gates": [{"gate": "ab"}, {"gate": "profile", "profile": {"census_a": {"mmq_q4k": %d, "rms_norm_f32": 3}, "census_b": {"mmq_q4k": %d, "rms_norm_f32": 3}}}]}`,
			lever, verdict, sources, ca, cb))
	}
	pass := report("pass", "MINFER_KERNELS=nvrtc", "PASS", "abc", 4, 4)
	fail := report("fail", "MINFER_KERNELS=nvrtc", "FAIL", "abc", 4, 4)
	oneArm := report("onearm", "MINFER_KERNELS=nvrtc", "PASS", "abc", 0, 4)
	for _, c := range []struct {
		name string
		runs []string
		exit int
		want string
	}{
		{"pass", []string{fail, pass}, 0, "| PASS pass |"},
		{"glob", []string{filepath.Join(dir, "pas*.json")}, 0, "| PASS pass |"},
		{"fail only", []string{fail}, 1, "not a PASS: fail (FAIL)"},
		{"one arm", []string{oneArm}, 1, "| not run |"},
		{"other lever", []string{report("other", "MINFER_MMQ", "PASS", "abc", 4, 4)}, 2, ""},
		{"other sources", []string{pass, report("src", "MINFER_KERNELS=nvrtc", "PASS", "def", 4, 4)}, 2, ""},
		{"no census", []string{write("nocensus.json", `{"lever": "MINFER_KERNELS=nvrtc", "verdict": "PASS", "gates": [{"gate": "ab"}]}`)}, 2, ""},
		{"missing", []string{filepath.Join(dir, "missing.json")}, 2, ""},
	} {
		var out bytes.Buffer
		err := runs.SASSDiff(context.Background(), a, changed, c.runs, &out)
		if runs.ExitCode(err) != c.exit || !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: exit %d (%v), want %d and %q:\n%s", c.name, runs.ExitCode(err), err, c.exit, c.want, out.String())
		}
		if c.exit == 1 && !strings.Contains(out.String(), "Not shown no slower by a PASS run: sm_90a mmq_q4k") {
			t.Errorf("%s: the unshown function is not named:\n%s", c.name, out.String())
		}
	}
}

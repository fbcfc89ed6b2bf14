package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	if err := runs.SASSDiff(context.Background(), a, same, runs.SASSDiffOptions{}, &out); runs.ExitCode(err) != 0 || !strings.Contains(out.String(), "2 identical, 0 changed") {
		t.Errorf("same: exit %d:\n%s", runs.ExitCode(err), out.String())
	}
	out.Reset()
	err := runs.SASSDiff(context.Background(), a, changed, runs.SASSDiffOptions{}, &out)
	if runs.ExitCode(err) != 1 || !strings.Contains(out.String(), "| sm_90a mmq_q4k | 7 -> 7 | HMMA 0 -> 1, IMMA 2 -> 1 |") {
		t.Errorf("changed: exit %d:\n%s", runs.ExitCode(err), out.String())
	}
	for _, bad := range []string{filepath.Join(dir, "missing.sass"), write("empty.sass", "no functions here\n")} {
		if err := runs.SASSDiff(context.Background(), a, bad, runs.SASSDiffOptions{}, &out); runs.ExitCode(err) != 2 {
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
		err := runs.SASSDiff(context.Background(), a, changed, runs.SASSDiffOptions{Runs: c.runs}, &out)
		if runs.ExitCode(err) != c.exit || !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: exit %d (%v), want %d and %q:\n%s", c.name, runs.ExitCode(err), err, c.exit, c.want, out.String())
		}
		if c.exit == 1 && !strings.Contains(out.String(), "Not shown no slower by a PASS run: sm_90a mmq_q4k") {
			t.Errorf("%s: the unshown function is not named:\n%s", c.name, out.String())
		}
	}
}

// ledgerFixture builds listings of the fixture's two functions (sm_90a
// mmq_q4k, rms_norm_f32) with either one's SASS swapped in nvcc's or
// NVRTC's build, and abtest reports of MINFER_KERNELS runs.
type ledgerFixture struct {
	t     *testing.T
	dir   string
	src   string
	write func(name, body string) string
}

func newLedgerFixture(t *testing.T) *ledgerFixture {
	src, dir, write := sassFixture(t)
	return &ledgerFixture{t, dir, src, write}
}

// Instruction swaps: each makes one function's SASS differ from the
// fixture's.
const (
	mmqHMMA  = "mmq hmma"  // mmq_q4k: one IMMA becomes an HMMA
	rmsSwap  = "rms swap"  // rms_norm_f32: FFMA operands swapped
	rmsFMUL  = "rms fmul"  // rms_norm_f32: FFMA becomes an FMUL
	rmsFFMA2 = "rms ffma2" // rms_norm_f32: another register
)

// swaps are the instruction edits, from -> to.
var swaps = map[string][2]string{
	mmqHMMA:  {"@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20 ;", "@!P0 HMMA.16816.F32 R20, R12, R18, R20 ;"},
	rmsSwap:  {"FFMA R2, R3, R4, R2 ;", "FFMA R2, R4, R3, R2 ;"},
	rmsFMUL:  {"FFMA R2, R3, R4, R2 ;", "FMUL R2, R3, R4 ;"},
	rmsFFMA2: {"FFMA R2, R3, R4, R2 ;", "FFMA R5, R3, R4, R5 ;"},
}

// listing writes the fixture with the edits made.
func (f *ledgerFixture) listing(name string, edits ...string) string {
	s := f.src
	for _, e := range edits {
		if !strings.Contains(s, swaps[e][0]) {
			f.t.Fatalf("%s: %q not in the fixture", e, swaps[e][0])
		}
		s = strings.Replace(s, swaps[e][0], swaps[e][1], 1)
	}
	return f.write(name, s)
}

// rowOf is the line of out that starts with prefix, "" when none does.
func rowOf(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// report is a MINFER_KERNELS report at sources whose two arms both launched
// the kernels named.
func (f *ledgerFixture) report(name, verdict, sources string, launched ...string) string {
	census := map[string]int{"other_kernel": 2}
	for _, k := range launched {
		census[k] = 4
	}
	c, err := json.Marshal(census)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.write(name+".json", fmt.Sprintf(`{"lever": "MINFER_KERNELS=nvrtc@baseline=x.fatbin", "verdict": %q, "environment": {"kernel_sources_sha256": %q},
 "gates": [{"gate": "ab"}, {"gate": "profile", "profile": {"census_a": %s, "census_b": %s}}]}`, verdict, sources, c, c))
}

// sassDiff runs sass-diff and returns its exit code, error and output.
func sassDiff(oldPath, newPath string, o runs.SASSDiffOptions) (int, error, string) {
	var out bytes.Buffer
	err := runs.SASSDiff(context.Background(), oldPath, newPath, o, &out)
	return runs.ExitCode(err), err, out.String()
}

func sourcesHash(c byte) string { return strings.Repeat(string(c), 64) }

// sass-diff --ledger: a PASS run of other kernel sources shows a function
// no slower when its sources' ledger has today's nvcc and NVRTC digests of
// it; where either build's SASS of it changed since, the run does not
// count ("SASS changed since", exit 1). Runs of the listings' own sources
// count as they always did, beside runs counted through a ledger.
func TestSASSLedger_ARunOfOtherSourcesCountsOnlyWhereBothBuildsSASSIsUnchanged(t *testing.T) {
	f := newLedgerFixture(t)
	ledger := filepath.Join(f.dir, "sass")
	today, h1, h2, h3 := sourcesHash('e'), sourcesHash('1'), sourcesHash('2'), sourcesHash('3')
	// Today: nvcc has the fixture, NVRTC differs in both functions.
	nvcc, nvrtc := f.listing("nvcc.sass"), f.listing("nvrtc.sass", mmqHMMA, rmsSwap)
	// h1's nvcc built rms_norm_f32 otherwise; h2's NVRTC did; h3's SASS is
	// today's in both builds (an edit that did not reach these kernels).
	for _, old := range []struct {
		sources    string
		nvcc, nvrt string
	}{
		{h1, f.listing("h1-nvcc.sass", rmsFMUL), f.listing("h1-nvrtc.sass", mmqHMMA, rmsSwap)},
		{h2, f.listing("h2-nvcc.sass"), f.listing("h2-nvrtc.sass", mmqHMMA, rmsFFMA2)},
		{h3, f.listing("h3-nvcc.sass"), f.listing("h3-nvrtc.sass", mmqHMMA, rmsSwap)},
	} {
		if code, err, out := sassDiff(old.nvcc, old.nvrt, runs.SASSDiffOptions{Ledger: ledger, Sources: old.sources}); code != 1 {
			t.Fatalf("writing the ledger of %.12s: exit %d (%v):\n%s", old.sources, code, err, out)
		}
	}
	both := []string{"mmq_q4k", "rms_norm_f32"}
	mmq, rms := "| sm_90a mmq_q4k | 7 -> 7 |", "| sm_90a rms_norm_f32 | 3 -> 3 |"
	for _, c := range []struct {
		name string
		runs []string
		exit int
		rows map[string]string // row prefix -> what its "run in" cell must hold
	}{
		{"nvcc changed since", []string{f.report("r1", "PASS", h1, both...)}, 1, map[string]string{
			mmq: "| PASS r1 (sources 111111111111, SASS equal) |",
			rms: "| SASS changed since: r1 (sources 111111111111) |"}},
		{"NVRTC changed since", []string{f.report("r2", "PASS", h2, both...)}, 1, map[string]string{
			mmq: "| PASS r2 (sources 222222222222, SASS equal) |",
			rms: "| SASS changed since: r2 (sources 222222222222) |"}},
		{"unchanged", []string{f.report("r3", "PASS", h3, both...)}, 0, map[string]string{
			mmq: "| PASS r3 (sources 333333333333, SASS equal) |",
			rms: "| PASS r3 (sources 333333333333, SASS equal) |"}},
		{"today's run and a ledger's", []string{f.report("now", "PASS", today, "rms_norm_f32"), f.report("r1b", "PASS", h1, "mmq_q4k")}, 0, map[string]string{
			mmq: "| PASS r1b (sources 111111111111, SASS equal) |",
			rms: "| PASS now |"}},
		{"today's run covers a changed one", []string{f.report("r1c", "PASS", h1, both...), f.report("now2", "PASS", today, "rms_norm_f32")}, 0, map[string]string{
			rms: "| PASS now2; SASS changed since: r1c (sources 111111111111) |"}},
		{"a FAIL of unchanged SASS", []string{f.report("r3f", "FAIL", h3, both...)}, 1, map[string]string{
			mmq: "| not a PASS: r3f (FAIL) |"}},
	} {
		code, err, out := sassDiff(nvcc, nvrtc, runs.SASSDiffOptions{Runs: c.runs, Ledger: ledger, Sources: today})
		if code != c.exit {
			t.Errorf("%s: exit %d (%v), want %d:\n%s", c.name, code, err, c.exit, out)
		}
		for row, cell := range c.rows {
			if !strings.HasSuffix(rowOf(out, row), cell) {
				t.Errorf("%s: row %q does not end %q:\n%s", c.name, row, cell, out)
			}
		}
		if c.exit == 1 && !strings.Contains(out, "Not shown no slower by a PASS run: ") {
			t.Errorf("%s: the unshown functions are not named:\n%s", c.name, out)
		}
	}
	// The summary counts the runs per sources.
	_, _, out := sassDiff(nvcc, nvrtc, runs.SASSDiffOptions{Ledger: ledger, Sources: today,
		Runs: []string{f.report("s0", "PASS", today, "rms_norm_f32"), f.report("s1", "FAIL", h1, both...), f.report("s2", "PASS", h1, "mmq_q4k")}})
	if want := "Runs: 3 MINFER_KERNELS reports, 2 PASS: 1 of kernel sources eeeeeeeeeeee (these listings' sources; 1 PASS), 2 of kernel sources 111111111111 (through its ledger; 1 PASS)."; !strings.Contains(out, want) {
		t.Errorf("summary: want %q:\n%s", want, out)
	}
}

// sass-diff --ledger: a run of sources with no ledger cannot be judged
// (exit 2, naming the run and the missing file); so is a run whose report
// names no sources hash. --sources without --ledger is refused too.
func TestSASSLedger_ARunOfSourcesWithoutALedgerCannotBeJudged(t *testing.T) {
	f := newLedgerFixture(t)
	ledger := filepath.Join(f.dir, "sass")
	nvcc, nvrtc := f.listing("nvcc.sass"), f.listing("nvrtc.sass", mmqHMMA)
	today, other := sourcesHash('e'), "0123456789ab"+strings.Repeat("f", 52)
	code, err, out := sassDiff(nvcc, nvrtc, runs.SASSDiffOptions{Ledger: ledger, Sources: today,
		Runs: []string{f.report("now", "PASS", today, "mmq_q4k"), f.report("lost", "PASS", other, "mmq_q4k")}})
	if code != 2 || err == nil || !strings.Contains(err.Error(), "lost.json") || !strings.Contains(err.Error(), "no SASS ledger") ||
		!strings.Contains(err.Error(), filepath.Join(ledger, "0123456789ab.tsv")) {
		t.Errorf("no ledger: exit %d (%v), want 2 naming lost.json and the missing ledger:\n%s", code, err, out)
	}
	for name, o := range map[string]runs.SASSDiffOptions{
		"no hash":                {Ledger: ledger, Sources: today, Runs: []string{f.report("nohash", "PASS", "", "mmq_q4k")}},
		"--sources not a sha256": {Ledger: ledger, Sources: "abc"},
		"--sources alone":        {Sources: today},
	} {
		if code, err, out := sassDiff(nvcc, nvrtc, o); code != 2 {
			t.Errorf("%s: exit %d (%v), want 2:\n%s", name, code, err, out)
		}
	}
}

// sass-diff --ledger writes DIR/<12 hex>.tsv of the listings' sources
// (default: this binary's), one line per function; a ledger of those
// sources that holds other digests is an error (exit 2) naming the
// function, and one with the same digests is left as it is.
func TestSASSLedger_TheSameSourcesMustGiveTheSameSASS(t *testing.T) {
	f := newLedgerFixture(t)
	ledger := filepath.Join(f.dir, "reports", "sass")
	nvcc, nvrtc := f.listing("nvcc.sass"), f.listing("nvrtc.sass", mmqHMMA)
	h := sourcesHash('a')
	if code, err, out := sassDiff(nvcc, nvrtc, runs.SASSDiffOptions{Ledger: ledger, Sources: h}); code != 1 {
		t.Fatalf("first write: exit %d (%v):\n%s", code, err, out)
	}
	p := filepath.Join(ledger, "aaaaaaaaaaaa.tsv")
	first, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(first)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], h) || !strings.Contains(lines[0], "nvcc.sass") || !strings.Contains(lines[0], "nvrtc.sass") ||
		!strings.HasPrefix(lines[1], "sm_90a mmq_q4k\t") || !strings.HasPrefix(lines[2], "sm_90a rms_norm_f32\t") {
		t.Errorf("ledger file:\n%s", first)
	}
	// The same SASS under other file names: no error, the file unchanged.
	nvcc2, nvrtc2 := f.listing("nvcc-again.sass"), f.listing("nvrtc-again.sass", mmqHMMA)
	if code, err, out := sassDiff(nvcc2, nvrtc2, runs.SASSDiffOptions{Ledger: ledger, Sources: h}); code != 1 || !strings.Contains(out, "already there") {
		t.Errorf("same digests: exit %d (%v), want 1 (the diff's):\n%s", code, err, out)
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(again, first) {
		t.Errorf("same digests rewrote the ledger:\n%s\nwas:\n%s", again, first)
	}
	// Other NVRTC SASS of rms_norm_f32 at the same sources.
	code, err, out := sassDiff(nvcc, f.listing("nvrtc-other.sass", mmqHMMA, rmsSwap), runs.SASSDiffOptions{Ledger: ledger, Sources: h})
	if code != 2 || err == nil || !strings.Contains(err.Error(), "sm_90a rms_norm_f32") {
		t.Errorf("other digests: exit %d (%v), want 2 naming sm_90a rms_norm_f32:\n%s", code, err, out)
	}
	if again, _ := os.ReadFile(p); !bytes.Equal(again, first) {
		t.Errorf("a refused ledger was rewritten:\n%s", again)
	}
	// A function the ledger lacks is a difference too.
	code, err, _ = sassDiff(nvcc, f.write("nvrtc-one.sass", strings.Replace(f.src[:strings.Index(f.src, "Function : rms_norm_f32")], swaps[mmqHMMA][0], swaps[mmqHMMA][1], 1)), runs.SASSDiffOptions{Ledger: ledger, Sources: h})
	if code != 2 || err == nil || !strings.Contains(err.Error(), "sm_90a rms_norm_f32") {
		t.Errorf("a function gone: exit %d (%v), want 2 naming sm_90a rms_norm_f32", code, err)
	}
	// No --sources: refused, nothing written (no hash to file it under).
	before, _ := os.ReadDir(ledger)
	if code, err, out := sassDiff(nvcc, nvrtc, runs.SASSDiffOptions{Ledger: ledger}); code != 2 || err == nil || !strings.Contains(err.Error(), "--sources is required") {
		t.Errorf("no sources: exit %d (%v), want 2 asking for --sources:\n%s", code, err, out)
	}
	if after, _ := os.ReadDir(ledger); len(after) != len(before) {
		t.Errorf("no sources: the ledger folder went from %d to %d files", len(before), len(after))
	}
}

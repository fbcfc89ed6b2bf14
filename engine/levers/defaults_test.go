package levers_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

// fiveGates are the gates a PASS must have run to make a path the default
// (the brief: a report that ran fewer gates is not a PASS).
var fiveGates = []string{"parity", "greedy", "ab", "suite", "profile"}

// grandfathered are the paths that were on by default before this test
// existed, on evidence it does not accept, each with the best evidence
// committed. They are debts: an A/B of all five gates at HEAD clears one,
// and the test then asks for its line to go. No lever may be added here.
var grandfathered = map[string]string{
	"MINFER_MMVQ_REPACK":        "PASS of four gates (2026-11-29, before the suite gate existed)",
	"MINFER_MMVQ_NT":            "PASS of four gates (2026-11-29, before the suite gate existed)",
	"MINFER_QUANTIZE_X4":        "PASS of four gates (2026-11-29, before the suite gate existed)",
	"MINFER_NO_CUDA_GRAPH":      "PASS of four gates (2026-11-29, before the suite gate existed)",
	"MINFER_FUSE_RESIDUAL":      "FAIL 4 of 5 (2026-11-29: the suite, on another lever's test since fixed); never re-run",
	"MINFER_FUSE_QKNORM":        "FAIL 4 of 5 (2026-11-29: parity), then a parity-only PASS: a re-run with fewer gates",
	"MINFER_MMQ":                "FAIL 4 of 5 (2026-12-01, the nightly too): parity, on arm A's f16 GEMM; pp512 x2.79",
	"MINFER_NO_FA_PREFILL":      "FAIL (2026-11-29: parity, greedy), then a PASS of two gates",
	"MINFER_NO_Q80_MMVQ":        "FAIL (2026-11-29: parity), then a PASS of two gates",
	"MINFER_NO_SPLITK_ATTN":     "FAIL (2026-11-29: parity), then a PASS of two gates",
	"MINFER_NO_PREFILL_GEMM":    "FAIL 3 of 4 (2026-11-29: parity)",
	"MINFER_NO_KQ_MMVQ":         "no report committed",
	"MINFER_NO_Q40_MMVQ":        "no report committed",
	"MINFER_NO_PINNED_READBACK": "no report committed",
	"MINFER_NO_PREFILL_CAPTURE": "no report committed",
}

var reportsDirRE = regexp.MustCompile(`reports/(MINFER_[A-Z0-9_]+)`)

// defaultOn: arm B, the lever's path, is what runs when nothing is set.
func defaultOn(l levers.Lever) bool {
	return l.HasArms() && l.Reserved == "" && l.ArmB != "" && l.Default == l.ArmB
}

// defaultEvidence names the committed report under root (the repository's
// reports/ folder) that makes l's default: a PASS of all five gates for l
// with arm B at the default value, in the folder its DefaultSince names
// (else reports/<name>) or the nightly's. "" and why not when there is none.
func defaultEvidence(l levers.Lever, root string) (rep, why string) {
	dir := l.Name
	if m := reportsDirRE.FindStringSubmatch(l.DefaultSince); m != nil {
		dir = m[1]
	} else if l.DefaultSince != "" {
		return "", fmt.Sprintf("DefaultSince %q names no reports/MINFER_* folder", l.DefaultSince)
	}
	var files []string
	for _, d := range []string{dir, filepath.Join("nightly", l.Name)} {
		fs, _ := filepath.Glob(filepath.Join(root, d, "*.json"))
		files = append(files, fs...)
	}
	seen := 0
	for _, f := range files {
		r, err := report.ReadJSON(f)
		if err != nil || r.Verdict == "" { // not an abtest record (a calibration, a perf table)
			continue
		}
		seen++
		all := true
		for _, g := range fiveGates {
			all = all && slices.Contains(r.Config.Gates, g)
		}
		// A mutated run's PASS is a mutation no gate caught: no evidence.
		if r.Lever == l.Name && r.Verdict == gates.VerdictPass && r.Mutate == "" && all && r.B == l.Default {
			return f, ""
		}
	}
	return "", fmt.Sprintf("none of the %d reports in reports/%s or reports/nightly/%s is a PASS of all five gates with B = %s",
		seen, dir, l.Name, l.Default)
}

// TestRegistry_EveryDefaultRestsOnACommittedFiveGatePASS: a lever whose
// path is on by default (its default is arm B) has a committed abtest
// report that PASSed all five gates with arm B at that default, unless it
// is one of the grandfathered debts, which must still lack one.
func TestRegistry_EveryDefaultRestsOnACommittedFiveGatePASS(t *testing.T) {
	root := filepath.Join("..", "..", "reports")
	if _, err := os.Stat(root); err != nil {
		t.Skipf("no reports folder beside the module: %v", err)
	}
	n := 0
	for _, l := range levers.All() {
		if !defaultOn(l) {
			if _, old := grandfathered[l.Name]; old {
				t.Errorf("%s is grandfathered but its path is not the default", l.Name)
			}
			continue
		}
		n++
		rep, why := defaultEvidence(l, root)
		debt, old := grandfathered[l.Name]
		switch {
		case rep == "" && !old:
			t.Errorf("%s is on by default without a five-gate PASS: %s", l.Name, why)
		case rep != "" && old:
			t.Errorf("%s now has %s: remove it from grandfathered (%s)", l.Name, rep, debt)
		case old:
			t.Logf("%s: grandfathered debt: %s", l.Name, debt)
		}
	}
	if n == 0 {
		t.Fatal("no lever's path is on by default")
	}
}

// TestDefaultEvidence_RefusesFailsFewerGatesAndOtherValues: the check
// itself can fail: a FAIL, a PASS of four gates, a mutated run's PASS, a
// PASS of another lever or of another B value are no evidence; a five-gate
// PASS at the default is.
func TestDefaultEvidence_RefusesFailsFewerGatesAndOtherValues(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "MINFER_X")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := levers.Lever{Name: "MINFER_X", Default: "1", DefaultSince: "reports/MINFER_X"}
	write := func(name, lever, verdict, b, mutate string, gs []string) {
		var r gates.Record
		r.Lever, r.Verdict, r.B, r.Mutate, r.Config.Gates = lever, verdict, b, mutate, gs
		data, _ := json.Marshal(&r)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fail.json", "MINFER_X", "FAIL", "1", "", fiveGates)
	write("four.json", "MINFER_X", "PASS", "1", "", fiveGates[:4])
	write("mutated.json", "MINFER_X", "PASS", "1", "slow_decode=0.03", fiveGates)
	write("other.json", "MINFER_Y", "PASS", "1", "", fiveGates)
	write("value.json", "MINFER_X", "PASS", "0", "", fiveGates)
	if rep, why := defaultEvidence(l, root); rep != "" || why == "" {
		t.Fatalf("accepted %q", rep)
	}
	write("pass.json", "MINFER_X", "PASS", "1", "", fiveGates)
	if rep, why := defaultEvidence(l, root); filepath.Base(rep) != "pass.json" {
		t.Fatalf("refused the five-gate PASS: %s", why)
	}
	// A kill switch (no DefaultSince) is looked for in its own folder and
	// the nightly's.
	ks := levers.Lever{Name: "MINFER_NO_X", Default: "0"}
	if rep, _ := defaultEvidence(ks, root); rep != "" {
		t.Fatalf("accepted %q for a lever with no reports", rep)
	}
	dir = filepath.Join(root, "nightly", "MINFER_NO_X")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write("n.json", "MINFER_NO_X", "PASS", "0", "", fiveGates)
	if rep, why := defaultEvidence(ks, root); filepath.Base(rep) != "n.json" {
		t.Fatalf("refused the nightly's five-gate PASS: %s", why)
	}
	if _, why := defaultEvidence(levers.Lever{Name: "MINFER_X", DefaultSince: "c40de5a"}, root); why == "" {
		t.Error("a DefaultSince without a reports folder was accepted")
	}
}

package report

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

func abRecord() *gates.Record {
	a := []float64{400, 402, 398, 401, 399}
	b := []float64{420, 421, 419, 422, 418}
	res := gates.Result{Gate: gates.GateAB, Status: gates.Pass, AB: &gates.ABDetail{Planned: 5}}
	for i := range a {
		res.AB.Rounds = append(res.AB.Rounds, gates.Round{I: i + 1, Order: harness.Order(i),
			A: gates.ArmRun{PP: 4000, TG: a[i]}, B: gates.ArmRun{PP: 4000, TG: b[i]}})
	}
	res.AB.Metrics = []gates.Metric{
		{Key: "pp", Name: "pp512", A: []float64{4000, 4000, 4000, 4000, 4000}, B: []float64{4000, 4000, 4000, 4000, 4000}, Ratios: []float64{1, 1, 1, 1, 1}},
		{Key: "tg", Name: "tg128", A: a, B: b, Ratios: []float64{1.05, 1.05, 1.05, 1.05, 1.05}},
	}
	res.AB.Metrics[1].SummaryA.Median, res.AB.Metrics[1].SummaryB.Median = 400, 420
	return &gates.Record{Lever: "MINFER_X", A: "1", B: "0", Complete: true, Gates: []gates.Result{res},
		Config: gates.Config{BarPP: 1.015, BarTG: 1.015}}
}

func TestWrite_DecodeTimePerTokenPlotBesideReportWithRelativeLink(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "MINFER_X", "2026-01-01T000000-abc")
	if err := Write(base, abRecord()); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(base + ".md")
	if err != nil {
		t.Fatal(err)
	}
	name := "2026-01-01T000000-abc-tg-ms-per-token.png"
	if !strings.Contains(string(md), "!["+name+"]("+name+")") {
		t.Fatalf("no relative link to %s in:\n%s", name, md)
	}
	if !strings.Contains(string(md), "A 2.5000 ms, B 2.3810 ms") {
		t.Errorf("no ms/token line (400 and 420 tok/s) in the report")
	}
	f, err := os.Open(filepath.Join(dir, "MINFER_X", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("%s is not a PNG: %v", name, err)
	}
	ms := MSPerToken([]float64{400, 0})
	if ms[0] != 2.5 || ms[1] != 0 {
		t.Errorf("MSPerToken %v", ms)
	}
}

func TestModelLine_RealSizeNeverZeroBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, make([]byte, 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	e := harness.Environment{Model: harness.EmbeddedModel}
	e.SetModel(path, "")
	line := modelLine(e)
	if e.ModelSize != 3000 || !strings.Contains(line, "3000 bytes") || !strings.Contains(line, "(embedded default) "+path) {
		t.Fatalf("%+v: %s", e, line)
	}
	if l := modelLine(harness.Environment{Model: harness.EmbeddedModel}); strings.Contains(l, "0 bytes") || !strings.Contains(l, "size unknown") {
		t.Errorf("unknown size rendered as %q", l)
	}
}

// A failed suite names why: the failing test's own log lines are in the
// report, under its name.
func TestSuiteSection_QuotesTheFailedTestsLog(t *testing.T) {
	g := gates.Result{Gate: gates.GateSuite, Status: gates.Fail, Reason: "failures: cuda.test: TestX",
		Suite: &gates.SuiteDetail{Binaries: []profile.TestRun{{Binary: "bin/cuda.test", Passed: 3, Failed: 1,
			Failures: []string{"TestX"}, FailureLogs: map[string][]string{"TestX": {"x_test.go:9: diff 0.02 > 1e-3"}}}}}}
	var b strings.Builder
	suiteSection(&b, g)
	if !strings.Contains(b.String(), "bin/cuda.test TestX said") || !strings.Contains(b.String(), "x_test.go:9: diff 0.02 > 1e-3") {
		t.Errorf("the failed test's log is not in the section:\n%s", b.String())
	}
}

// The A/B section states each arm's decode GB/s and share of the HBM floor
// when the gate computed them, and why not when it could not.
func TestABSection_DecodeBandwidthLine(t *testing.T) {
	rec := abRecord()
	g := rec.Gates[0]
	g.AB.Decode = &gates.ABDecode{BytesPerToken: 500_000_000, Method: "minfer info: test",
		A: harness.DecodeBandwidth(500_000_000, 400), B: harness.DecodeBandwidth(500_000_000, 420)}
	var b strings.Builder
	abSection(&b, g, rec, nil)
	if !strings.Contains(b.String(), "A 200.0 GB/s (4.7% of the floor), B 210.0 GB/s (4.9%)") {
		t.Errorf("no decode bandwidth line in:\n%s", b.String())
	}
	g.AB.Decode = &gates.ABDecode{Why: "minfer info: boom"}
	b.Reset()
	abSection(&b, g, rec, nil)
	if !strings.Contains(b.String(), "Decode bandwidth: not computed (minfer info: boom)") {
		t.Errorf("no reason line in:\n%s", b.String())
	}
}

package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

func recWith(pp []float64) *gates.Record {
	tg := make([]float64, len(pp))
	for i, v := range pp {
		tg[i] = v / 10
	}
	return &gates.Record{Lever: "MINFER_X", B: "1", Verdict: gates.VerdictPass, Gates: []gates.Result{{Gate: gates.GateAB, AB: &gates.ABDetail{
		Metrics: []gates.Metric{{Key: "pp", Name: "pp512", B: pp}, {Key: "tg", Name: "tg128", B: tg}}}}}}
}

func noisy(scale float64) []float64 {
	base := []float64{1000, 1004, 997, 1002, 999, 1003, 998, 1001, 1000}
	out := make([]float64, len(base))
	for i, v := range base {
		out[i] = v * scale
	}
	return out
}

func TestCompare_FlagsPlanted5PercentRegression(t *testing.T) {
	var buf bytes.Buffer
	reg, err := CompareMarkdown(&buf, recWith(noisy(1)), recWith(noisy(0.95)), "base.json", "head.json", 0.02)
	if err != nil {
		t.Fatal(err)
	}
	if !reg || !strings.Contains(buf.String(), "regression") {
		t.Fatalf("5%% regression not flagged:\n%s", buf.String())
	}
}

func TestCompare_MarksPlanted0p3PercentChangeTilde(t *testing.T) {
	var buf bytes.Buffer
	reg, err := CompareMarkdown(&buf, recWith(noisy(1)), recWith(noisy(0.997)), "base.json", "head.json", 0.02)
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := Compare(recWith(noisy(1)), recWith(noisy(0.997)), 0.02)
	for _, d := range ds {
		if d.Delta.Verdict != "~" {
			t.Errorf("%s verdict %q, want ~", d.Metric, d.Delta.Verdict)
		}
	}
	if reg {
		t.Fatalf("0.3%% change flagged:\n%s", buf.String())
	}
}

func TestParseThreshold_PercentAndFraction(t *testing.T) {
	for in, want := range map[string]float64{"2%": 0.02, "0.02": 0.02, "2": 0.02} {
		if got, err := ParseThreshold(in); err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
}

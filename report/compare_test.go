package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
)

// rec is a lever result whose rounds have the given B/A ratios, arm A at
// speed a (tok/s) in every round.
func rec(ratios []float64, a float64) *gates.Record {
	m := func(key, name string, scale float64) gates.Metric {
		var av, bv []float64
		for _, r := range ratios {
			av, bv = append(av, a*scale), append(bv, a*scale*r)
		}
		return gates.Metric{Key: key, Name: name, Basis: gates.BasisDevice, A: av, B: bv, Ratios: ratios,
			SummaryB: stats.Summary(bv)}
	}
	r := &gates.Record{Lever: "MINFER_X", A: "0", B: "1", Verdict: gates.VerdictPass,
		Env:    harness.Environment{ModelSHA256: "aaaa", GPU: &harness.Clocks{Name: "NVIDIA H200"}},
		Config: gates.Config{PP: 512, TG: 128, Backend: "cuda"}}
	r.Gates = []gates.Result{{Gate: gates.GateAB, AB: &gates.ABDetail{Metrics: []gates.Metric{m("pp", "pp512", 10), m("tg", "tg128", 1)}}}}
	return r
}

var ratios = []float64{1.10, 1.11, 1.09, 1.10, 1.12, 1.08, 1.10, 1.11, 1.09}

func scaled(rs []float64, f float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r * f
	}
	return out
}

// Two runs of one build nine minutes apart on a drifting machine: the same
// B/A ratios, absolute tok/s 30% lower. It used to read "-36% slower
// (regression)"; on the ratios it is "~".
func TestCompare_DriftOfAbsoluteSpeedWithTheSameRatiosIsTilde(t *testing.T) {
	old, new := rec(ratios, 1000), rec(ratios, 700)
	c, err := gates.CompareRecords(old, new, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if CompareMarkdown(&buf, c, old, new, "old.json", "new.json") {
		t.Fatalf("drift flagged:\n%s", buf.String())
	}
	for _, m := range c.Metrics {
		if m.Verdict != "~" {
			t.Errorf("%s: %s", m.Name, m.Verdict)
		}
	}
	if !strings.Contains(buf.String(), "| geomean") || !strings.Contains(buf.String(), "-30.0%") {
		t.Errorf("no geomean row or absolute change:\n%s", buf.String())
	}
}

func TestCompare_RatioFivePercentLowerIsARegression(t *testing.T) {
	old, new := rec(ratios, 1000), rec(scaled(ratios, 0.95), 1000)
	c, err := gates.CompareRecords(old, new, 0.02)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if !CompareMarkdown(&buf, c, old, new, "old.json", "new.json") || !strings.Contains(buf.String(), "regression") {
		t.Fatalf("5%% regression not flagged:\n%s", buf.String())
	}
}

// Results of different experiments are refused with the field that differs
// (pp512 against pp64; another lever; another GPU).
func TestCompare_IncomparableResultsNameTheField(t *testing.T) {
	for field, change := range map[string]func(r *gates.Record){
		"pp":           func(r *gates.Record) { r.Config.PP = 64 },
		"lever":        func(r *gates.Record) { r.Lever = "MINFER_CACHE_TYPE" },
		"GPU model":    func(r *gates.Record) { r.Env.GPU = nil },
		"model sha256": func(r *gates.Record) { r.Env.ModelSHA256 = "bbbb" },
	} {
		new := rec(ratios, 1000)
		change(new)
		_, err := gates.CompareRecords(rec(ratios, 1000), new, 0.02)
		var inc *gates.Incomparable
		if !errors.As(err, &inc) || inc.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}

func TestParseThreshold_APercentageWithItsSign(t *testing.T) {
	for in, want := range map[string]float64{"2%": 0.02, "0.5%": 0.005, " 10% ": 0.1} {
		if got, err := ParseThreshold(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"2", "0.5", "-1%", "x%", "%"} {
		if _, err := ParseThreshold(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

package report

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
)

func oneAlertHistory(b string) *gates.History {
	c := gates.HistoryChange{ID: gates.ChangeID("MINFER_X", b, "tg", "2026-02-13T010000"), Lever: "MINFER_X", B: b, Metric: "tg", Status: gates.ChangeAlert,
		ChangePoint: stats.ChangePoint{At: 12, P: 0.0002, Before: 1.0304, After: 0.9890, Change: 0.9890/1.0304 - 1, NightsBefore: 12, NightsAfter: 8},
		DateBefore:  "2026-02-12T010000", CommitBefore: "0123456789abcdef", DateAfter: "2026-02-13T010000", CommitAfter: "fedcba9876543210", Open: true}
	s := gates.HistorySeries{Lever: "MINFER_X", A: "1", B: b, Machine: "AMD EPYC", Model: "/m/tiny.gguf", ModelSHA256: "16bf5b3daf33", PP: 32, Current: true,
		Points:  []gates.HistoryPoint{{Night: 0, Date: "2026-02-13T010000", Commit: "fedcba9876543210", TGRatios: []float64{0.989}, TGRatio: 0.989, TGB: 99}},
		Metrics: []gates.HistoryMetric{{Metric: "tg", Nights: 20, Floor: 0.015, FloorSource: "default", Changes: []gates.HistoryChange{c}}}}
	return &gates.History{Dir: "n", Nights: []gates.HistoryNight{{File: "nightly-2026-02-13T010000.json", Date: "2026-02-13T010000"}},
		Levers: []gates.LeverHistory{{Lever: "MINFER_X", Series: []gates.HistorySeries{s}}}}
}

func TestHistoryChangeLineStatesSizeMediansPAndCommits(t *testing.T) {
	h := oneAlertHistory("0")
	want := "MINFER_X=0 tg **-4.02%** (median B/A 1.0304 → 0.9890), p 0.0002, commits 012345678..fedcba987 (nights 2026-02-12T010000 → 2026-02-13T010000), 12 nights before, 8 after"
	if got := changeLine(h.OpenAlerts()[0]); got != want {
		t.Errorf("changeLine =\n%s\nwant\n%s", got, want)
	}
	sec := NightlyHistorySection(h, "history")
	for _, w := range []string{"## History (1 nights: 1 open alerts, 0 pending)", "[MINFER_X](history/MINFER_X.png)", "- **open alert**: " + want} {
		if !strings.Contains(sec, w) {
			t.Errorf("section lacks %q:\n%s", w, sec)
		}
	}
}

func TestHistoryHTMLEscapesRecordedText(t *testing.T) {
	h := oneAlertHistory(`<script>alert(1)</script>`)
	for name, render := range map[string]func() (string, error){
		"index": func() (string, error) { return HistoryIndexHTML(h) },
		"lever": func() (string, error) { return HistoryLeverHTML(h, h.Levers[0], func(string) bool { return false }) },
	} {
		page, err := render()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(page, "<script>") || !strings.Contains(page, "&lt;script&gt;") {
			t.Errorf("%s: a recorded arm value is not escaped", name)
		}
	}
}

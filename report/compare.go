package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
)

// CompareMarkdown writes the comparison of two stored lever results (a
// table per metric: each run's n and median B/A ratio, the change with its
// Mann-Whitney p, the verdict; a geomean row; arm B's absolute speeds with
// both runs' clocks as information) and reports whether a metric regressed.
func CompareMarkdown(w io.Writer, c *gates.RecordChange, old, new *gates.Record, oldName, newName string) bool {
	var rows [][]string
	for _, m := range c.Metrics {
		v := m.Verdict
		if m.Verdict == stats.VerdictSlower && m.Beyond {
			v = "**slower (regression)**"
		}
		rows = append(rows, []string{m.Name + " (" + m.Basis + ")", fmt.Sprint(m.NOld), fmt.Sprintf("%.4f", m.Old), fmt.Sprint(m.NNew), fmt.Sprintf("%.4f", m.New),
			fmt.Sprintf("%+.2f%%", (m.Change-1)*100), fmt.Sprintf("%.3g", m.P), v})
	}
	rows = append(rows, []string{"geomean", "", "", "", "", fmt.Sprintf("%+.2f%%", (c.GeoMean-1)*100), "", ""})
	fmt.Fprintf(w, "### abtest compare: %s = %s vs %s\n\n", c.Lever, c.B, c.A)
	fmt.Fprintf(w, "old `%s` (%s, commit %s) → new `%s` (%s, commit %s). Each run's per-round B/A ratios (drift cancels inside a run, which interleaved its arms) are compared unpaired, by a two-sided Mann-Whitney U test at alpha %.2f; `~`: not significant. A significant slowdown beyond %.1f%% is a regression.\n\n",
		oldName, old.Env.Date, old.Env.ShortCommit(), newName, new.Env.Date, new.Env.ShortCommit(), c.Alpha, c.Threshold*100)
	fmt.Fprintf(w, "%s\n", Table([]string{"metric (basis)", "n old", "B/A old", "n new", "B/A new", "change", "p", "verdict"}, rows))
	var info [][]string
	for _, m := range c.Metrics {
		info = append(info, []string{m.Name, fmt.Sprintf("%.2f", m.OldB), fmt.Sprintf("%.2f", m.NewB), fmt.Sprintf("%+.1f%%", (m.NewB/m.OldB-1)*100)})
	}
	fmt.Fprintf(w, "Arm B's absolute tok/s (information: separate runs carry the machine's drift; clocks old %s, new %s):\n\n%s\n", c.OldClocks, c.NewClocks,
		Table([]string{"metric", "arm B old", "arm B new", "change"}, info))
	fmt.Fprintf(w, "Verdicts of the runs: old %s, new %s.\n", old.Verdict, new.Verdict)
	if c.Regressed {
		fmt.Fprintf(w, "\n**Regression beyond %.1f%%.**\n", c.Threshold*100)
	}
	return c.Regressed
}

// ParseThreshold reads a percentage with its sign ("2%", "0.5%") as a
// fraction; a bare number is refused (0.5 meant 50% and 1 meant 1%).
func ParseThreshold(s string) (float64, error) {
	s = strings.TrimSpace(s)
	num, ok := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("threshold %q: want a percentage with its sign, e.g. 2%%", s)
	}
	return v / 100, nil
}

// BenchLines renders the A/B rounds in Go benchmark format, one line per
// round, arm and metric, so benchstat reads the same data.
func BenchLines(w io.Writer, rec *gates.Record) {
	ab := abOf(rec)
	if ab == nil {
		return
	}
	fmt.Fprintf(w, "goos: linux\npkg: abtest/%s\ncommit: %s\n", rec.Lever, rec.Env.Commit)
	for _, r := range ab.Rounds {
		for _, arm := range []struct {
			name string
			run  gates.ArmRun
		}{{"A", r.A}, {"B", r.B}} {
			for _, m := range []struct {
				name string
				n    int
				v    float64
			}{{"Prefill", rec.Config.PP, arm.run.PP}, {"Decode", rec.Config.TG, arm.run.TG}} {
				if m.v <= 0 {
					continue
				}
				fmt.Fprintf(w, "Benchmark%s/lever=%s/arm=%s 1 %.0f ns/op %.1f tok/s\n", m.name, rec.Lever, arm.name, float64(m.n)/m.v*1e9, m.v)
			}
		}
	}
}

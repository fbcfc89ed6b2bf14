package report

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
)

// MetricDelta is one metric of `abtest compare`.
type MetricDelta struct {
	Metric  string
	Base    float64 // median of base's arm B
	Head    float64
	Delta   stats.Delta
	SignP   float64 // one-sided sign test on per-round head/base, in the direction of the change
	Regress bool    // significantly slower beyond the threshold
}

func abOf(r *gates.Record) *gates.ABDetail {
	for _, g := range r.Gates {
		if g.AB != nil {
			return g.AB
		}
	}
	return nil
}

// Compare diffs two records' arm-B speeds per metric; threshold is a
// fraction (0.02 for 2%).
func Compare(base, head *gates.Record, threshold float64) ([]MetricDelta, error) {
	ba, ha := abOf(base), abOf(head)
	if ba == nil || ha == nil {
		return nil, fmt.Errorf("compare: both results need the ab gate")
	}
	var out []MetricDelta
	for _, hm := range ha.Metrics {
		for _, bm := range ba.Metrics {
			if bm.Key != hm.Key || len(bm.B) == 0 || len(hm.B) == 0 {
				continue
			}
			d := stats.CompareMedians(bm.B, hm.B, threshold)
			md := MetricDelta{Metric: hm.Name, Base: stats.Summary(bm.B).Median, Head: stats.Summary(hm.B).Median, Delta: d}
			n := min(len(bm.B), len(hm.B))
			wins, losses := 0, 0
			for i := 0; i < n; i++ {
				switch {
				case hm.B[i] > bm.B[i]:
					wins++
				case hm.B[i] < bm.B[i]:
					losses++
				}
			}
			md.SignP = stats.SignTest(max(wins, losses), n)
			md.Regress = d.Verdict == stats.VerdictSlower && d.Ratio < 1-threshold
			out = append(out, md)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("compare: no metric in common")
	}
	return out, nil
}

// CompareMarkdown writes the PR-ready diff and reports whether any metric
// regressed.
func CompareMarkdown(w io.Writer, base, head *gates.Record, baseName, headName string, threshold float64) (bool, error) {
	ds, err := Compare(base, head, threshold)
	if err != nil {
		return false, err
	}
	regressed := false
	var rows [][]string
	for _, d := range ds {
		v := d.Delta.Verdict
		if d.Regress {
			regressed = true
			v = "**slower (regression)**"
		}
		rows = append(rows, []string{d.Metric, fmt.Sprintf("%.2f", d.Base), fmt.Sprintf("%.2f", d.Head),
			fmt.Sprintf("%.4f (%+.1f%%)", d.Delta.Ratio, (d.Delta.Ratio-1)*100), fmt.Sprintf("[%.4f, %.4f]", d.Delta.Lo, d.Delta.Hi),
			fmt.Sprintf("%.3g", d.SignP), fmt.Sprintf("%.3g", d.Delta.P), v})
	}
	fmt.Fprintf(w, "### abtest compare: %s (%s=%s)\n\n", head.Lever, head.Lever, head.B)
	fmt.Fprintf(w, "base `%s` (%s, commit %s) → head `%s` (%s, commit %s); arm B tok/s, threshold %.1f%%; `~` = no significant change.\n\n",
		baseName, base.Env.Date, base.Env.ShortCommit(), headName, head.Env.Date, head.Env.ShortCommit(), threshold*100)
	fmt.Fprintf(w, "%s\n", Table([]string{"metric", "base tok/s", "head tok/s", "ratio", "95% CI (bootstrap)", "sign-test p (paired by round)", "Mann-Whitney p", "verdict"}, rows))
	fmt.Fprintf(w, "Verdicts: base %s, head %s.\n", base.Verdict, head.Verdict)
	if regressed {
		fmt.Fprintf(w, "\n**Regression beyond %.1f%%.**\n", threshold*100)
	}
	return regressed, nil
}

// ParseThreshold reads "2%", "0.02" or "2".
func ParseThreshold(s string) (float64, error) {
	s = strings.TrimSpace(s)
	pct := strings.HasSuffix(s, "%")
	var v float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(s, "%"), "%g", &v); err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("threshold %q: want e.g. 2%% or 0.02", s)
	}
	if pct || v >= 1 {
		v /= 100
	}
	return v, nil
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

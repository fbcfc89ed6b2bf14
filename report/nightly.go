package report

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
)

func med(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Summary(xs).Median
}

// entryWorkloadCell names the model (file name, sha256 prefix) and pp a
// lever ran on, with its declared workload when it has one.
func entryWorkloadCell(e gates.NightlyEntry) string {
	c := "-"
	if e.Model != "" {
		c = fmt.Sprintf("%s (%.12s)", filepath.Base(e.Model), e.ModelSHA256)
	}
	if e.PP > 0 {
		c += fmt.Sprintf(" / pp%d", e.PP)
	}
	if e.Workload != "" {
		c += " [declared: " + e.Workload + "]"
	}
	return c
}

// NightlyMarkdown renders a nightly summary.
func NightlyMarkdown(s *gates.NightlySummary, cmdline string) string {
	var b strings.Builder
	count := map[string]int{}
	for _, e := range s.Entries {
		count[e.Verdict]++
	}
	fmt.Fprintf(&b, "**Nightly: %s** — %d levers: %d PASS, %d FAIL, %d INCONCLUSIVE (a gate could not decide), %d PARTIAL, %d SKIP (not run; never counted as PASS), %d other; %d regressions against the previous nightly\n\n",
		s.Verdict, len(s.Entries), count[gates.VerdictPass], count[gates.VerdictFail], count[gates.VerdictInconclusive], count[gates.VerdictPartial], count[gates.VerdictSkip],
		len(s.Entries)-count[gates.VerdictPass]-count[gates.VerdictFail]-count[gates.VerdictInconclusive]-count[gates.VerdictPartial]-count[gates.VerdictSkip], len(s.Regressions))
	fmt.Fprintf(&b, "# abtest nightly %s\n\n", s.Date)
	machine := s.Machine
	if s.GPU != "" {
		machine += " (" + s.GPU + ")"
	}
	fmt.Fprintf(&b, "Machine %s, commit %s, model %s (sha256 %s), pp%d tg%d: the default workload; a lever that declares its own (`minfer levers`: WORKLOAD) runs on that, as its row says.\n\n",
		machine, s.Commit, s.Model, s.ModelSHA256, s.PP, s.TG)
	fmt.Fprintf(&b, "Every lever ran all five gates; the suite gate ran through a cache, so levers whose arm B has the same settings share one run (each report says so).\n\n")
	if sh := s.Shard; sh != nil {
		suite := "shard 0 runs every lever's suite gate; this shard's reports carry it as deferred until the merge"
		if sh.SuiteEveryShard {
			suite = "each shard runs its own levers' suite gate"
		} else if sh.Index == 0 {
			suite = fmt.Sprintf("this shard runs every lever's suite gate: its own levers' in their reports, the other %d levers' kept here for the merge", len(sh.Suites))
		}
		fmt.Fprintf(&b, "**Shard %s** of the night: %d of its %d levers, split %s; %s. Its verdict covers its own levers only: `abtest merge` writes the night's.\n\n",
			sh.Name(), len(sh.Levers()), len(sh.All), sh.Balance, suite)
	}
	if len(s.Merged) > 0 || len(s.Missing) > 0 {
		var parts []string
		for _, m := range s.Merged {
			state := "complete"
			if !m.Complete {
				state = "**stopped early**"
			}
			gpu := ""
			if m.GPU != "" {
				gpu = ", GPU " + m.GPU
			}
			parts = append(parts, fmt.Sprintf("%s (%d levers%s, started %s, %s; `%s`)", m.Name, m.Levers, gpu, m.Date, state, m.Path))
		}
		fmt.Fprintf(&b, "Merged from the shards %s.", strings.Join(parts, ", "))
		if len(s.Missing) > 0 {
			fmt.Fprintf(&b, " **Missing: shard %s** — its levers are INCONCLUSIVE, never a silent gap.", strings.Join(s.Missing, ", "))
		}
		fmt.Fprintf(&b, "\n\n")
	}
	if c := s.Control; c != nil {
		agree := "**yes**: no shard's B/A differs significantly from the first's"
		if !c.Agree {
			agree = "**no**: a shard's B/A differs from the first's (or the lever did not run there): the machines do not measure alike"
		}
		fmt.Fprintf(&b, "**Control lever %s**, run on every shard: do the machines agree? %s (abtest compare's test, unpaired Mann-Whitney at alpha %.2f).\n\n", c.Spec, agree, stats.CompareAlpha)
		var rows [][]string
		for _, sh := range c.Shards {
			for _, m := range sh.Metrics {
				rows = append(rows, []string{sh.Shard, orDash(sh.GPU), sh.Verdict, m.Metric, num(float64(m.Median), "%.4f"), num(float64(m.Against), "%.4f"), num(float64(m.P), "%.3f"), m.Verdict})
			}
			if len(sh.Metrics) == 0 {
				rows = append(rows, []string{sh.Shard, orDash(sh.GPU), sh.Verdict, "-", "-", "-", "-", "-"})
			}
		}
		fmt.Fprintf(&b, "%s\n", Table([]string{"shard", "GPU", "verdict", "metric", "B/A (median)", "against the first shard", "p", ""}, rows))
	}

	fmt.Fprintf(&b, "## Verdict per lever\n\n")
	var rows [][]string
	for _, e := range s.Entries {
		link := "-"
		if e.Report != "" {
			link = fmt.Sprintf("[report](%s)", e.Report)
		}
		secs := "-"
		if e.Seconds > 0 {
			secs = fmt.Sprintf("%.0f", e.Seconds)
		}
		rows = append(rows, []string{e.Lever, e.A + " → " + e.B, e.Backend, entryWorkloadCell(e), "**" + e.Verdict + "**", e.Line, secs, link})
	}
	fmt.Fprintf(&b, "%s\n", Table([]string{"lever", "A → B", "backend", "model (sha256) / pp", "verdict", "verdict line / reason", "s", "report"}, rows))

	fmt.Fprintf(&b, "## Speed (tok/s, median over the interleaved rounds; B/A is the median per-round ratio)\n\n")
	rows = nil
	for _, e := range s.Entries {
		if len(e.PPB) == 0 && len(e.TGB) == 0 {
			continue
		}
		rows = append(rows, []string{e.Lever, entryWorkloadCell(e), num(med(e.PPA), "%.1f"), num(med(e.PPB), "%.1f"), num(float64(e.PPRatio), "%.4f"),
			num(med(e.TGA), "%.2f"), num(med(e.TGB), "%.2f"), num(float64(e.TGRatio), "%.4f"), num(1000/med(e.TGB), "%.4f")})
	}
	fmt.Fprintf(&b, "%s\n", Table([]string{"lever", "model (sha256) / pp", "pp A", "pp B", "pp B/A", "tg A", "tg B", "tg B/A", "decode ms/token B"}, rows))

	fmt.Fprintf(&b, "## Against the previous nightly (arm B now / arm B then; threshold %.1f%%)\n\n", s.Threshold*100)
	if s.PrevNote != "" {
		fmt.Fprintf(&b, "%s.\n\n", s.PrevNote)
	}
	rows = nil
	for _, e := range s.Entries {
		for _, d := range e.Against {
			v := d.Verdict
			switch v {
			case stats.VerdictSlower:
				v = "**REGRESSION (slower)**"
			case gates.VerdictNotComparable:
				v = "not comparable: " + d.Note
			}
			rows = append(rows, []string{e.Lever, d.Metric, num(float64(d.Ratio), "%.4f"), fmt.Sprintf("[%s, %s]", num(float64(d.Lo), "%.4f"), num(float64(d.Hi), "%.4f")), v})
		}
	}
	if s.Previous != "" {
		fmt.Fprintf(&b, "Previous: %s.\n\n", s.Previous)
		if len(rows) > 0 {
			fmt.Fprintf(&b, "%s\n", Table([]string{"lever", "metric", "now / previous", "95% CI", "verdict"}, rows))
		}
	}
	if len(s.Regressions) > 0 {
		fmt.Fprintf(&b, "Regressions:\n\n")
		for _, r := range s.Regressions {
			fmt.Fprintf(&b, "- %s\n", r)
		}
		fmt.Fprintf(&b, "\n")
	}
	fmt.Fprintf(&b, "## Reproduce\n\n```sh\n%s\n```\n", cmdline)
	return b.String()
}

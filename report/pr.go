package report

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
	"github.com/minfer-go/minfer/harness/stats"
)

// PRPageLimit bounds a pull-request page: a comment longer than this is
// refused by the code host, so the details fold and shorten first.
const PRPageLimit = 60000

// PRMarkdown renders a pull-request run as one page to paste as a comment:
// the verdict, a summary table (workload, metric, base and head tok/s, the
// head/base ratio with its CI, p, verdict), whether outputs changed, then
// each workload's details folded. Kept under PRPageLimit characters.
func PRMarkdown(p *gates.PRRun) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("**abtest pr: %s**\n\n", p.VerdictLine)
	w("Base `%s` (%s) → head `%s` (%s)", p.Base.Dir, commit12(p.Base.Commit), p.Head.Dir, commit12(p.Head.Commit))
	if len(p.HeadEnv) > 0 {
		w("; head only: %s", envLine(p.HeadEnv))
	}
	w(". Each workload is one interleaved run of both builds (base = arm A, head = arm B), so drift hits both alike; rounds and power as `abtest run`. Outputs: %s.\n\n", p.Tolerance)
	var rows [][]string
	var notMeasured []string
	for _, wl := range p.Workloads {
		ab := abOf(wl.Record)
		if ab == nil {
			rows = append(rows, []string{wl.Workload, "-", "-", "-", "-", "-", "-", "**" + wl.Verdict + "**"})
			continue
		}
		mem := prMemCell(ab.Memory)
		if m := ab.Memory; m != nil && m.Status == gates.MemNotMeasured {
			notMeasured = append(notMeasured, wl.Workload+": "+m.Why)
		}
		for _, m := range ab.Metrics {
			if len(m.Ratios) == 0 {
				continue
			}
			v := gates.MetricVerdict(m)
			if v == stats.VerdictSlower {
				v = "**slower**"
			}
			p := m.NotSlower.P
			if m.Claim.Claim {
				p = m.Claim.P
			}
			rows = append(rows, []string{wl.Workload, m.Name + " (" + m.Basis + ")", fmt.Sprintf("%.2f", m.SummaryA.Median), fmt.Sprintf("%.2f", m.SummaryB.Median),
				fmt.Sprintf("%s [%s, %s]", f4(float64(m.Median)), f4(float64(m.CILo)), f4(float64(m.CIHi))), g3(p), mem, v})
		}
	}
	w("%s\n", Table([]string{"workload", "metric", "base tok/s", "head tok/s", "head/base [95% CI]", "p", "peak device memory base / head", "verdict"}, rows))
	if len(notMeasured) > 0 {
		w("Device memory not measured: %s.\n\n", clip(strings.Join(notMeasured, "; "), 600))
	} else {
		w("Peak device memory: each build's largest per-process peak over its gate-3 processes, sampled from outside the process; the bar: %s.\n\n", harness.DefaultMemory.String())
	}
	var orows [][]string
	for _, wl := range p.Workloads {
		orows = append(orows, []string{wl.Workload, outputsCell(wl), "**" + wl.Verdict + "**"})
	}
	w("%s\n", Table([]string{"workload", "outputs", "verdict"}, orows))
	for _, wl := range p.Workloads {
		w("<details><summary>%s: %s</summary>\n\n%s\n", wl.Workload, wl.Verdict, clip(wl.Why, 2000))
		if wl.Record != nil {
			for _, g := range wl.Record.Gates {
				w("- %s: %s — %s\n", g.Gate, g.Status, clip(g.Reason, 600))
			}
			if line := PowerLine(wl.Record); line != "" {
				w("\nPower: %s\n", clip(line, 1500))
			}
		}
		if wl.Report != "" {
			w("\nFull report: [%s](%s)\n", filepath.Base(wl.Report), wl.Report)
		}
		w("\n</details>\n\n")
	}
	w("<details><summary>reproduce</summary>\n\n```sh\n%s\n```\n\n</details>\n", p.CommandLine)
	s := b.String()
	if len(s) > PRPageLimit {
		s = s[:PRPageLimit-200] + "\n\n… (cut at the page limit; the JSON beside this page holds everything)\n"
	}
	return s
}

// prMemCell is a workload's peak device memory, base / head.
func prMemCell(m *gates.MemoryCheck) string {
	switch {
	case m == nil || m.Status == gates.MemNotMeasured:
		return "not measured"
	case m.Status == gates.MemOver:
		return fmt.Sprintf("**%s / %s (%s), over the bar**", gpumem.GiB(m.A.PeakBytes), gpumem.GiB(m.B.PeakBytes), gates.RelPct(m.A.PeakBytes, m.B.PeakBytes))
	}
	return fmt.Sprintf("%s / %s (%s)", gpumem.GiB(m.A.PeakBytes), gpumem.GiB(m.B.PeakBytes), gates.RelPct(m.A.PeakBytes, m.B.PeakBytes))
}

// outputsCell says whether the head's outputs changed: bitwise, inside the
// declared class, or outside it (which gate said so).
func outputsCell(wl gates.PRWorkload) string {
	if len(wl.Changed) > 0 {
		return "**changed**: " + clip(strings.Join(wl.Changed, "; "), 300)
	}
	if wl.Record == nil {
		return "-"
	}
	if len(wl.InBase) > 0 {
		return "the same in both builds; **both fail**: " + clip(strings.Join(wl.InBase, "; "), 300)
	}
	var parts []string
	for _, g := range wl.Record.Gates {
		switch {
		case g.Parity != nil:
			parts = append(parts, "parity "+string(g.Status)+" ("+clip(g.Evidence, 120)+")")
		case g.Greedy != nil:
			parts = append(parts, "greedy "+string(g.Status)+" ("+g.Evidence+")")
		}
	}
	return strings.Join(parts, "; ")
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func commit12(c string) string {
	if c == "" {
		return "unknown commit"
	}
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// abOf is a record's gate 3 detail (nil without one).
func abOf(r *gates.Record) *gates.ABDetail {
	if r == nil {
		return nil
	}
	for _, g := range r.Gates {
		if g.AB != nil {
			return g.AB
		}
	}
	return nil
}

// PRBenchLines renders every round of every workload in Go benchmark
// format (build=base / build=head), so benchstat reads the same data.
func PRBenchLines(w io.Writer, p *gates.PRRun) {
	fmt.Fprintf(w, "goos: linux\npkg: abtest/pr\nbase: %s\nhead: %s\n", p.Base.Commit, p.Head.Commit)
	for _, wl := range p.Workloads {
		ab := abOf(wl.Record)
		if ab == nil {
			continue
		}
		name := strings.NewReplacer(":", "_", "@", "_", " ", "_").Replace(wl.Workload)
		for _, r := range ab.Rounds {
			for _, arm := range []struct {
				build string
				run   gates.ArmRun
			}{{"base", r.A}, {"head", r.B}} {
				for _, m := range []struct {
					name string
					n    int
					v    float64
				}{{"Prefill", wl.Record.Config.PP, arm.run.PP}, {"Decode", wl.Record.Config.TG, arm.run.TG}} {
					if m.v > 0 {
						fmt.Fprintf(w, "Benchmark%s/workload=%s/build=%s 1 %.0f ns/op %.1f tok/s\n", m.name, name, arm.build, float64(m.n)/m.v*1e9, m.v)
					}
				}
			}
		}
	}
}

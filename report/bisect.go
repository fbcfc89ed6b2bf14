package report

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/gates"
)

// BisectMarkdown renders a bisect: the verdict first, then the search
// (every step's evidence), the confirmation of last good against first bad
// and their per-kernel difference.
func BisectMarkdown(r *gates.BisectRun) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("**Bisect: %s**\n\n", r.Line)
	w("# abtest bisect %s..%s\n\n", gates.Short(r.Good), gates.Short(r.Bad))
	what := map[string]string{
		gates.BisectSpeed:  "the first commit at which the workload's speed changed (slower, or faster)",
		gates.BisectLever:  "the first commit at which the gain of " + r.Lever + " vanished",
		gates.BisectOutput: "the first commit at which greedy output changed",
	}[r.Mode]
	w("Looking for %s: workload %s", what, r.Workload)
	if r.Metric != "" {
		w(", metric %s on %s time", r.Metric, r.Basis)
	}
	w(", threshold %.1f%%, on %s; %d commits on the first-parent line after the good end.\n\n", r.Threshold*100, r.Machine, len(r.Commits)-1)
	w("Each probed commit ran interleaved against both ends (a lever's gain: its own arms, against the ends' gains) and is judged by the distribution-free %.0f%% interval of its median distance from the midpoint between the ends: wholly on good's side \"like good\", on bad's \"like bad\", else more rounds up to the cap, then \"unknown\" (skipped, as `git bisect skip`). A commit that does not build is skipped too.\n\n", gates.BisectConfidence*100)

	w("## The ends\n\n")
	if p := r.Reproduce; p != nil {
		w("%s: %s (%.0f s).\n\n", strings.ToUpper(string(p.Outcome)), p.Why, p.Seconds)
		if p.Outcome != gates.LikeBad {
			w("The difference did not reproduce in an interleaved run of the two ends, so nothing was bisected.\n\n")
		}
	}
	if len(r.Steps) > 0 {
		w("## Steps\n\n")
		var rows [][]string
		for i, s := range r.Steps {
			rows = append(rows, []string{fmt.Sprint(i + 1), "`" + gates.Short(s.Commit) + "`", s.Subject, "**" + string(s.Outcome) + "**", roundsCell(s), s.Why, fmt.Sprintf("%.0f", s.Seconds)})
		}
		w("%s\n", Table([]string{"step", "commit", "subject", "outcome", "rounds", "evidence", "s"}, rows))
	}
	if r.FirstBad != "" {
		w("## Result\n\n")
		w("- last good: `%s` %s\n- first bad: `%s` %s\n", r.LastGood, subjectOf(r, r.LastGood), r.FirstBad, subjectOf(r, r.FirstBad))
		for _, c := range r.Between {
			w("- could not be judged, in the range: `%s` %s\n", c, subjectOf(r, c))
		}
		w("\n")
	}
	if f := r.Final; f != nil {
		w("## Confirmation: last good against first bad\n\n%s: %s (%.0f s).\n\n", strings.ToUpper(string(f.Outcome)), f.Why, f.Seconds)
	}
	if p := r.Profile; p != nil && p.Profile != nil {
		d := p.Profile
		w("## Per-kernel difference (last good = A, first bad = B)\n\n%s.\n\n", p.Evidence)
		if len(d.Diff) > 0 {
			var rows [][]string
			for _, k := range d.Diff {
				rows = append(rows, []string{"`" + k.Kernel + "`", fmt.Sprint(k.A), fmt.Sprint(k.B), fmt.Sprintf("%+d", k.B-k.A)})
			}
			w("Launch census (launches per bench process):\n\n%s\n", Table([]string{"kernel", "A", "B", "B − A"}, rows))
		} else if len(d.Missing) == 0 {
			w("The launch census is the same in both builds: the change is inside the kernels (or on the host), not in which kernels launch.\n\n")
		}
		if len(d.NCU) > 0 {
			var rows [][]string
			for _, k := range d.NCU {
				rows = append(rows, []string{k.Arm, "`" + k.Kernel + "`", Fnum(float64(k.DurNS)/1000, "%.2f"), Fnum(float64(k.GBs), "%.0f")})
			}
			w("ncu (mean of 5 launches):\n\n%s\n", Table([]string{"arm", "kernel", "µs", "GB/s"}, rows))
		}
	}
	w("## Builds\n\n")
	var rows [][]string
	for i, c := range r.Commits {
		dir, ok := r.Builds[c]
		switch {
		case !ok:
			dir = "not needed"
		case dir == "":
			dir = "could not be tested"
		}
		rows = append(rows, []string{fmt.Sprint(i), "`" + gates.Short(c) + "`", r.Subjects[i], dir})
	}
	w("%s\n", Table([]string{"#", "commit", "subject", "build"}, rows))
	w("## Reproduce\n\n```sh\n%s\n```\n", r.CommandLine)
	return b.String()
}

func roundsCell(s gates.BisectStep) string {
	if s.Rounds == 0 {
		return "-"
	}
	return fmt.Sprint(s.Rounds)
}

func subjectOf(r *gates.BisectRun, c string) string {
	for i, x := range r.Commits {
		if x == c && i < len(r.Subjects) {
			return "(" + r.Subjects[i] + ")"
		}
	}
	return ""
}

package report

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
)

// CalibrationSummary is one line: the sd per key and the rounds it
// pre-registers.
func CalibrationSummary(c *gates.Calibration) string {
	var parts []string
	for _, k := range gates.CalibrationKeys {
		if sd, ok := c.SD[k]; ok {
			r := c.Preregistered[k]
			parts = append(parts, fmt.Sprintf("%s sd %.4f -> %d rounds (power %.2f)", k, sd, r.N, r.Power))
		}
	}
	return strings.Join(parts, "; ")
}

// CalibrationMarkdown renders an A/A calibration.
func CalibrationMarkdown(c *gates.Calibration, file string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# abtest calibrate: %s\n\n", c.Workload)
	machine := c.GPU
	if machine == "" {
		machine = "CPU " + c.CPU
	}
	clocks := "n/a"
	if c.Clocks != nil {
		clocks = c.Clocks.String()
	}
	w("%s\n", Table([]string{"what", "value"}, [][]string{
		{"date", c.Created.Format(time.RFC3339)}, {"machine", machine}, {"clocks at the start", clocks}, {"backend", c.Backend},
		{"host", c.Host}, {"commit", c.Commit}, {"model", c.Model + " sha256 " + c.ModelSHA256},
		{"shapes", fmt.Sprintf("pp%d tg%d%s, %d repetitions per process", c.PP, c.TG, depthNote(c.Depth), c.Reps)}, {"A/A rounds", fmt.Sprint(c.Rounds)},
		{"file", file},
	}))
	w("Per-round noise (sd of ln(A'/A), the same build and settings in both arms, rounds alternating AB/BA, one process per arm and round), and what it pre-registers for gate 3 at GATES.md's default bars (1.015, power >= %.1f against a slowdown of x1.03, at most %d rounds):\n\n", stats.TargetPower, stats.MaxRounds)
	var rows [][]string
	keys := make([]string, 0, len(c.SD))
	for k := range c.SD {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := c.Preregistered[k]
		fp := c.ClaimFP[k]
		flag := ""
		if fp > gates.ClaimFPMax {
			flag = " (above 5%: a claim needs more rounds or a higher bar)"
		}
		rows = append(rows, []string{k, fmt.Sprintf("%.4f", c.SD[k]), fmt.Sprint(r.N), fmt.Sprintf("%.3f", r.Power), fmt.Sprintf("%.2f%%", (r.MinDetectable-1)*100), fmt.Sprintf("%.3f%s", fp, flag)})
	}
	w("%s\n", Table([]string{"metric_basis", "sd of log ratio", "rounds pre-registered", "power at x1.03", "smallest slowdown refused with 0.8", "improvement claim fires on A/A (resampled)"}, rows))
	var rr [][]string
	for _, r := range c.AB.Rounds {
		row := []string{fmt.Sprint(r.I), r.Order, fmt.Sprintf("%.2f / %.2f", r.A.PP, r.B.PP), fmt.Sprintf("%.2f / %.2f", r.A.TG, r.B.TG)}
		dev := "-"
		if r.A.TGDev > 0 {
			dev = fmt.Sprintf("%.2f / %.2f", r.A.TGDev, r.B.TGDev)
		}
		rr = append(rr, append(row, dev, r.Clock))
	}
	w("Every round (tok/s, A / A'):\n\n%s\n", Table([]string{"round", "order", "pp (wall)", "tg (wall)", "tg (device)", "clocks"}, rr))
	w("## Reproduce\n\n```sh\n%s\n```\n", c.CommandLine)
	return b.String()
}

// depthNote is " at depth N" for a workload with a filled KV cache.
func depthNote(depth int) string {
	if depth <= 0 {
		return ""
	}
	return fmt.Sprintf(" at depth %d", depth)
}

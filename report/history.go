package report

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
)

// The nightly history's pages: markdown (history.md and a section of the
// nightly page), a PNG per lever, and the static dashboard (history_html.go).

// File names of a history's outputs: the orchestration writes them, the
// pages link them, so both take them from here.
const (
	HistoryMarkdownName = "history.md"
	HistoryJSONName     = "history.json"
	HistoryIndexName    = "index.html"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileSafe(s string) string {
	if s = strings.Trim(unsafeName.ReplaceAllString(s, "-"), "-"); s == "" {
		return "lever"
	}
	return s
}

// HistoryPlotName is a lever's plot (ratio and arm B tok/s per night).
func HistoryPlotName(lever string) string { return fileSafe(lever) + ".png" }

// HistoryTrendName is a lever's small trend plot (the dashboard's index).
func HistoryTrendName(lever string) string { return fileSafe(lever) + "-trend.png" }

// HistoryPageName is a lever's dashboard page.
func HistoryPageName(lever string) string { return fileSafe(lever) + ".html" }

// NightlyPage is the markdown page of a stored nightly (its .json's name).
func NightlyPage(jsonFile string) string { return strings.TrimSuffix(jsonFile, ".json") + ".md" }

// seriesLabel names a series: arm B, model file, pp, machine.
func seriesLabel(s gates.HistorySeries) string {
	model := "?"
	if s.Model != "" {
		model = filepath.Base(strings.TrimSpace(s.Model))
	}
	pp := "pp not recorded"
	if s.PP > 0 {
		pp = fmt.Sprintf("pp%d", s.PP)
	}
	return fmt.Sprintf("B=%s, %s (%.12s) %s, %s", s.B, model, s.ModelSHA256, pp, s.Machine)
}

// changeLine states a change: its size, the medians either side, p, and the
// commit range between the last night before and the first night after.
func changeLine(c gates.HistoryChange) string {
	return fmt.Sprintf("%s=%s %s **%s** (median B/A %s → %s), p %s, commits %s..%s (nights %s → %s), %d nights before, %d after",
		c.Lever, c.B, c.Metric, signedPct(c.Change), f4(c.Before), f4(c.After), pValue(c.P), shortSHA(c.CommitBefore), shortSHA(c.CommitAfter),
		c.DateBefore, c.DateAfter, c.NightsBefore, c.NightsAfter)
}

// changeState is an alert's state: open, or why it is closed; pending.
func changeState(c gates.HistoryChange) string {
	switch {
	case c.Status == gates.ChangePending:
		return fmt.Sprintf("pending: %d of %d nights after it", c.NightsAfter, stats.ChangeMinNights)
	case c.Open:
		return "**open**"
	}
	return "closed: " + c.Closed
}

// HistoryMethod states how changes are found, for every page that shows them.
func HistoryMethod() string {
	return fmt.Sprintf("E-divisive means (Matteson & James 2014; α = 1) over each series' nights, the distance between two nights the mean |log ratio| "+
		"difference over all their rounds; the best split tested by a permutation test (%d permutations of the nights within each segment, fixed seed %#x, "+
		"so the same history gives the same answer), kept at p ≤ %g, then searched again inside its parts. A change smaller than the series' floor "+
		"(its calibration's per-round sd of the metric, or %.1f%% where its machine and model have none) is not reported. A change gets a verdict only "+
		"with %d nights on each side; a newer one is pending.",
		stats.ChangePermutations, uint64(stats.ChangeSeed), stats.ChangeAlpha, stats.ChangeDefaultFloor*100, stats.ChangeMinNights)
}

// latest is a series' newest value of a metric (NaN when none).
func latest(s gates.HistorySeries, metric string) float64 {
	for i := len(s.Points) - 1; i >= 0; i-- {
		if r, v, _ := s.Points[i].Ratios(metric); len(r) > 0 {
			return v
		}
	}
	return math.NaN()
}

// HistoryMarkdown renders the history page; toDir is the nightly folder
// relative to the page (the lever reports' links start there).
func HistoryMarkdown(h *gates.History, toDir string) string {
	var b strings.Builder
	open, pending := h.OpenAlerts(), h.Changes(gates.ChangePending)
	first, last := "-", "-"
	if len(h.Nights) > 0 {
		first, last = h.Nights[0].Date, h.Nights[len(h.Nights)-1].Date
	}
	fmt.Fprintf(&b, "**History: %d open alerts, %d pending** — %d levers over %d nights (%s to %s)\n\n", len(open), len(pending), len(h.Levers), len(h.Nights), first, last)
	fmt.Fprintf(&b, "# abtest history %s\n\n", h.Dir)
	fmt.Fprintf(&b, "Each lever's B/A ratio per night (the median of the night's per-round ratios; drift cancels inside a night), per metric, on one machine "+
		"and workload: a changed workload starts a new series. Arm B's tok/s is shown, not judged.\n\n")
	fmt.Fprintf(&b, "Change points: %s\n\n", HistoryMethod())
	if len(h.Unreadable) > 0 {
		fmt.Fprintf(&b, "**Unreadable nightly summaries, not in this history:**\n\n")
		for _, u := range h.Unreadable {
			fmt.Fprintf(&b, "- %s\n", u)
		}
		fmt.Fprintf(&b, "\n")
	}
	fmt.Fprintf(&b, "## Open alerts\n\n")
	if len(open) == 0 {
		fmt.Fprintf(&b, "None.\n\n")
	}
	for _, c := range open {
		fmt.Fprintf(&b, "- %s. Acknowledge: the line `%s` in the acknowledgements file.\n", changeLine(c), c.ID)
	}
	if len(open) > 0 {
		fmt.Fprintf(&b, "\n")
	}
	fmt.Fprintf(&b, "## Pending (fewer than %d nights after them: no verdict yet)\n\n", stats.ChangeMinNights)
	if len(pending) == 0 {
		fmt.Fprintf(&b, "None.\n\n")
	}
	for _, c := range pending {
		fmt.Fprintf(&b, "- %s.\n", changeLine(c))
	}
	if len(pending) > 0 {
		fmt.Fprintf(&b, "\n")
	}
	fmt.Fprintf(&b, "## Levers\n\n")
	var rows [][]string
	for _, l := range h.Levers {
		for _, s := range l.Series {
			if !s.Current {
				continue
			}
			alerts := 0
			for _, m := range s.Metrics {
				for _, c := range m.Changes {
					if c.Open {
						alerts++
					}
				}
			}
			rows = append(rows, []string{fmt.Sprintf("[%s](#%s)", l.Lever, strings.ToLower(l.Lever)), seriesLabel(s), fmt.Sprint(len(s.Points)),
				num(latest(s, "pp"), "%.4f"), num(latest(s, "tg"), "%.4f"), fmt.Sprint(alerts), fmt.Sprintf("[plot](%s)", HistoryPlotName(l.Lever))})
		}
	}
	fmt.Fprintf(&b, "%s\n", Table([]string{"lever", "current series", "nights", "latest pp B/A", "latest tg B/A", "open alerts", "plot"}, rows))
	for _, l := range h.Levers {
		fmt.Fprintf(&b, "## %s\n\n![%s per night](%s)\n\n", l.Lever, l.Lever, HistoryPlotName(l.Lever))
		for _, s := range l.Series {
			state := "current"
			if !s.Current {
				state = "ended"
			}
			fmt.Fprintf(&b, "### %s (%s, %d nights)\n\n", seriesLabel(s), state, len(s.Points))
			for _, n := range s.Notes {
				fmt.Fprintf(&b, "- note: %s\n", n)
			}
			for _, m := range s.Metrics {
				fmt.Fprintf(&b, "- %s: %d nights, floor %s (%s)", m.Metric, m.Nights, Pct(m.Floor), m.FloorSource)
				if len(m.Changes) == 0 {
					fmt.Fprintf(&b, "; no change\n")
					continue
				}
				fmt.Fprintf(&b, "\n")
				for _, c := range m.Changes {
					fmt.Fprintf(&b, "  - %s: %s\n", changeLine(c), changeState(c))
				}
			}
			fmt.Fprintf(&b, "\n%s\n", Table([]string{"night", "commit", "pp B/A", "tg B/A", "pp arm B tok/s", "tg arm B tok/s", "rounds", "change", "report"},
				seriesRows(s, toDir)))
		}
	}
	return b.String()
}

// historyRow is one night of a series as the tables show it.
type historyRow struct {
	Point                                  gates.HistoryPoint
	Date, Commit, PP, TG, PPB, TGB, Change string
	Rounds                                 int
}

// historyRows are a series' nights, newest first; Change marks the first
// night after each change.
func historyRows(s gates.HistorySeries) []historyRow {
	marks := map[string][]string{}
	for _, m := range s.Metrics {
		for _, c := range m.Changes {
			w := fmt.Sprintf("%s %s", m.Metric, signedPct(c.Change))
			if c.Status == gates.ChangePending {
				w += " (pending)"
			}
			marks[c.DateAfter] = append(marks[c.DateAfter], w)
		}
	}
	var rows []historyRow
	for i := len(s.Points) - 1; i >= 0; i-- {
		p := s.Points[i]
		rows = append(rows, historyRow{Point: p, Date: p.Date, Commit: shortSHA(p.Commit), PP: num(float64(p.PPRatio), "%.4f"), TG: num(float64(p.TGRatio), "%.4f"),
			PPB: num(float64(p.PPB), "%.1f"), TGB: num(float64(p.TGB), "%.2f"), Change: orDash(strings.Join(marks[p.Date], "; ")),
			Rounds: max(len(p.PPRatios), len(p.TGRatios))})
	}
	return rows
}

// seriesRows are a series' markdown rows; toDir leads from the page to the
// nightly folder, where the lever reports' paths start.
func seriesRows(s gates.HistorySeries, toDir string) [][]string {
	var rows [][]string
	for _, r := range historyRows(s) {
		link := "-"
		if r.Point.Report != "" {
			link = fmt.Sprintf("[report](%s)", path.Join(toDir, r.Point.Report))
		}
		rows = append(rows, []string{r.Date, r.Commit, r.PP, r.TG, r.PPB, r.TGB, fmt.Sprint(r.Rounds), r.Change, link})
	}
	return rows
}

// NightlyHistorySection is the nightly page's history section: the history
// page, each lever's plot, the open alerts and the pending changes;
// toHistory is the history's folder relative to the nightly page. The
// caller appends it to NightlyMarkdown's page.
func NightlyHistorySection(h *gates.History, toHistory string) string {
	var b strings.Builder
	open, pending := h.OpenAlerts(), h.Changes(gates.ChangePending)
	fmt.Fprintf(&b, "## History (%d nights: %d open alerts, %d pending)\n\n", len(h.Nights), len(open), len(pending))
	fmt.Fprintf(&b, "Every lever's B/A ratio across the nights of this folder: [%s](%s).", HistoryMarkdownName, path.Join(toHistory, HistoryMarkdownName))
	if len(h.Unreadable) > 0 {
		fmt.Fprintf(&b, " Unreadable summaries, not in it: %s.", strings.Join(h.Unreadable, "; "))
	}
	fmt.Fprintf(&b, "\n\n")
	var plots []string
	for _, l := range h.Levers {
		plots = append(plots, fmt.Sprintf("[%s](%s)", l.Lever, path.Join(toHistory, HistoryPlotName(l.Lever))))
	}
	if len(plots) > 0 {
		fmt.Fprintf(&b, "Plots: %s.\n\n", strings.Join(plots, ", "))
	}
	for _, c := range open {
		fmt.Fprintf(&b, "- **open alert**: %s\n", changeLine(c))
	}
	for _, c := range pending {
		fmt.Fprintf(&b, "- pending: %s\n", changeLine(c))
	}
	if len(open)+len(pending) > 0 {
		fmt.Fprintf(&b, "\n")
	}
	return b.String()
}

// nightTicks label the night axis with the nights' dates (MM-DD), about
// eight of them.
type nightTicks []gates.HistoryNight

func (n nightTicks) Ticks(lo, hi float64) []plot.Tick {
	first, last := max(0, int(math.Ceil(lo))), min(len(n)-1, int(math.Floor(hi)))
	step := max(1, (last-first+1+7)/8)
	var ts []plot.Tick
	for i := first; i <= last; i++ {
		t := plot.Tick{Value: float64(i)}
		if (i-first)%step == 0 {
			t.Label = n[i].Date
			if len(t.Label) >= 10 {
				t.Label = t.Label[5:10]
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// HistoryPlot draws a lever's history: per metric (rows pp, tg), its B/A
// ratio per night with each series' segment medians and change points
// (dashed: a verdict; dotted: pending), and arm B's tok/s.
func HistoryPlot(file string, h *gates.History, l gates.LeverHistory) error {
	const rows, cols = 2, 2
	plots := make([][]*plot.Plot, rows)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range l.Series {
		lo, hi = min(lo, float64(s.Points[0].Night)), max(hi, float64(s.Points[len(s.Points)-1].Night))
	}
	for r, metric := range []string{"pp", "tg"} {
		plots[r] = make([]*plot.Plot, cols)
		ratio, tok := plot.New(), plot.New()
		ratio.Title.Text = fmt.Sprintf("%s: %s B/A per night", l.Lever, metric)
		ratio.Y.Label.Text = "B / A (higher: B faster)"
		tok.Title.Text = fmt.Sprintf("%s: arm B %s tok/s per night", l.Lever, metric)
		tok.Y.Label.Text = "tok/s (median of the rounds)"
		ylo, yhi := 1.0, 1.0
		blo, bhi := math.Inf(1), math.Inf(-1)
		for si, s := range l.Series {
			var rp, bp plotter.XYs
			for _, p := range s.Points {
				if rs, v, b := p.Ratios(metric); len(rs) > 0 {
					rp = append(rp, plotter.XY{X: float64(p.Night), Y: v})
					bp = append(bp, plotter.XY{X: float64(p.Night), Y: b})
					ylo, yhi = min(ylo, v), max(yhi, v)
					blo, bhi = min(blo, b), max(bhi, b)
				}
			}
			if len(rp) == 0 {
				continue
			}
			for _, pair := range []struct {
				p   *plot.Plot
				pts plotter.XYs
			}{{ratio, rp}, {tok, bp}} {
				ln, sc, err := plotter.NewLinePoints(pair.pts)
				if err != nil {
					return err
				}
				ln.Color, sc.Color, sc.Shape = plotutil.Color(si), plotutil.Color(si), plotutil.Shape(si)
				pair.p.Add(ln, sc)
				if pair.p == ratio && len(l.Series) > 1 {
					pair.p.Legend.Add(seriesLabel(s), ln, sc)
				}
			}
			if err := addSegments(ratio, s, metric, si); err != nil {
				return err
			}
		}
		pad := max((yhi-ylo)*0.15, 0.002)
		ratio.Y.Min, ratio.Y.Max = ylo-pad, yhi+pad
		if len(l.Series) > 1 {
			// Room above the points for the legend, a line per series.
			ratio.Y.Max += (yhi - ylo + 2*pad) * 0.08 * float64(len(l.Series))
		}
		if bhi >= blo {
			// At least ±1% around arm B's speeds, so one night's axis does not zoom into rounding.
			pad := max((bhi-blo)*0.15, 0.01*bhi)
			tok.Y.Min, tok.Y.Max = blo-pad, bhi+pad
		}
		for _, p := range []*plot.Plot{ratio, tok} {
			p.X.Tick.Marker = nightTicks(h.Nights)
			p.X.Label.Text = "night"
			p.X.Min, p.X.Max = lo-0.5, hi+0.5
			p.Title.TextStyle.Font.Size = vg.Points(10)
		}
		ratio.Y.Tick.Marker = preciseTicks{}
		tok.Y.Tick.Marker = preciseTicks{}
		ratio.Legend.Top = true
		ratio.Legend.TextStyle.Font.Size = vg.Points(7)
		if err := hline(ratio, 1, lo-0.5, hi+0.5, []vg.Length{vg.Points(1), vg.Points(2)}); err != nil {
			return err
		}
		plots[r][0], plots[r][1] = ratio, tok
	}
	img := vgimg.New(11*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: 6 * vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(plots, t, dc)
	for j := range rows {
		for i := range cols {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	return savePNG(file, img)
}

// addSegments draws a series' segment medians (dashed, from the changes'
// before/after medians, or the whole series' median without a change) and
// a vertical line at each change.
func addSegments(p *plot.Plot, s gates.HistorySeries, metric string, si int) error {
	var nights []int
	var vals []float64
	for _, pt := range s.Points {
		if rs, v, _ := pt.Ratios(metric); len(rs) > 0 {
			nights, vals = append(nights, pt.Night), append(vals, v)
		}
	}
	var changes []gates.HistoryChange
	for _, m := range s.Metrics {
		if m.Metric == metric {
			changes = m.Changes
		}
	}
	// Segment bounds in metric-night positions.
	bounds := []int{0}
	for _, c := range changes {
		bounds = append(bounds, c.At)
	}
	bounds = append(bounds, len(nights))
	for k := 0; k+1 < len(bounds); k++ {
		a, z := bounds[k], bounds[k+1]
		if a >= z {
			continue
		}
		level := median(vals[a:z])
		l, err := plotter.NewLine(plotter.XYs{{X: float64(nights[a]) - 0.5, Y: level}, {X: float64(nights[z-1]) + 0.5, Y: level}})
		if err != nil {
			return err
		}
		l.Color, l.Width = plotutil.Color(si), vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(l)
	}
	for _, c := range changes {
		x := float64(nights[c.At]) - 0.5
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: math.Min(c.Before, c.After)}, {X: x, Y: math.Max(c.Before, c.After)}})
		if err != nil {
			return err
		}
		l.Color, l.Width = plotutil.Color(si), vg.Points(2)
		if c.Status == gates.ChangePending {
			l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		}
		p.Add(l)
	}
	return nil
}

func median(xs []float64) float64 { return stats.Summary(xs).Median }

// hline draws a horizontal reference line.
func hline(p *plot.Plot, y, x0, x1 float64, dashes []vg.Length) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return err
	}
	l.Dashes = dashes
	p.Add(l)
	return nil
}

// HistoryTrend draws the dashboard's small trend of a lever: the current
// series' pp and tg B/A per night around the 1.0 line, no axes.
func HistoryTrend(file string, l gates.LeverHistory) error {
	p := plot.New()
	p.HideAxes()
	var s *gates.HistorySeries
	for i := range l.Series {
		if l.Series[i].Current {
			s = &l.Series[i]
			break
		}
	}
	if s == nil {
		s = &l.Series[len(l.Series)-1]
	}
	lo, hi := 1.0, 1.0
	for mi, metric := range []string{"pp", "tg"} {
		var pts plotter.XYs
		for _, pt := range s.Points {
			if rs, v, _ := pt.Ratios(metric); len(rs) > 0 {
				pts = append(pts, plotter.XY{X: float64(pt.Night), Y: v})
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		if len(pts) == 0 {
			continue
		}
		ln, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		ln.Color, sc.Color = plotutil.Color(mi), plotutil.Color(mi)
		sc.Radius = vg.Points(1.5)
		p.Add(ln, sc)
	}
	x0, x1 := float64(s.Points[0].Night)-0.5, float64(s.Points[len(s.Points)-1].Night)+0.5
	if err := hline(p, 1, x0, x1, []vg.Length{vg.Points(1), vg.Points(2)}); err != nil {
		return err
	}
	pad := max((hi-lo)*0.15, 0.002)
	p.Y.Min, p.Y.Max, p.X.Min, p.X.Max = lo-pad, hi+pad, x0, x1
	img := vgimg.New(2.4*vg.Inch, 0.6*vg.Inch)
	p.Draw(draw.New(img))
	return savePNG(file, img)
}

func savePNG(file string, img *vgimg.Canvas) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

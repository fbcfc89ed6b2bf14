package report

import (
	"fmt"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/minfer-go/minfer/gates"
)

// Plots writes the A/B plots beside the report (base is the report path
// without extension) and returns their file names, relative to the report.
func Plots(base string, d *gates.ABDetail, barPP, barTG float64) ([]string, error) {
	if d == nil || len(d.Metrics) == 0 {
		return nil, nil
	}
	var names []string
	for _, m := range d.Metrics {
		if len(m.Ratios) == 0 {
			continue
		}
		bar := barPP
		if m.Key == "tg" {
			bar = barTG
		}
		name := fmt.Sprintf("%s-%s-ratio.png", filepath.Base(base), m.Key)
		if err := ratioPlot(filepath.Join(filepath.Dir(base), name), m, bar); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	name := filepath.Base(base) + "-box.png"
	if err := boxPlot(filepath.Join(filepath.Dir(base), name), d.Metrics); err != nil {
		return names, err
	}
	names = append(names, name)
	for _, m := range d.Metrics {
		if m.Key != "tg" || len(m.A) == 0 {
			continue
		}
		name := filepath.Base(base) + "-tg-ms-per-token.png"
		if err := decodePlot(filepath.Join(filepath.Dir(base), name), m); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	return names, nil
}

// MSPerToken converts decode tok/s to ms per token (0 stays 0: no value).
func MSPerToken(tokS []float64) []float64 {
	out := make([]float64, len(tokS))
	for i, v := range tokS {
		if v > 0 {
			out[i] = 1000 / v
		}
	}
	return out
}

// decodePlot draws the decode time per token of A and B in every round.
func decodePlot(path string, m gates.Metric) error {
	p := plot.New()
	p.Y.Tick.Marker = preciseTicks{}
	p.Title.Text = fmt.Sprintf("%s: decode time per token, per round", m.Name)
	p.X.Label.Text = "round"
	p.Y.Label.Text = "ms / token (lower is better)"
	for i, arm := range []struct {
		name string
		vs   []float64
	}{{"A", m.A}, {"B", m.B}} {
		ms := MSPerToken(arm.vs)
		pts := make(plotter.XYs, 0, len(ms))
		for r, v := range ms {
			if v > 0 {
				pts = append(pts, plotter.XY{X: float64(r + 1), Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		sc.Color = plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		if i == 1 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, sc)
		p.Legend.Add("arm "+arm.name, l, sc)
	}
	p.Legend.Top = true
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

func ratioPlot(path string, m gates.Metric, bar float64) error {
	p := plot.New()
	p.Y.Tick.Marker = preciseTicks{}
	p.Title.Text = fmt.Sprintf("%s: per-round ratio B/A", m.Name)
	p.X.Label.Text = "round"
	p.Y.Label.Text = "B / A (tok/s, higher is better)"
	pts := make(plotter.XYs, len(m.Ratios))
	for i, r := range m.Ratios {
		pts[i] = plotter.XY{X: float64(i + 1), Y: r}
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	p.Add(sc)
	n := float64(len(m.Ratios)) + 0.5
	for _, h := range []struct {
		y    float64
		name string
	}{{1, "1.0 (no change)"}, {1 / bar, fmt.Sprintf("not-slower bar 1/%.4g", bar)}, {1 + m.Claim.Bar, fmt.Sprintf("claim bar %.4g", 1+m.Claim.Bar)}} {
		l, err := plotter.NewLine(plotter.XYs{{X: 0.5, Y: h.y}, {X: n, Y: h.y}})
		if err != nil {
			return err
		}
		switch {
		case h.y < 1: // the not-slower bar: dashed
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		case h.y > 1: // the claim bar: dotted
			l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(h.name, l)
	}
	// The legend goes on the side away from the points, so it never hides
	// a round: below them for a speed-up, above them for a slow-down.
	p.Legend.Top = m.Median < 1
	p.Legend.XOffs = -vg.Points(4)
	// Room between the points and the 1.0 line for the legend.
	lo, hi := 1/bar, 1+m.Claim.Bar
	for _, r := range m.Ratios {
		lo, hi = min(lo, r), max(hi, r)
	}
	pad := (hi - lo) * 0.25
	p.Y.Min, p.Y.Max = lo-pad, hi+pad
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

// preciseTicks are gonum's default ticks labelled with four significant
// digits: the default labels can round 1.04 to "1", which misreads a ratio.
type preciseTicks struct{}

func (preciseTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 4, 64)
		}
	}
	return ts
}

func boxPlot(path string, ms []gates.Metric) error {
	p := plot.New()
	p.Y.Tick.Marker = preciseTicks{}
	p.Title.Text = "A vs B per metric (normalised to the median of A)"
	p.Y.Label.Text = "tok/s / median(A)"
	var labels []string
	x := 0.0
	for _, m := range ms {
		if len(m.A) == 0 || m.SummaryA.Median == 0 {
			continue
		}
		for _, arm := range []struct {
			name string
			vs   []float64
		}{{"A", m.A}, {"B", m.B}} {
			vals := make(plotter.Values, len(arm.vs))
			for i, v := range arm.vs {
				vals[i] = v / m.SummaryA.Median
			}
			b, err := plotter.NewBoxPlot(vg.Points(20), x, vals)
			if err != nil {
				return err
			}
			p.Add(b)
			labels = append(labels, m.Name+" "+arm.name)
			x++
		}
	}
	p.NominalX(labels...)
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

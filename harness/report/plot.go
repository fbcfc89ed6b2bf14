package report

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
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
	return append(names, name), nil
}

func ratioPlot(path string, m gates.Metric, bar float64) error {
	p := plot.New()
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
		if h.y != 1 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(h.name, l)
	}
	p.Legend.Top = true
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

func boxPlot(path string, ms []gates.Metric) error {
	p := plot.New()
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

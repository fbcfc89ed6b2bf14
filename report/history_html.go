package report

import (
	"bytes"
	"html/template"
	"path"
	"strings"

	"github.com/minfer-go/minfer/gates"
)

// The history's static dashboard, in the manner of asv's published site:
// index.html with a row per lever (latest ratios, a trend image, open
// alerts) and a page per lever (its plot, tables, changes and links to its
// nightly reports). Every link is relative and every asset is a file beside
// the pages (CSS inline, no script, no server), so the folder can be copied
// anywhere or opened from disk.

// HistoryReportsDir is where the dashboard keeps its copies of the nightly
// pages and lever reports it links, under the same relative paths as in the
// nightly folder.
const HistoryReportsDir = "reports"

const historyCSS = `body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;margin:.8em 0}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:middle}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.open{color:#b00;font-weight:bold}.pending{color:#a60}.closed{color:#666}.none{color:#666}
.method{font-size:.9em;color:#444;max-width:60em}img.plot{max-width:100%;border:1px solid #ddd}`

// htmlChange is a change as the pages show it.
type htmlChange struct {
	Line, State, Class string
}

func htmlChangeOf(c gates.HistoryChange) htmlChange {
	hc := htmlChange{Line: strings.ReplaceAll(changeLine(c), "**", ""), State: strings.ReplaceAll(changeState(c), "**", ""), Class: "closed"}
	switch {
	case c.Status == gates.ChangePending:
		hc.Class = "pending"
	case c.Open:
		hc.Class = "open"
	}
	return hc
}

type htmlIndexRow struct {
	Lever, Page, Trend, Series string
	Nights                     int
	PP, TG                     string
	Open                       []htmlChange
}

type htmlIndex struct {
	CSS                      template.CSS
	Dir, First, Last, Method string
	Nights, OpenN, PendingN  int
	Unreadable               []string
	Rows                     []htmlIndexRow
}

var historyIndexTmpl = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>abtest history: {{.Dir}}</title><style>{{.CSS}}</style></head>
<body>
<h1>abtest history: {{.Dir}}</h1>
<p><b>{{.OpenN}} open alerts, {{.PendingN}} pending</b> — {{len .Rows}} levers over {{.Nights}} nights ({{.First}} to {{.Last}}).
Each lever's B/A ratio per night (the median of the night's per-round ratios), per metric; a changed workload starts a new series.</p>
<p class="method">{{.Method}}</p>
{{if .Unreadable}}<p class="open">Unreadable nightly summaries, not in this history:</p><ul>{{range .Unreadable}}<li>{{.}}</li>{{end}}</ul>{{end}}
<table>
<tr><th>lever</th><th>current series</th><th>nights</th><th>latest pp B/A</th><th>latest tg B/A</th><th>trend (red: pp, green: tg)</th><th>open alerts</th></tr>
{{range .Rows}}<tr><td><a href="{{.Page}}">{{.Lever}}</a></td><td>{{.Series}}</td><td class="n">{{.Nights}}</td><td class="n">{{.PP}}</td><td class="n">{{.TG}}</td>
<td><a href="{{.Page}}"><img src="{{.Trend}}" alt="{{.Lever}} trend" width="230" height="58"></a></td>
<td>{{range .Open}}<div class="{{.Class}}">{{.Line}}</div>{{else}}<span class="none">none</span>{{end}}</td></tr>
{{end}}</table>
</body></html>
`))

type htmlRow struct {
	Date, DateLink, Commit, PP, TG, PPB, TGB, Change, Report string
	Rounds                                                   int
}

type htmlSeries struct {
	Label, State string
	Notes        []string
	Metrics      []htmlMetric
	Rows         []htmlRow
}

type htmlMetric struct {
	Metric, Floor, Source string
	Nights                int
	Changes               []htmlChange
}

type htmlLever struct {
	CSS                template.CSS
	Lever, Plot, Index string
	Method             string
	Series             []htmlSeries
}

var historyLeverTmpl = template.Must(template.New("lever").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Lever}}: abtest history</title><style>{{.CSS}}</style></head>
<body>
<p><a href="{{.Index}}">← all levers</a></p>
<h1>{{.Lever}}</h1>
<p><img class="plot" src="{{.Plot}}" alt="{{.Lever}}: B/A ratio and arm B tok/s per night"></p>
<p class="method">{{.Method}}</p>
{{range .Series}}<h2>{{.Label}} ({{.State}})</h2>
{{range .Notes}}<p class="closed">note: {{.}}</p>{{end}}
<ul>{{range .Metrics}}<li>{{.Metric}}: {{.Nights}} nights, floor {{.Floor}} ({{.Source}}){{if not .Changes}}; no change{{end}}
{{if .Changes}}<ul>{{range .Changes}}<li class="{{.Class}}">{{.Line}}: {{.State}}</li>{{end}}</ul>{{end}}</li>{{end}}</ul>
<table>
<tr><th>night</th><th>commit</th><th>pp B/A</th><th>tg B/A</th><th>pp arm B tok/s</th><th>tg arm B tok/s</th><th>rounds</th><th>change</th><th>report</th></tr>
{{range .Rows}}<tr><td>{{if .DateLink}}<a href="{{.DateLink}}">{{.Date}}</a>{{else}}{{.Date}}{{end}}</td><td>{{.Commit}}</td><td class="n">{{.PP}}</td><td class="n">{{.TG}}</td>
<td class="n">{{.PPB}}</td><td class="n">{{.TGB}}</td><td class="n">{{.Rounds}}</td><td>{{.Change}}</td><td>{{if .Report}}<a href="{{.Report}}">report</a>{{else}}-{{end}}</td></tr>
{{end}}</table>
{{end}}
</body></html>
`))

// HistoryIndexHTML renders the dashboard's index.html.
func HistoryIndexHTML(h *gates.History) (string, error) {
	v := htmlIndex{CSS: template.CSS(historyCSS), Dir: h.Dir, First: "-", Last: "-", Method: "Change points: " + HistoryMethod(), Nights: len(h.Nights),
		OpenN: len(h.OpenAlerts()), PendingN: len(h.Changes(gates.ChangePending)), Unreadable: h.Unreadable}
	if len(h.Nights) > 0 {
		v.First, v.Last = h.Nights[0].Date, h.Nights[len(h.Nights)-1].Date
	}
	for _, l := range h.Levers {
		s := l.Series[len(l.Series)-1]
		for _, c := range l.Series {
			if c.Current {
				s = c
				break
			}
		}
		row := htmlIndexRow{Lever: l.Lever, Page: HistoryPageName(l.Lever), Trend: HistoryTrendName(l.Lever), Series: seriesLabel(s), Nights: len(s.Points),
			PP: num(latest(s, "pp"), "%.4f"), TG: num(latest(s, "tg"), "%.4f")}
		for _, ls := range l.Series {
			for _, m := range ls.Metrics {
				for _, c := range m.Changes {
					if c.Open {
						row.Open = append(row.Open, htmlChangeOf(c))
					}
				}
			}
		}
		v.Rows = append(v.Rows, row)
	}
	var b bytes.Buffer
	err := historyIndexTmpl.Execute(&b, v)
	return b.String(), err
}

// HistoryLeverHTML renders a lever's page; has reports whether the
// dashboard holds a copy of a nightly page or lever report (its path
// relative to the nightly folder), which the page then links.
func HistoryLeverHTML(h *gates.History, l gates.LeverHistory, has func(rel string) bool) (string, error) {
	v := htmlLever{CSS: template.CSS(historyCSS), Lever: l.Lever, Plot: HistoryPlotName(l.Lever), Index: HistoryIndexName, Method: "Change points: " + HistoryMethod()}
	for _, s := range l.Series {
		hs := htmlSeries{Label: seriesLabel(s), State: "current", Notes: s.Notes}
		if !s.Current {
			hs.State = "ended"
		}
		for _, m := range s.Metrics {
			hm := htmlMetric{Metric: m.Metric, Floor: Pct(m.Floor), Source: m.FloorSource, Nights: m.Nights}
			for _, c := range m.Changes {
				hm.Changes = append(hm.Changes, htmlChangeOf(c))
			}
			hs.Metrics = append(hs.Metrics, hm)
		}
		for _, r := range historyRows(s) {
			row := htmlRow{Date: r.Date, Commit: r.Commit, PP: r.PP, TG: r.TG, PPB: r.PPB, TGB: r.TGB, Change: r.Change, Rounds: r.Rounds}
			if page := NightlyPage(h.Nights[r.Point.Night].File); has(page) {
				row.DateLink = path.Join(HistoryReportsDir, page)
			}
			if r.Point.Report != "" && has(r.Point.Report) {
				row.Report = path.Join(HistoryReportsDir, r.Point.Report)
			}
			hs.Rows = append(hs.Rows, row)
		}
		v.Series = append(v.Series, hs)
	}
	var b bytes.Buffer
	err := historyLeverTmpl.Execute(&b, v)
	return b.String(), err
}

package gates

import (
	"fmt"
	"sort"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
)

// The nightly history (abtest history): every stored nightly of one folder
// as series of a lever's B/A ratio across nights, judged for change points
// (GATES.md: the ratio, not absolute tok/s, so drift cancels inside each
// night; a change only with enough nights on both sides).

// History is the history of one folder of nightly summaries.
type History struct {
	Dir    string         `json:"dir"`
	Nights []HistoryNight `json:"nights"` // oldest first
	// Unreadable names each nightly-*.json that could not be read or
	// parsed, with the reason: none is skipped silently.
	Unreadable []string `json:"unreadable,omitempty"`
	// Skipped names files that were read but are not nights (a shard's
	// partial summary: its merged night counts), Notes anything else worth
	// saying (a calibration file that could not be read).
	Skipped []string       `json:"skipped,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
	Method  string         `json:"method"`
	Levers  []LeverHistory `json:"levers"`
}

// HistoryNight is one stored nightly.
type HistoryNight struct {
	File    string `json:"file"` // nightly-*.json, base name
	Date    string `json:"date"`
	Commit  string `json:"commit"`
	Machine string `json:"machine"`
}

// LeverHistory is every series of one lever.
type LeverHistory struct {
	Lever  string          `json:"lever"`
	Series []HistorySeries `json:"series"`
}

// HistorySeries is one lever's arm B on one machine and workload, night
// after night; a changed workload (or machine, or arm B) starts another,
// as Compare decides comparability.
type HistorySeries struct {
	Lever       string `json:"lever"`
	A           string `json:"a"`
	B           string `json:"b"`
	Machine     string `json:"machine"`
	Model       string `json:"model"`
	ModelSHA256 string `json:"model_sha256"`
	PP          int    `json:"pp,omitempty"` // 0: summaries from before pp was recorded
	// Current: the series ran on the newest night its lever ran on this
	// machine; an older one ended (its workload or arm B changed since).
	Current bool            `json:"current"`
	Points  []HistoryPoint  `json:"points"`
	Metrics []HistoryMetric `json:"metrics"` // pp, tg
	// Notes: nights whose values were not usable, and why.
	Notes []string `json:"notes,omitempty"`
}

// HistoryPoint is one night of a series.
type HistoryPoint struct {
	Night  int    `json:"night"` // index into History.Nights
	Date   string `json:"date"`
	Commit string `json:"commit"`
	// Report is the lever's report of that night, relative to the history's
	// folder ("" when none).
	Report string `json:"report,omitempty"`
	// Per metric: the per-round B/A ratios, their median (the night's
	// point) and arm B's median tok/s; no ratios when the metric did not run.
	PPRatios []float64   `json:"pp_ratios,omitempty"`
	TGRatios []float64   `json:"tg_ratios,omitempty"`
	PPRatio  harness.Num `json:"pp_ratio"`
	TGRatio  harness.Num `json:"tg_ratio"`
	PPB      harness.Num `json:"pp_b"`
	TGB      harness.Num `json:"tg_b"`
}

// Ratios returns the point's per-round ratios, median and arm B tok/s of a
// metric ("pp", "tg").
func (p HistoryPoint) Ratios(metric string) (rounds []float64, ratio, b float64) {
	if metric == "pp" {
		return p.PPRatios, float64(p.PPRatio), float64(p.PPB)
	}
	return p.TGRatios, float64(p.TGRatio), float64(p.TGB)
}

// HistoryMetric is one metric's change points in a series.
type HistoryMetric struct {
	Metric string `json:"metric"` // pp, tg
	Nights int    `json:"nights"` // nights with this metric
	// Floor is the smallest |change| reported, FloorSource where it comes
	// from (a calibration file and key, or the default and why).
	Floor       float64         `json:"floor"`
	FloorSource string          `json:"floor_source"`
	Changes     []HistoryChange `json:"changes,omitempty"`
}

// Statuses of a HistoryChange.
const (
	ChangeAlert   = "alert"   // a verdict: the ratio changed
	ChangePending = "pending" // fewer than stats.ChangeMinNights nights after it
)

// HistoryChange is one change point of a series' metric.
type HistoryChange struct {
	ID     string `json:"id"` // what an acknowledgement names: LEVER=B METRIC DATE-AFTER
	Lever  string `json:"lever"`
	B      string `json:"b"`
	Metric string `json:"metric"`
	Status string `json:"status"`
	// The change; its At counts the nights of the series that have this
	// metric (the position in HistoryMetric's nights, not HistoryNight's).
	stats.ChangePoint
	// The last night before and the first night after: the commit range
	// the change lies in.
	DateBefore   string `json:"date_before"`
	CommitBefore string `json:"commit_before"`
	DateAfter    string `json:"date_after"`
	CommitAfter  string `json:"commit_after"`
	// Open: an alert of a current series, not acknowledged; Closed says
	// why another alert is not open.
	Open   bool   `json:"open"`
	Closed string `json:"closed,omitempty"`
}

// ChangeID names a change for acknowledgements: the lever, arm B, metric
// and the date of the first night after it.
func ChangeID(lever, b, metric, dateAfter string) string {
	return fmt.Sprintf("%s=%s %s %s", lever, b, metric, dateAfter)
}

// Settle marks each series current or ended and each alert open or closed
// (acknowledged maps a change's ID to its note). An alert stays open until
// acknowledged or until its series ends; a pending change is never open.
func (h *History) Settle(acknowledged map[string]string) {
	newest := map[string]int{} // lever and machine -> newest night it ran
	for _, l := range h.Levers {
		for _, s := range l.Series {
			k := s.Lever + "\x00" + s.Machine
			if n := s.Points[len(s.Points)-1].Night; n > newest[k] {
				newest[k] = n
			}
		}
	}
	for li := range h.Levers {
		for si := range h.Levers[li].Series {
			s := &h.Levers[li].Series[si]
			s.Current = s.Points[len(s.Points)-1].Night == newest[s.Lever+"\x00"+s.Machine]
			for mi := range s.Metrics {
				for ci := range s.Metrics[mi].Changes {
					c := &s.Metrics[mi].Changes[ci]
					c.Open, c.Closed = false, ""
					switch note, ack := acknowledged[c.ID]; {
					case c.Status != ChangeAlert:
					case ack:
						c.Closed = "acknowledged"
						if note != "" {
							c.Closed += ": " + note
						}
					case !s.Current:
						c.Closed = "its series ended (the lever's workload, machine or arm B changed since)"
					default:
						c.Open = true
					}
				}
			}
		}
	}
}

// Changes returns every change of the history with the given status
// (ChangeAlert, ChangePending; "" all), open ones first, then by lever.
func (h *History) Changes(status string) []HistoryChange {
	var out []HistoryChange
	for _, l := range h.Levers {
		for _, s := range l.Series {
			for _, m := range s.Metrics {
				for _, c := range m.Changes {
					if status == "" || c.Status == status {
						out = append(out, c)
					}
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Open && !out[j].Open })
	return out
}

// OpenAlerts returns the open alerts.
func (h *History) OpenAlerts() []HistoryChange {
	var out []HistoryChange
	for _, c := range h.Changes(ChangeAlert) {
		if c.Open {
			out = append(out, c)
		}
	}
	return out
}

// Lever returns the lever's history (nil when it has none).
func (h *History) Lever(name string) *LeverHistory {
	for i := range h.Levers {
		if h.Levers[i].Lever == name {
			return &h.Levers[i]
		}
	}
	return nil
}

// HistoryComparable says why entry e of night s cannot continue the series
// whose last point is entry p of night prev ("" when it can): the same
// machine and Compare's workload rule (model sha256 and pp; an entry from
// before workloads were recorded ran the default one).
func HistoryComparable(prev *NightlySummary, p NightlyEntry, s *NightlySummary, e NightlyEntry) string {
	if prev.Machine != s.Machine {
		return fmt.Sprintf("machine changed: then %q, now %q", prev.Machine, s.Machine)
	}
	if p.B != e.B {
		return fmt.Sprintf("arm B changed: then %q, now %q", p.B, e.B)
	}
	return s.notComparable(prev, p, e)
}

package runs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
	"github.com/minfer-go/minfer/report"
)

// HistoryOptions are the settings of `abtest history`.
type HistoryOptions struct {
	Dir  string // the nightly folder (nightly-*.json)
	Out  string // markdown, JSON and a plot per lever ("": DIR/history)
	HTML string // the static dashboard's folder ("": none)
	// Calibration is the folder holding calibration/<machine>/*.json, the
	// floors' source ("": DIR's parent, where abtest calibrate writes
	// beside reports/nightly).
	Calibration string
	// Ack is the acknowledgements file: one change ID a line, "# note"
	// after it ("": DIR/history-ack.txt, none when absent).
	Ack string
}

// HistoryAckFile is the default acknowledgements file, in the nightly folder.
const HistoryAckFile = "history-ack.txt"

// storedNight is one nightly summary and its file's base name.
type storedNight struct {
	file string
	sum  *gates.NightlySummary
}

// History reads every nightly summary under o.Dir, builds each lever's
// series, finds their change points and writes the history: markdown,
// JSON and a plot per lever under o.Out, and the dashboard under o.HTML
// when given. It returns the history and the markdown's path; an error is
// a history that could not be made (exit 2).
func History(o HistoryOptions) (*gates.History, string, error) {
	h, err := loadHistory(o, nil)
	if err != nil {
		return nil, "", err
	}
	md, err := writeHistory(h, o)
	if err != nil {
		return h, "", err
	}
	if o.HTML != "" {
		if err := writeHistoryHTML(h, o); err != nil {
			return h, md, err
		}
	}
	return h, md, nil
}

// NightlyHistory is the history section of a nightly page: it builds the
// history of dir with sum as its newest night (the summary being written,
// not yet on disk), writes the history's page and plots under dir/history,
// and returns the section (report.NightlyHistorySection) for the
// orchestration to append to the page before writing it.
func NightlyHistory(sum *gates.NightlySummary, dir string) (string, error) {
	o := HistoryOptions{Dir: dir}
	h, err := loadHistory(o, &storedNight{file: "nightly-" + sum.Date + ".json", sum: sum})
	if err != nil {
		return "", err
	}
	if _, err := writeHistory(h, o); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, historyOut(o))
	if err != nil {
		return "", err
	}
	return report.NightlyHistorySection(h, filepath.ToSlash(rel)), nil
}

func historyOut(o HistoryOptions) string {
	if o.Out != "" {
		return o.Out
	}
	return filepath.Join(o.Dir, "history")
}

// loadHistory reads the folder (and the night being written, when extra is
// set: it replaces a stored file of its name) and builds the history.
func loadHistory(o HistoryOptions, extra *storedNight) (*gates.History, error) {
	if st, err := os.Stat(o.Dir); err != nil || !st.IsDir() {
		return nil, CannotRun("history: %s is not a readable folder", o.Dir)
	}
	h := &gates.History{Dir: o.Dir, Method: report.HistoryMethod()}
	nights := readNightlies(h, o.Dir, extra)
	if len(nights) == 0 {
		why := "no nightly-*.json in it"
		if len(h.Unreadable) > 0 {
			why = "no readable nightly summary in it (" + strings.Join(h.Unreadable, "; ") + ")"
		}
		return nil, CannotRun("history: %s: %s", o.Dir, why)
	}
	calDir := o.Calibration
	if calDir == "" {
		calDir = filepath.Dir(filepath.Clean(o.Dir))
	}
	cals := readCalibrations(h, calDir)
	acks, err := readAcks(o)
	if err != nil {
		return nil, err
	}
	buildSeries(h, nights)
	for li := range h.Levers {
		for si := range h.Levers[li].Series {
			findChanges(&h.Levers[li].Series[si], cals, calDir)
		}
	}
	h.Settle(acks)
	return h, nil
}

// readNightlies reads every nightly-*.json of dir in name (date) order;
// each one that cannot be read or parsed is named in h.Unreadable, a
// shard's partial summary in h.Skipped.
func readNightlies(h *gates.History, dir string, extra *storedNight) []storedNight {
	ms, _ := filepath.Glob(filepath.Join(dir, "nightly-*.json")) // the pattern is fixed: no ErrBadPattern
	sort.Strings(ms)
	var out []storedNight
	for _, m := range ms {
		base := filepath.Base(m)
		if extra != nil && base == extra.file {
			continue
		}
		// A shard's partial summary is part of a night; the merged summary
		// is the night.
		if gates.IsShardFile(base) {
			h.Skipped = append(h.Skipped, base+": a shard's partial summary (its merged night counts)")
			continue
		}
		b, err := os.ReadFile(m)
		if err == nil {
			var s gates.NightlySummary
			if err = json.Unmarshal(b, &s); err == nil {
				if s.Date == "" {
					s.Date = strings.TrimSuffix(strings.TrimPrefix(base, "nightly-"), ".json")
				}
				out = append(out, storedNight{file: base, sum: &s})
				continue
			}
		}
		h.Unreadable = append(h.Unreadable, base+": "+err.Error())
	}
	if extra != nil {
		out = append(out, *extra)
		sort.SliceStable(out, func(i, j int) bool { return out[i].file < out[j].file })
	}
	return out
}

// seriesState is a series being built: its record and its last night's
// summary and entry, against which the next night's entry is compared.
type seriesState struct {
	lever, b, machine string
	index             int // in its lever's Series
	sum               *gates.NightlySummary
	entry             gates.NightlyEntry
}

// buildSeries groups every lever entry that ran (it has arm B speeds) into
// series: an entry continues the newest series of its lever, arm B and
// machine when gates.HistoryComparable allows, else it starts a new one,
// which says why.
func buildSeries(h *gates.History, nights []storedNight) {
	var states []*seriesState
	for ni, n := range nights {
		s := n.sum
		h.Nights = append(h.Nights, gates.HistoryNight{File: n.file, Date: s.Date, Commit: s.Commit, Machine: s.Machine})
		seen := map[string]bool{}
		for _, e := range s.Entries {
			if len(e.PPB)+len(e.TGB) == 0 {
				continue // it did not run
			}
			key := e.Lever + "=" + e.B
			if seen[key] {
				h.Notes = append(h.Notes, fmt.Sprintf("%s: a second entry of %s, not used", n.file, key))
				continue
			}
			seen[key] = true
			var cur *seriesState
			for i := len(states) - 1; i >= 0; i-- {
				if st := states[i]; st.lever == e.Lever && st.b == e.B && st.machine == s.Machine {
					cur = st
					break
				}
			}
			why := ""
			if cur != nil {
				why = gates.HistoryComparable(cur.sum, cur.entry, s, e)
			}
			lh := h.Lever(e.Lever)
			if lh == nil {
				h.Levers = append(h.Levers, gates.LeverHistory{Lever: e.Lever})
				lh = &h.Levers[len(h.Levers)-1]
			}
			if cur == nil || why != "" {
				sha, pp := e.ModelSHA256, e.PP
				if sha == "" {
					sha = s.ModelSHA256
				}
				if pp == 0 {
					pp = s.PP
				}
				model := e.Model
				if model == "" {
					model = s.Model
				}
				ns := gates.HistorySeries{Lever: e.Lever, A: e.A, B: e.B, Machine: s.Machine, Model: model, ModelSHA256: sha, PP: pp}
				if why != "" {
					ns.Notes = append(ns.Notes, fmt.Sprintf("a new series from %s: %s", s.Date, why))
				}
				lh.Series = append(lh.Series, ns)
				cur = &seriesState{lever: e.Lever, b: e.B, machine: s.Machine, index: len(lh.Series) - 1}
				states = append(states, cur)
			}
			cur.sum, cur.entry = s, e
			sr := &lh.Series[cur.index]
			sr.Points = append(sr.Points, historyPoint(sr, ni, s, e))
		}
	}
	sort.Slice(h.Levers, func(i, j int) bool { return h.Levers[i].Lever < h.Levers[j].Lever })
}

// historyPoint is an entry's night: per metric its per-round ratios, their
// median and arm B's median tok/s; a metric whose arms cannot be paired is
// left out with a note on the series.
func historyPoint(sr *gates.HistorySeries, ni int, s *gates.NightlySummary, e gates.NightlyEntry) gates.HistoryPoint {
	nan := harness.Num(math.NaN())
	p := gates.HistoryPoint{Night: ni, Date: s.Date, Commit: s.Commit, Report: e.Report, PPRatio: nan, TGRatio: nan, PPB: nan, TGB: nan}
	for _, m := range []struct {
		name   string
		a, b   []float64
		rounds *[]float64
		ratio  *harness.Num
		armB   *harness.Num
	}{{"pp", e.PPA, e.PPB, &p.PPRatios, &p.PPRatio, &p.PPB}, {"tg", e.TGA, e.TGB, &p.TGRatios, &p.TGRatio, &p.TGB}} {
		if len(m.a)+len(m.b) == 0 {
			continue
		}
		r, err := stats.Ratios(m.a, m.b)
		if err != nil {
			sr.Notes = append(sr.Notes, fmt.Sprintf("%s %s: not used (%v)", s.Date, m.name, err))
			continue
		}
		*m.rounds = r
		*m.ratio = harness.Num(stats.Summary(r).Median)
		*m.armB = harness.Num(stats.Summary(m.b).Median)
	}
	return p
}

// calibrationFile is a calibration and where it was read.
type calibrationFile struct {
	path string
	c    *gates.Calibration
}

// readCalibrations reads every calibration under dir/calibration/*/; a
// file that is not one is noted (its series fall back to the default floor).
func readCalibrations(h *gates.History, dir string) []calibrationFile {
	files, _ := filepath.Glob(filepath.Join(dir, "calibration", "*", "*.json")) // fixed pattern
	sort.Strings(files)
	var out []calibrationFile
	for _, f := range files {
		b, err := os.ReadFile(f)
		var c gates.Calibration
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil || c.Schema != 1 {
			if err == nil {
				err = fmt.Errorf("schema %d", c.Schema)
			}
			h.Notes = append(h.Notes, fmt.Sprintf("calibration %s not read (%v): series it would calibrate take the default floor", f, err))
			continue
		}
		out = append(out, calibrationFile{path: f, c: &c})
	}
	return out
}

// floorFor is a series metric's floor: the per-round sd of the log ratio
// in the newest calibration of its machine, model (sha256) and pp, on
// device time where the calibration has it (the basis gate 3 decides on
// unless a lever moves host work), else wall time; without one, the
// default floor. The source says which.
func floorFor(cals []calibrationFile, calDir string, s gates.HistorySeries, metric string) (float64, string) {
	var best *calibrationFile
	for i := range cals {
		c := cals[i].c
		m := gates.MachineName(c.Backend, &harness.Clocks{Name: c.GPU}, c.CPU)
		if m != s.Machine && m != "cpu-"+s.Machine || c.ModelSHA256 != s.ModelSHA256 || s.PP == 0 || c.PP != s.PP {
			continue
		}
		if best == nil || c.Created.After(best.c.Created) {
			best = &cals[i]
		}
	}
	if best != nil {
		for _, basis := range []string{gates.BasisDevice, gates.BasisWall} {
			key := metric + "_" + basis
			if sd, ok := best.c.SD[key]; ok && sd > 0 {
				return sd, fmt.Sprintf("the per-round sd of %s in %s", key, best.path)
			}
		}
	}
	pp := "pp not recorded"
	if s.PP > 0 {
		pp = fmt.Sprintf("pp%d", s.PP)
	}
	return stats.ChangeDefaultFloor, fmt.Sprintf("default: no calibration of %s, model sha256 %.12s, %s under %s", s.Machine, s.ModelSHA256, pp,
		filepath.Join(calDir, "calibration"))
}

// findChanges runs the change points of each metric of a series.
func findChanges(s *gates.HistorySeries, cals []calibrationFile, calDir string) {
	for _, metric := range []string{"pp", "tg"} {
		var nights [][]float64
		var at []int // the series point of each of the metric's nights
		for i, p := range s.Points {
			if r, _, _ := p.Ratios(metric); len(r) > 0 {
				nights, at = append(nights, r), append(at, i)
			}
		}
		if len(nights) == 0 {
			continue
		}
		floor, src := floorFor(cals, calDir, *s, metric)
		m := gates.HistoryMetric{Metric: metric, Nights: len(nights), Floor: floor, FloorSource: src}
		for _, cp := range stats.ChangePoints(nights, stats.DefaultChangeOptions(floor)) {
			before, after := s.Points[at[cp.At-1]], s.Points[at[cp.At]]
			status := gates.ChangeAlert
			if cp.Pending {
				status = gates.ChangePending
			}
			m.Changes = append(m.Changes, gates.HistoryChange{ID: gates.ChangeID(s.Lever, s.B, metric, after.Date), Lever: s.Lever, B: s.B, Metric: metric,
				Status: status, ChangePoint: cp, DateBefore: before.Date, CommitBefore: before.Commit, DateAfter: after.Date, CommitAfter: after.Commit})
		}
		s.Metrics = append(s.Metrics, m)
	}
}

// readAcks reads the acknowledgements: a change ID a line, an optional
// "# note" after it; blank lines and lines starting with # are skipped. The
// default file may be absent; a named one must be readable.
func readAcks(o HistoryOptions) (map[string]string, error) {
	file := o.Ack
	if file == "" {
		file = filepath.Join(o.Dir, HistoryAckFile)
	}
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) && o.Ack == "" {
		return nil, nil
	}
	if err != nil {
		return nil, CannotRun("history: acknowledgements: %v", err)
	}
	defer f.Close()
	acks := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, note, _ := strings.Cut(line, "#")
		acks[strings.Join(strings.Fields(id), " ")] = strings.TrimSpace(note)
	}
	if err := sc.Err(); err != nil {
		return nil, CannotRun("history: acknowledgements %s: %v", file, err)
	}
	return acks, nil
}

// writeHistory writes history.md, history.json and a plot per lever under
// the history's folder.
func writeHistory(h *gates.History, o HistoryOptions) (string, error) {
	out := historyOut(o)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", CannotRun("history: %v", err)
	}
	toDir, err := filepath.Rel(out, o.Dir)
	if err != nil {
		toDir, _ = filepath.Abs(o.Dir)
	}
	for _, l := range h.Levers {
		if err := report.HistoryPlot(filepath.Join(out, report.HistoryPlotName(l.Lever)), h, l); err != nil {
			return "", CannotRun("history: plot of %s: %v", l.Lever, err)
		}
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return "", CannotRun("history: %v", err)
	}
	if err := os.WriteFile(filepath.Join(out, report.HistoryJSONName), b, 0o644); err != nil {
		return "", CannotRun("history: %v", err)
	}
	md := filepath.Join(out, report.HistoryMarkdownName)
	if err := os.WriteFile(md, []byte(report.HistoryMarkdown(h, filepath.ToSlash(toDir))), 0o644); err != nil {
		return "", CannotRun("history: %v", err)
	}
	return md, nil
}

// writeHistoryHTML writes the dashboard: index.html, a page, plot and trend
// per lever, and copies of the nightly pages and lever reports they link
// (under report.HistoryReportsDir, same relative paths), so that every link
// resolves inside the folder.
func writeHistoryHTML(h *gates.History, o HistoryOptions) error {
	out := o.HTML
	if err := os.MkdirAll(out, 0o755); err != nil {
		return CannotRun("history --html: %v", err)
	}
	copied := map[string]bool{}
	copyRel := func(rel string) {
		if copied[rel] || !filepath.IsLocal(filepath.FromSlash(rel)) {
			return // never a path that leaves the nightly folder
		}
		if copyFile(filepath.Join(o.Dir, filepath.FromSlash(rel)), filepath.Join(out, report.HistoryReportsDir, filepath.FromSlash(rel))) == nil {
			copied[rel] = true
		}
	}
	for _, n := range h.Nights {
		copyRel(report.NightlyPage(n.File))
	}
	for _, l := range h.Levers {
		for _, s := range l.Series {
			for _, p := range s.Points {
				if p.Report == "" {
					continue
				}
				// The report and the files beside it that share its name (its JSON, its plots).
				copyRel(p.Report)
				dir, base := filepath.Split(filepath.FromSlash(p.Report))
				sibs, _ := filepath.Glob(filepath.Join(o.Dir, dir, globEscape(strings.TrimSuffix(base, ".md"))+"*"))
				for _, sib := range sibs {
					if rel, err := filepath.Rel(o.Dir, sib); err == nil {
						copyRel(filepath.ToSlash(rel))
					}
				}
			}
		}
	}
	has := func(rel string) bool { return copied[rel] }
	for _, l := range h.Levers {
		if err := report.HistoryPlot(filepath.Join(out, report.HistoryPlotName(l.Lever)), h, l); err != nil {
			return CannotRun("history --html: plot of %s: %v", l.Lever, err)
		}
		if err := report.HistoryTrend(filepath.Join(out, report.HistoryTrendName(l.Lever)), l); err != nil {
			return CannotRun("history --html: trend of %s: %v", l.Lever, err)
		}
		page, err := report.HistoryLeverHTML(h, l, has)
		if err != nil {
			return CannotRun("history --html: %v", err)
		}
		if err := os.WriteFile(filepath.Join(out, report.HistoryPageName(l.Lever)), []byte(page), 0o644); err != nil {
			return CannotRun("history --html: %v", err)
		}
	}
	index, err := report.HistoryIndexHTML(h)
	if err != nil {
		return CannotRun("history --html: %v", err)
	}
	if err := os.WriteFile(filepath.Join(out, report.HistoryIndexName), []byte(index), 0o644); err != nil {
		return CannotRun("history --html: %v", err)
	}
	return nil
}

// globEscape quotes the glob metacharacters of a file name.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	w, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, in); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

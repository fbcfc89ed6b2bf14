package runs

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

const (
	histMachine = "NVIDIA H200"
	histSHA     = "a72ddfbb7ef6df73fcf7eeee79d4bbc86ebc6b4f920849b31141eaac8e9d8553"
	otherSHA    = "b7324e933144aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	histNights  = 30
)

func nightDate(i int) string { return fmt.Sprintf("2026-01-%02dT020000", i+1) }

func nightCommit(i int) string { return fmt.Sprintf("%02dc0ffee%032x", i, i) }

// simEntry is a lever's entry with 9 rounds a metric: arm A around 1000 and
// 100 tok/s, arm B that times ppLevel and tgLevel, log-normal noise sd.
func simEntry(rng *rand.Rand, lever, b string, ppLevel, tgLevel, sd float64) gates.NightlyEntry {
	e := gates.NightlyEntry{Lever: lever, A: "1", B: b, Backend: "cuda", Verdict: gates.VerdictPass}
	for range 9 {
		a := 1000 * math.Exp(0.02*rng.NormFloat64())
		e.PPA, e.PPB = append(e.PPA, a), append(e.PPB, a*ppLevel*math.Exp(sd*rng.NormFloat64()))
		a = 100 * math.Exp(0.02*rng.NormFloat64())
		e.TGA, e.TGB = append(e.TGA, a), append(e.TGB, a*tgLevel*math.Exp(sd*rng.NormFloat64()))
	}
	return e
}

func writeJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// historyNight is night i of the fixture: MINFER_STEP's decode ratio drops
// 4% from night 20 (10 nights after: an alert), MINFER_FLAT stays, MINFER_NEW
// rises 5% on the last 3 nights (pending), MINFER_WL changes workload at
// night 15 (a new series, no change), MINFER_OFF never ran.
func historyNight(rng *rand.Rand, i int) *gates.NightlySummary {
	s := &gates.NightlySummary{Date: nightDate(i), Machine: histMachine, Commit: nightCommit(i), Model: "/m/qwen2-0.5b-Q8_0-seed1.gguf",
		ModelSHA256: histSHA, PP: 512, TG: 128, Threshold: 0.02, Verdict: gates.VerdictPass, Complete: true}
	step := 1.0
	if i >= 20 {
		step = 0.96
	}
	rise := 1.0
	if i >= histNights-3 {
		rise = 1.05
	}
	st := simEntry(rng, "MINFER_STEP", "0", 1.02, 1.03*step, 0.003)
	st.PP = 512
	st.Report = fmt.Sprintf("MINFER_STEP/%s-c0ffee.md", nightDate(i))
	wl := simEntry(rng, "MINFER_WL", "1", 1.0, 1.0, 0.003)
	if i >= 15 {
		wl = simEntry(rng, "MINFER_WL", "1", 1.0, 1.1, 0.003)
		wl.Workload, wl.Model, wl.ModelSHA256, wl.PP = "qwen3-0.6b:Q8_0", "/m/qwen3-0.6b-Q8_0-seed1.gguf", otherSHA, 512
	}
	s.Entries = []gates.NightlyEntry{st, simEntry(rng, "MINFER_FLAT", "0", 0.99, 1.01, 0.003), simEntry(rng, "MINFER_NEW", "1", 1.0, rise, 0.003), wl,
		{Lever: "MINFER_OFF", Backend: "cuda", Verdict: gates.VerdictSkip, Line: "not run"}}
	return s
}

// historyDir writes the fixture under a reports folder: the nightlies (with
// their pages and MINFER_STEP's reports), one unreadable summary, one
// shard's partial summary, and a calibration of the default workload.
func historyDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "nightly")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range histNights {
		s := historyNight(rng, i)
		writeJSON(t, filepath.Join(dir, "nightly-"+s.Date+".json"), s)
		if err := os.WriteFile(filepath.Join(dir, "nightly-"+s.Date+".md"), []byte("# nightly "+s.Date+"\n\n[report]("+s.Entries[0].Report+")\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rep := filepath.Join(dir, filepath.FromSlash(s.Entries[0].Report))
		writeJSON(t, strings.TrimSuffix(rep, ".md")+".json", map[string]string{"lever": "MINFER_STEP"})
		for _, f := range []string{rep, strings.TrimSuffix(rep, ".md") + "-box.png"} {
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "nightly-2026-01-15T999999.json"), []byte("{broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "nightly-2026-01-16T030000-shard-0-of-2.json"), historyNight(rng, 15))
	writeJSON(t, filepath.Join(root, "calibration", "NVIDIA-H200", "qwen2-0.5b-Q8_0-seed1-pp512-tg128-r3.json"), gates.Calibration{
		Schema: 1, Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), GPU: histMachine, Backend: "cuda", ModelSHA256: histSHA, PP: 512, TG: 128, Reps: 3,
		SD: map[string]float64{"pp_device": 0.0022, "pp_wall": 0.0071, "tg_device": 0.0037, "tg_wall": 0.0471}})
	return dir
}

func changesOf(t *testing.T, h *gates.History, lever string) []gates.HistoryChange {
	t.Helper()
	l := h.Lever(lever)
	if l == nil {
		t.Fatalf("no history of %s", lever)
	}
	var out []gates.HistoryChange
	for _, s := range l.Series {
		for _, m := range s.Metrics {
			out = append(out, m.Changes...)
		}
	}
	return out
}

func TestHistoryAlertsPendingSeriesAndUnreadable(t *testing.T) {
	dir := historyDir(t)
	h, md, err := History(HistoryOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Nights) != histNights {
		t.Errorf("%d nights, want %d", len(h.Nights), histNights)
	}
	if len(h.Unreadable) != 1 || !strings.HasPrefix(h.Unreadable[0], "nightly-2026-01-15T999999.json: ") {
		t.Errorf("unreadable = %q, want the broken file named", h.Unreadable)
	}
	if len(h.Skipped) != 1 || !strings.Contains(h.Skipped[0], "shard") {
		t.Errorf("skipped = %q, want the shard's partial summary", h.Skipped)
	}
	if h.Lever("MINFER_OFF") != nil {
		t.Errorf("a lever that never ran has a history")
	}

	// The step: one open alert on tg, -4%, between nights 19 and 20.
	cs := changesOf(t, h, "MINFER_STEP")
	if len(cs) != 1 {
		t.Fatalf("MINFER_STEP changes = %+v, want one", cs)
	}
	c := cs[0]
	if c.Metric != "tg" || c.Status != gates.ChangeAlert || !c.Open || c.P > 0.001 || math.Abs(c.Change+0.04) > 0.01 ||
		c.CommitBefore != nightCommit(19) || c.CommitAfter != nightCommit(20) || c.NightsBefore != 20 || c.NightsAfter != 10 {
		t.Errorf("MINFER_STEP change = %+v, want an open tg alert of about -4%% from commit %s to %s", c, nightCommit(19), nightCommit(20))
	}
	if c.ID != "MINFER_STEP=0 tg "+nightDate(20) {
		t.Errorf("ID %q", c.ID)
	}
	if len(h.OpenAlerts()) != 1 {
		t.Errorf("open alerts = %+v, want MINFER_STEP's only", h.OpenAlerts())
	}
	if cs := changesOf(t, h, "MINFER_FLAT"); len(cs) != 0 {
		t.Errorf("MINFER_FLAT changes = %+v, want none", cs)
	}
	// The newest rise has 3 nights after it: pending, not an alert.
	if cs := changesOf(t, h, "MINFER_NEW"); len(cs) != 1 || cs[0].Status != gates.ChangePending || cs[0].Open || cs[0].NightsAfter != 3 || cs[0].Metric != "tg" {
		t.Errorf("MINFER_NEW changes = %+v, want one pending tg change with 3 nights after", cs)
	}
	// A workload change starts a new series: no change across it.
	wl := h.Lever("MINFER_WL")
	if len(wl.Series) != 2 || wl.Series[0].Current || !wl.Series[1].Current || len(wl.Series[0].Points) != 15 ||
		len(wl.Series[1].Notes) == 0 || !strings.Contains(wl.Series[1].Notes[0], "workload changed") {
		t.Errorf("MINFER_WL series = %+v, want an ended series of 15 nights and a current one saying the workload changed", wl.Series)
	}
	if cs := changesOf(t, h, "MINFER_WL"); len(cs) != 0 {
		t.Errorf("MINFER_WL changes = %+v, want none (the +10%% is another workload)", cs)
	}
	// Floors: the calibrated sd on device time for the default workload,
	// the stated default for the other model.
	st := h.Lever("MINFER_STEP").Series[0]
	for _, m := range st.Metrics {
		want := map[string]float64{"pp": 0.0022, "tg": 0.0037}[m.Metric]
		if m.Floor != want || !strings.Contains(m.FloorSource, m.Metric+"_device") || !strings.Contains(m.FloorSource, "NVIDIA-H200") {
			t.Errorf("MINFER_STEP %s floor %v (%s), want %v from the calibration", m.Metric, m.Floor, m.FloorSource, want)
		}
	}
	for _, m := range wl.Series[1].Metrics {
		if m.Floor != 0.015 || !strings.HasPrefix(m.FloorSource, "default") {
			t.Errorf("MINFER_WL new series %s floor %v (%s), want the 1.5%% default", m.Metric, m.Floor, m.FloorSource)
		}
	}

	page, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**History: 1 open alerts, 1 pending**", "nightly-2026-01-15T999999.json", "-4.", shortCommit(nightCommit(19)) + ".." + shortCommit(nightCommit(20)),
		"](MINFER_STEP.png)", "](../MINFER_STEP/" + nightDate(29) + "-c0ffee.md)", "p ≤ 0.001", "`MINFER_STEP=0 tg " + nightDate(20) + "`"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("history.md lacks %q", want)
		}
	}
	for _, l := range h.Levers {
		if _, err := os.Stat(filepath.Join(dir, "history", report.HistoryPlotName(l.Lever))); err != nil {
			t.Errorf("plot of %s: %v", l.Lever, err)
		}
	}
}

func shortCommit(c string) string { return c[:9] }

func TestHistoryAcknowledgedAlertIsClosed(t *testing.T) {
	dir := historyDir(t)
	ack := "# reviewed\nMINFER_STEP=0  tg " + nightDate(20) + "  # the new decode kernel, intended\n"
	if err := os.WriteFile(filepath.Join(dir, HistoryAckFile), []byte(ack), 0o644); err != nil {
		t.Fatal(err)
	}
	h, _, err := History(HistoryOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.OpenAlerts()) != 0 {
		t.Errorf("open alerts = %+v, want none after the acknowledgement", h.OpenAlerts())
	}
	if cs := changesOf(t, h, "MINFER_STEP"); len(cs) != 1 || cs[0].Closed != "acknowledged: the new decode kernel, intended" {
		t.Errorf("MINFER_STEP changes = %+v, want closed with the note", cs)
	}
	if _, _, err := History(HistoryOptions{Dir: dir, Ack: filepath.Join(dir, "missing.txt")}); ExitCode(err) != 2 {
		t.Errorf("a named acknowledgements file that is missing: exit %d, want 2", ExitCode(err))
	}
}

func TestHistoryCouldNotRun(t *testing.T) {
	empty := t.TempDir()
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "nightly-2026-01-01T000000.json"), []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(empty, "missing"), "not a readable folder"},
		{empty, "no nightly-*.json"},
		{broken, "nightly-2026-01-01T000000.json: "},
	} {
		_, _, err := History(HistoryOptions{Dir: c.dir})
		if ExitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: %v (exit %d), want exit 2 saying %q", c.dir, err, ExitCode(err), c.want)
		}
	}
}

// Every href and src of every page of the dashboard is a relative link to a
// file inside it: the folder works copied anywhere, with no server and
// nothing fetched from elsewhere.
func TestHistoryHTMLEveryLinkResolvesInsideOut(t *testing.T) {
	dir := historyDir(t)
	out := filepath.Join(t.TempDir(), "site")
	h, _, err := History(HistoryOptions{Dir: dir, HTML: out})
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(out, "*.html"))
	if len(pages) != len(h.Levers)+1 {
		t.Fatalf("%d pages, want index.html and one per lever (%d)", len(pages), len(h.Levers))
	}
	links, reports := 0, 0
	for _, page := range pages {
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := html.Parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		var walk func(n *html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.ElementNode {
				if n.Data == "script" || n.Data == "link" {
					t.Errorf("%s: <%s>: the pages carry no script and no linked asset", filepath.Base(page), n.Data)
				}
				for _, a := range n.Attr {
					if a.Key != "href" && a.Key != "src" {
						continue
					}
					links++
					u, err := url.Parse(a.Val)
					if err != nil || u.Scheme != "" || u.Host != "" || path.IsAbs(u.Path) || u.Path == "" {
						t.Errorf("%s: %s=%q is not a relative link to a file", filepath.Base(page), a.Key, a.Val)
						continue
					}
					target := filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
					if rel, err := filepath.Rel(out, target); err != nil || !filepath.IsLocal(rel) {
						t.Errorf("%s: %s=%q leaves the site", filepath.Base(page), a.Key, a.Val)
						continue
					}
					if st, err := os.Stat(target); err != nil || !st.Mode().IsRegular() {
						t.Errorf("%s: %s=%q does not resolve to a file in the site", filepath.Base(page), a.Key, a.Val)
					}
					if strings.HasPrefix(u.Path, report.HistoryReportsDir+"/") {
						reports++
					}
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(doc)
	}
	// Every night's page from every lever page, and MINFER_STEP's 30 reports.
	if reports < histNights*len(h.Levers)+histNights {
		t.Errorf("%d links to copied reports, want at least %d", reports, histNights*len(h.Levers)+histNights)
	}
	t.Logf("%d pages, %d links checked, %d to copied reports", len(pages), links, reports)
	// The report's sibling files came with it.
	if _, err := os.Stat(filepath.Join(out, report.HistoryReportsDir, "MINFER_STEP", nightDate(3)+"-c0ffee-box.png")); err != nil {
		t.Errorf("a report's plot was not copied: %v", err)
	}
	index, _ := os.ReadFile(filepath.Join(out, report.HistoryIndexName))
	for _, want := range []string{"MINFER_STEP=0 tg", "1 open alerts, 1 pending", "nightly-2026-01-15T999999.json"} {
		if !strings.Contains(string(index), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
}

// The nightly page's history section, for a night not yet on disk: it
// links each lever's plot (written beside it) and lists the open alert.
func TestNightlyHistorySectionLinksPlotsAndOpenAlerts(t *testing.T) {
	dir := historyDir(t)
	tonight := historyNight(rand.New(rand.NewPCG(7, 7)), histNights)
	sec, err := NightlyHistory(tonight, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"MINFER_STEP", "MINFER_FLAT", "MINFER_NEW", "MINFER_WL"} {
		link := "history/" + report.HistoryPlotName(l)
		if !strings.Contains(sec, "("+link+")") {
			t.Errorf("section lacks the link %s:\n%s", link, sec)
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(link))); err != nil {
			t.Errorf("%s: %v", link, err)
		}
	}
	for _, want := range []string{"## History (31 nights: 1 open alerts, 1 pending)", "**open alert**: MINFER_STEP=0 tg", "pending: MINFER_NEW=1 tg", "(history/history.md)"} {
		if !strings.Contains(sec, want) {
			t.Errorf("section lacks %q:\n%s", want, sec)
		}
	}
}

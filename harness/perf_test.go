package harness

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
)

// issue6Table is the target table of issue 6, copied verbatim.
const issue6Table = `| model shape | weights | reference tg128 tok/s | reference pp512 tok/s | target tg128 | target pp512 |
|---|---|---|---|---|---|
| qwen2-0.5b | Q4_K_M | 863.3 | 52,503 | >= 1,100 | >= 55,000 |
| qwen2-0.5b | Q8_0 | 901.8 | 59,841 | >= 1,150 | >= 60,000 |
| qwen3-0.6b | Q8_0 | 737.3 | 51,235 | >= 950 | >= 52,000 |
| qwen2-7b | Q4_K_M | 267.4 | 9,906 | >= 330 | >= 11,000 |
| qwen2-7b | Q8_0 | 259.1 | 11,870 | >= 400 | >= 12,500 |`

func TestPerfRows_MatchIssue6TableExactly(t *testing.T) {
	num := func(s string) float64 {
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), ">="))
		v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
		if err != nil {
			t.Fatalf("issue table cell %q: %v", s, err)
		}
		return v
	}
	var want []PerfRow
	for _, line := range strings.Split(issue6Table, "\n")[2:] {
		c := strings.Split(strings.Trim(line, "| "), "|")
		want = append(want, PerfRow{Shape: strings.TrimSpace(c[0]), Type: strings.TrimSpace(c[1]),
			RefTG: num(c[2]), RefPP: num(c[3]), TargetTG: num(c[4]), TargetPP: num(c[5])})
	}
	if len(want) != len(PerfRows) {
		t.Fatalf("%d rows, issue 6 has %d", len(PerfRows), len(want))
	}
	for i := range want {
		if PerfRows[i] != want[i] {
			t.Errorf("row %d: %+v, issue 6 says %+v", i, PerfRows[i], want[i])
		}
	}
	for _, s := range []string{"2026-08", "-p 512 -n 128 -r 5 -ngl 99", "H200", "2026-11-29", "median"} {
		if !strings.Contains(PerfReference, s) {
			t.Errorf("provenance line lacks %q: %s", s, PerfReference)
		}
	}
}

func TestParsePerfRows_AllTableNamesAndAdHocRows(t *testing.T) {
	all, err := ParsePerfRows("all")
	if err != nil || len(all) != 6 || all[5] != PerfLongContextRows[0] {
		t.Fatalf("%v %v", all, err)
	}
	rs, err := ParsePerfRows("qwen2-7b:q8_0, qwen2-tiny:Q8_0")
	if err != nil || len(rs) != 2 {
		t.Fatalf("%v %v", rs, err)
	}
	if rs[0] != PerfRows[4] {
		t.Errorf("table row by name (any case): %+v", rs[0])
	}
	if rs[1].HasRef() || rs[1].Name() != "qwen2-tiny:Q8_0" {
		t.Errorf("ad-hoc row: %+v", rs[1])
	}
	for _, bad := range []string{"qwen2-0.5b", "a/b:Q8_0", "x:Q8_0,x:Q8_0", ":Q8_0", ",", "x:Q8_0@4096", "x:Q8_0@d0", "x:Q8_0@d-1", "x:Q8_0@dx", "x:@d16", "x:Q8_0@d16@d16"} {
		if _, err := ParsePerfRows(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The byte count itself is the engine's (model.DecodeReadOf, hand-counted in
// engine/model); the harness takes it from `minfer info --json` unchanged.
func TestWeightBytesFromInfo_TakesTheEnginesCountAndRefusesAMissingOne(t *testing.T) {
	var info ModelInfo
	if err := json.Unmarshal([]byte(`{"path":"m.gguf","file_size":3000000,"type_histogram":{"Q8_0":15},
		"decode_read":{"weight_bytes_per_token":1402128,"method":"all 26 tensors in full","kv_elems_per_pos":512}}`), &info); err != nil {
		t.Fatal(err)
	}
	w, err := WeightBytesFromInfo(info)
	if err != nil || w.PerToken != 1402128 || w.FileSize != 3000000 || w.KVPerPos != 512 || !strings.Contains(w.Method, "all 26 tensors") {
		t.Fatalf("%+v %v", w, err)
	}
	info.DecodeRead.WeightBytes = 0
	if _, err := WeightBytesFromInfo(info); err == nil {
		t.Fatal("a missing decode_read was accepted")
	}
}

func TestKVReadPerToken_MeanPositionOfTheTGTestByHand(t *testing.T) {
	w := WeightBytes{KVPerPos: 2 * 24 * 2 * 64} // qwen2-0.5b: 24 layers, 2 KV heads of 64
	// tg128 after one prompt token: 1 + 129/2 = 65.5 positions on average, f16.
	if got := w.KVReadPerToken("f16", 0, 128); float64(got) != 6144*2*65.5 {
		t.Fatalf("%v", got)
	}
	// tg128 after a 4096-token fill: 4096 + 65.5 positions on average.
	if got := w.KVReadPerToken("f16", 4096, 128); float64(got) != 6144*2*4161.5 {
		t.Fatalf("%v", got)
	}
	if got := w.KVReadPerToken("auto", 0, 128); !math.IsNaN(float64(got)) {
		t.Fatalf("unknown format must be NaN: %v", got)
	}
}

func TestNewPerfMetric_RatioTargetAndShortfallByHand(t *testing.T) {
	bt := BenchTest{Name: "tg128", TokS: []float64{990, 1000, 1010, 900, 1005}, MeanTokS: 981}
	m := NewPerfMetric(bt, 901.8, 1150)
	if m.TokS != 1000 { // the median, as the reference reports
		t.Fatalf("median %v", m.TokS)
	}
	if math.Abs(float64(m.Ratio)-1000/901.8) > 1e-12 || m.Met == nil || *m.Met || m.Short != 150 || math.Abs(m.ShortBy-150.0/1150) > 1e-12 {
		t.Fatalf("%+v", m)
	}
	m = NewPerfMetric(BenchTest{Name: "pp512", TokS: []float64{60000}}, 59841, 60000)
	if m.Met == nil || !*m.Met { // >= target is met
		t.Fatalf("60,000 >= 60,000 not met: %+v", m)
	}
	m = NewPerfMetric(bt, 0, 0)
	if m.Met != nil || !math.IsNaN(float64(m.Ratio)) {
		t.Fatalf("no reference must not be judged: %+v", m)
	}
}

func TestDecodeBandwidth_7BQ8FloorByHand(t *testing.T) {
	// 8.1e9 bytes/token at 259.1 tok/s: 2098.71 GB/s, 48.81% of 4300, floor 530.86 tok/s.
	d := DecodeBandwidth(8_100_000_000, 259.1)
	if math.Abs(float64(d.GBs)-2098.71) > 1e-9 || math.Abs(float64(d.HBMShare)-2098.71/4300) > 1e-12 ||
		math.Abs(float64(d.FloorTokS)-4.3e12/8.1e9) > 1e-9 {
		t.Fatalf("%+v", d)
	}
	if d := DecodeBandwidth(0, 100); !math.IsNaN(float64(d.GBs)) {
		t.Fatalf("unknown bytes must be NaN, never 0: %+v", d)
	}
}

func TestPerfRecordDecide_FailedBeatsMissedBeatsMet(t *testing.T) {
	yes, no := true, false
	met := PerfResult{Row: PerfRows[0], PP: &PerfMetric{Met: &yes}, TG: &PerfMetric{Met: &yes}}
	missed := PerfResult{Row: PerfRows[1], PP: &PerfMetric{Met: &yes}, TG: &PerfMetric{Met: &no}}
	failed := PerfResult{Row: PerfRows[2], Failed: true, Stage: "bench"}
	noFit := PerfResult{Row: PerfRows[3], Failed: true, OutOfMemory: true, Stage: "bench (out of memory)"}
	adhoc := PerfResult{Row: PerfRow{Shape: "qwen2-tiny", Type: "Q8_0"}, PP: &PerfMetric{}, TG: &PerfMetric{}}
	longMissed := PerfResult{Row: PerfLongContextRows[0], TG: &PerfMetric{Met: &no}, Long: &LongContext{}}
	longMet := PerfResult{Row: PerfLongContextRows[0], TG: &PerfMetric{Met: &yes}, Long: &LongContext{}}
	for _, c := range []struct {
		rows    []PerfResult
		verdict string
		code    int
	}{
		{[]PerfResult{met}, PerfMet, 0},
		{[]PerfResult{met, missed}, PerfMissed, 1},
		{[]PerfResult{met, missed, failed}, PerfFailed, 1},
		{[]PerfResult{adhoc}, PerfNoTargets, 0},
		{[]PerfResult{met, longMet}, PerfMet, 0},
		{[]PerfResult{met, longMissed}, PerfMissed, 1},
		// a row out of memory could not run (exit 2), above a miss, below a failure
		{[]PerfResult{met, missed, noFit}, PerfCannotRun, 2},
		{[]PerfResult{noFit, failed}, PerfFailed, 1},
	} {
		p := &PerfRecord{Rows: c.rows}
		p.Decide()
		if p.Verdict != c.verdict || p.ExitCode() != c.code {
			t.Errorf("%d rows: %s exit %d, want %s exit %d (%s)", len(c.rows), p.Verdict, p.ExitCode(), c.verdict, c.code, p.VerdictLine)
		}
	}
}

func TestPerfLongContextRow_Issue6BarSelectedByNameAlone(t *testing.T) {
	// Issue 6: "tg128 after a 4K-token prompt within 15% of tg128 at empty KV on 7B Q4_K_M".
	want := PerfRow{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 4096, TargetTGRatio: 0.85}
	if len(PerfLongContextRows) != 1 || PerfLongContextRows[0] != want {
		t.Fatalf("%+v, want %+v", PerfLongContextRows, want)
	}
	rs, err := ParsePerfRows("qwen2-7b:q4_k_m@d4096")
	if err != nil || len(rs) != 1 || rs[0] != want || rs[0].Name() != "qwen2-7b:Q4_K_M@d4096" || rs[0].BaseName() != "qwen2-7b:Q4_K_M" {
		t.Fatalf("%+v %v", rs, err)
	}
	if rs[0].HasRef() {
		t.Error("the long-context row has no reference engine number")
	}
	// The depth-0 row and the long row are two rows; another depth is ad hoc.
	rs, err = ParsePerfRows("qwen2-7b:Q4_K_M,qwen2-7b:Q4_K_M@d4096,qwen2-tiny:Q8_0@d64")
	if err != nil || len(rs) != 3 || rs[0] != PerfRows[3] || rs[1] != want || rs[2] != (PerfRow{Shape: "qwen2-tiny", Type: "Q8_0", Depth: 64}) {
		t.Fatalf("%+v %v", rs, err)
	}
}

func TestNewLongContext_MetAtRatio09MissedAt08(t *testing.T) {
	tg0 := NewPerfMetric(BenchTest{Name: "tg128", TokS: []float64{300, 300, 300}}, 267.4, 330)
	cases := []struct {
		atDepth float64
		met     bool
	}{{270, true}, {255, true}, {240, false}} // ratios 0.9, 0.85 (the bar itself), 0.8
	for _, c := range cases {
		m, lc := NewLongContext(4096, BenchTest{Name: "tg128@d4096", TokS: []float64{c.atDepth}}, tg0, "row qwen2-7b:Q4_K_M", 0.85)
		if m.Met == nil || *m.Met != c.met || !near(float64(lc.Ratio), c.atDepth/300) || lc.MinRatio != 0.85 || lc.Depth != 4096 || lc.TG0.TokS != 300 {
			t.Errorf("%v tok/s at depth vs 300: met %v ratio %v, want met %v: %+v %+v", c.atDepth, m.Met, lc.Ratio, c.met, m, lc)
		}
		if !math.IsNaN(float64(m.Ref)) || !near(float64(m.Target), 255) {
			t.Errorf("no reference engine number, target 0.85 x 300: %+v", m)
		}
		r := PerfResult{Row: PerfLongContextRows[0], TG: &m, Long: &lc}
		if !r.Judged() || r.MetAll() != c.met {
			t.Errorf("%v: judged %v met %v", c.atDepth, r.Judged(), r.MetAll())
		}
		if !c.met && !near(m.ShortBy, (255-c.atDepth)/255) {
			t.Errorf("short by %v", m.ShortBy)
		}
	}
	m, lc := NewLongContext(64, BenchTest{Name: "tg128@d64", TokS: []float64{100}}, tg0, "own", 0)
	if r := (PerfResult{Row: PerfRow{Shape: "x", Type: "y", Depth: 64}, TG: &m, Long: &lc}); r.Judged() || !near(float64(lc.Ratio), 1.0/3) {
		t.Errorf("an ad-hoc depth row is measured, never judged: %+v %+v", m, lc)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestNewDecodeLaunches_CountsFromTheCensusTimeFromTheTimedTG(t *testing.T) {
	census := []byte(`{"tests":[{"name":"tg32","n_tokens":32,"tok_s":[100],"launches_per_token":400,"graph_replays_per_token":0.5,
		"kernels_per_token":{"a":10,"b":200,"c":50,"d":50,"e":40,"f":30,"g":20}}]}`)
	// Timed tg 500 tok/s: 2 ms per token, 2000 µs / 400 launches = 5 µs per
	// launch (the census run's own 100 tok/s would say 25).
	d, err := NewDecodeLaunches(census, 500)
	if err != nil {
		t.Fatal(err)
	}
	if d.Test != "tg32" || d.LaunchesPerToken != 400 || d.GraphReplaysPerToken != 0.5 || d.MSPerToken != 2 || d.USPerLaunch != 5 {
		t.Fatalf("%+v", d)
	}
	want := []KernelRate{{"b", 200}, {"c", 50}, {"d", 50}, {"e", 40}, {"f", 30}}
	if len(d.TopKernels) != TopKernels {
		t.Fatalf("top %v, want %v", d.TopKernels, want)
	}
	for i := range want {
		if d.TopKernels[i] != want[i] {
			t.Errorf("top %d: %v, want %v", i, d.TopKernels[i], want[i])
		}
	}
	for _, bad := range []string{
		`not json`,
		`{"tests":[{"name":"pp8","launches_per_token":4,"graph_replays_per_token":0}]}`,
		`{"tests":[{"name":"tg32","tok_s":[100]}]}`, // a CPU run: no census fields
		`{"tests":[{"name":"tg32","launches_per_token":0,"graph_replays_per_token":0}]}`,
	} {
		d, err := NewDecodeLaunches([]byte(bad), 500)
		if err == nil || !math.IsNaN(float64(d.LaunchesPerToken)) || !math.IsNaN(float64(d.USPerLaunch)) || d.MSPerToken != 2 {
			t.Errorf("%s: %+v %v, want an error, NaN counts and the timed 2 ms per token", bad, d, err)
		}
	}
	if args := strings.Join(CensusBenchArgs("m.gguf", "cuda"), " "); args != "bench --model m.gguf --device cuda -p 0 -n 32 -r 1 --format json" {
		t.Errorf("census args %q", args)
	}
	if CensusBenchEnv["MINFER_LAUNCH_CENSUS"] != "1" || CensusBenchEnv["MINFER_BENCH_WARMUP_MS"] != "0" || len(CensusBenchEnv) != 2 {
		t.Errorf("census env %v", CensusBenchEnv)
	}
}

// Bar (e): --rows issue20-table is issue 20's perf table, its 13 distinct
// model@depth rows in the issue's order, each Must target of
// PerfIssue20Rows on the row of the same name and no target elsewhere.
func TestParsePerfRows_Issue20TableIs13RowsInOrderWithTheMustTargetsOnTheirRows(t *testing.T) {
	want := []PerfRow{
		{Shape: "qwen2-7b", Type: "Q8_0", TargetPP: 12800},
		{Shape: "qwen2-7b", Type: "Q4_K_M", TargetPP: 10800},
		{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 4096, TargetPP: 9700},
		{Shape: "qwen2-7b", Type: "Q8_0", Depth: 4096},
		{Shape: "qwen3-0.6b", Type: "Q8_0", Depth: 4096, TargetPP: 40000},
		{Shape: "qwen2-0.5b", Type: "Q8_0", Depth: 4096},
		{Shape: "qwen3-0.6b", Type: "Q8_0", TargetPP: 52000},
		{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 30000, TargetTG: 245},
		{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 16384},
		{Shape: "qwen2-0.5b", Type: "Q4_K_M", TargetTG: 950},
		{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 8192},
		{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 32128, TargetPP: 6300},
		{Shape: "qwen2-7b", Type: "Q8_0", Depth: 32128, TargetPP: 6800, TargetTG: 220},
	}
	rs, err := ParsePerfRows("issue20-table")
	if err != nil || len(rs) != len(want) {
		t.Fatalf("%d rows, %v; want %d", len(rs), err, len(want))
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i+1, rs[i], want[i])
		}
	}
	// Every Must row of issue 20 is in the table, with its targets.
	for _, m := range PerfIssue20Rows {
		found := false
		for _, r := range rs {
			found = found || r == m
		}
		if !found {
			t.Errorf("Must row %+v not in issue20-table", m)
		}
	}
	if _, err := ParsePerfRows("qwen2-7b"); err == nil || !strings.Contains(err.Error(), "issue20-table") {
		t.Errorf("error does not name issue20-table: %v", err)
	}
}

// TestBaseNotSlower_IsTheRegistrysDefaultNotSlowerBar: the base build is
// judged by GATES.md gate 3's default bar for whole prefill and decode, the
// one the registry declares (levers.DefaultBars), not a second number.
func TestBaseNotSlower_IsTheRegistrysDefaultNotSlowerBar(t *testing.T) {
	if BaseNotSlower != DefaultBars.PP || BaseNotSlower != DefaultBars.TG {
		t.Errorf("BaseNotSlower %g, the registry's default bars pp %g tg %g: want one bar", BaseNotSlower, DefaultBars.PP, DefaultBars.TG)
	}
}

package harness

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness/gpumem"
)

// HBMCopyGBs is the HBM copy bandwidth measured on the lent H200
// (DEVICE.md, "Ceilings to compare against": ~4.3 TB/s, bytes read +
// written). Batch-1 decode reads every weight once per token, so
// bytes-per-token / HBMCopyGBs is the physical floor of a decode step.
const HBMCopyGBs = 4300.0

// PerfReference is the provenance of the reference numbers in PerfRows,
// copied from issue 6.
const PerfReference = "llama.cpp built for sm_90 from its 2026-08 source, measured on the lent H200 on 2026-11-29 with " +
	"llama-bench -p 512 -n 128 -r 5 -ngl 99, flash attention on auto, batch 1, same GGUF shape and weight type; " +
	"medians of 5 repetitions (the first pp512 repetition ran 10-20% slower while the clock ramped) (issue 6)"

// The test shapes of the reference: a run with other --pp/--tg is not
// compared against it.
const (
	PerfRefPP = 512
	PerfRefTG = 128
)

// PerfRow is one row of issue 6's target table: a synthesized model (shape
// and weight type) with the reference engine's tok/s and our targets. A row
// without reference numbers (RefTG == 0) is an ad-hoc row (e.g. the CPU
// smoke row qwen2-tiny:Q8_0): measured, never judged.
//
// A row with Depth > 0 is a long-context row: only tg runs, after Depth
// tokens of KV (minfer bench -p 0 -d Depth), and it is judged against the
// same invocation's tg at depth 0 on the same model: ours at depth >=
// TargetTGRatio x ours at depth 0 (no reference engine number: the bar is
// relative). Without TargetTGRatio it is measured, never judged.
type PerfRow struct {
	Shape         string  `json:"shape"`
	Type          string  `json:"type"`
	RefTG         float64 `json:"ref_tg128,omitempty"`
	RefPP         float64 `json:"ref_pp512,omitempty"`
	TargetTG      float64 `json:"target_tg128,omitempty"`
	TargetPP      float64 `json:"target_pp512,omitempty"`
	Depth         int     `json:"depth,omitempty"`
	TargetTGRatio float64 `json:"target_tg_ratio,omitempty"`
}

// PerfRows is issue 6's target table, in its order.
var PerfRows = []PerfRow{
	{Shape: "qwen2-0.5b", Type: "Q4_K_M", RefTG: 863.3, RefPP: 52503, TargetTG: 1100, TargetPP: 55000},
	{Shape: "qwen2-0.5b", Type: "Q8_0", RefTG: 901.8, RefPP: 59841, TargetTG: 1150, TargetPP: 60000},
	{Shape: "qwen3-0.6b", Type: "Q8_0", RefTG: 737.3, RefPP: 51235, TargetTG: 950, TargetPP: 52000},
	{Shape: "qwen2-7b", Type: "Q4_K_M", RefTG: 267.4, RefPP: 9906, TargetTG: 330, TargetPP: 11000},
	{Shape: "qwen2-7b", Type: "Q8_0", RefTG: 259.1, RefPP: 11870, TargetTG: 400, TargetPP: 12500},
}

// PerfLongContextRows is issue 6's long-context bar: "tg128 after a
// 4K-token prompt within 15% of tg128 at empty KV on 7B Q4_K_M". --rows all
// runs it after the table.
var PerfLongContextRows = []PerfRow{
	{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 4096, TargetTGRatio: 0.85},
}

// PerfIssue20Rows is issue 20's Must table (--rows issue20), judged
// against its absolute targets: pp512 and tg128 at depth (TargetPP and
// TargetTG hold at the row's depth) and the pp512 chunk-time slope of the
// 7B Q4_K_M rows against the peer's (abtest perf --peer). Not encoded: the
// 150-kernels-per-token bar of qwen2-0.5b Q4_K_M (the report shows the
// count) and "every row of today's table no slower than at 715715f"
// (--rows issue20-table --base-minfer: PerfIssue20Table, judged against a
// build of that commit run beside ours).
var PerfIssue20Rows = []PerfRow{
	{Shape: "qwen2-7b", Type: "Q8_0", TargetPP: 12800},
	{Shape: "qwen2-7b", Type: "Q4_K_M", TargetPP: 10800},
	{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 4096, TargetPP: 9700},
	{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 30000, TargetTG: 245},
	{Shape: "qwen2-7b", Type: "Q4_K_M", Depth: 32128, TargetPP: 6300},
	{Shape: "qwen2-7b", Type: "Q8_0", Depth: 32128, TargetPP: 6800, TargetTG: 220},
	{Shape: "qwen3-0.6b", Type: "Q8_0", TargetPP: 52000},
	{Shape: "qwen3-0.6b", Type: "Q8_0", Depth: 4096, TargetPP: 40000},
	{Shape: "qwen2-0.5b", Type: "Q4_K_M", TargetTG: 950},
}

// PerfIssue20Table is the 13 distinct model@depth rows of issue 20's
// perf table (--rows issue20-table), in its order. A row of
// PerfIssue20Rows (the same name) keeps its Must targets; the others are
// measured and, with --base-minfer, judged against the base build only.
var PerfIssue20Table = issue20Table()

func issue20Table() []PerfRow {
	names := []string{
		"qwen2-7b:Q8_0", "qwen2-7b:Q4_K_M", "qwen2-7b:Q4_K_M@d4096", "qwen2-7b:Q8_0@d4096",
		"qwen3-0.6b:Q8_0@d4096", "qwen2-0.5b:Q8_0@d4096", "qwen3-0.6b:Q8_0", "qwen2-7b:Q4_K_M@d30000",
		"qwen2-7b:Q4_K_M@d16384", "qwen2-0.5b:Q4_K_M", "qwen2-7b:Q4_K_M@d8192", "qwen2-7b:Q4_K_M@d32128",
		"qwen2-7b:Q8_0@d32128",
	}
	out := make([]PerfRow, 0, len(names))
	for _, n := range names {
		name, d, _ := strings.Cut(n, "@d")
		shape, typ, _ := strings.Cut(name, ":")
		row := PerfRow{Shape: shape, Type: typ}
		row.Depth, _ = strconv.Atoi(d)
		for _, r := range PerfIssue20Rows {
			if r.Name() == row.Name() {
				row = r
			}
		}
		out = append(out, row)
	}
	return out
}

// Name is "shape:type", with "@d<depth>" for a long-context row.
func (r PerfRow) Name() string {
	if r.Depth > 0 {
		return r.BaseName() + "@d" + strconv.Itoa(r.Depth)
	}
	return r.BaseName()
}

// BaseName is "shape:type": the depth-0 row of the same model.
func (r PerfRow) BaseName() string { return r.Shape + ":" + r.Type }

// HasRef reports whether the row carries reference numbers.
func (r PerfRow) HasRef() bool { return r.RefTG > 0 && r.RefPP > 0 }

// ParsePerfRows reads --rows: "all" (issue 6's table, then its
// long-context row), "issue20" (PerfIssue20Rows), "issue20-table"
// (PerfIssue20Table) or a comma-separated list of SHAPE:TYPE[@dDEPTH]. A
// name of the table (any case) takes the table's row; any other name is an
// ad-hoc row without reference numbers or targets (minfer synth decides
// whether the shape and type exist).
func ParsePerfRows(spec string) ([]PerfRow, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "all" {
		return append(append([]PerfRow(nil), PerfRows...), PerfLongContextRows...), nil
	}
	if spec == "issue20" {
		return append([]PerfRow(nil), PerfIssue20Rows...), nil
	}
	if spec == "issue20-table" {
		return append([]PerfRow(nil), PerfIssue20Table...), nil
	}
	var out []PerfRow
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		shape, typ, ok := strings.Cut(item, ":")
		shape, typ = strings.TrimSpace(shape), strings.TrimSpace(typ)
		depth := 0
		if t, d, at := strings.Cut(typ, "@"); at {
			n, err := strconv.Atoi(strings.TrimPrefix(d, "d"))
			if !strings.HasPrefix(d, "d") || err != nil || n < 1 {
				return nil, fmt.Errorf("--rows %q: %q is not a depth (want @d<tokens>, e.g. @d4096)", item, "@"+d)
			}
			typ, depth = strings.TrimSpace(t), n
		}
		if !ok || shape == "" || typ == "" {
			return nil, fmt.Errorf("--rows %q: want all, issue20, issue20-table or SHAPE:TYPE[@dDEPTH][,...] (e.g. qwen2-0.5b:Q4_K_M, qwen2-7b:Q4_K_M@d4096)", item)
		}
		for _, p := range []string{shape, typ} {
			if strings.ContainsAny(p, "/\\ :@") || p == "." || p == ".." {
				return nil, fmt.Errorf("--rows %q: %q is not a plain name", item, p)
			}
		}
		row := PerfRow{Shape: shape, Type: typ, Depth: depth}
		table := PerfRows
		if depth > 0 {
			table = PerfLongContextRows
		}
		for _, r := range table {
			if strings.EqualFold(r.Shape, shape) && strings.EqualFold(r.Type, typ) && r.Depth == depth {
				row = r
			}
		}
		if seen[row.Name()] {
			return nil, fmt.Errorf("--rows: %s twice", row.Name())
		}
		seen[row.Name()] = true
		out = append(out, row)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--rows %q: no row", spec)
	}
	return out, nil
}

// WeightBytes is the number of bytes one batch-1 decode step reads from the
// model's weights, and how it was obtained.
type WeightBytes struct {
	PerToken int64  `json:"per_token"`
	FileSize int64  `json:"file_size"`
	Method   string `json:"method"`
	// KVPerPos is the K and V elements one cached position holds over all
	// layers (2 x n_layer x n_head_kv x head_dim; 0: unknown): what a decode
	// step reads per attended position, on top of the weights.
	KVPerPos int64 `json:"kv_elems_per_pos,omitempty"`
}

// KVReadPerToken is the mean KV-cache bytes a decode step of the tgN test
// at depth reads (depth fill tokens, one prompt token, then tgN steps: the
// step i attends depth+1+i positions, depth+1+(tgN+1)/2 on average) in the
// bench's kv_format; NaN when the shape or the format is unknown. It is not
// in the GB/s (the floor is the weights'); the report states it beside them.
func (w WeightBytes) KVReadPerToken(kvFormat string, depth, tgN int) Num {
	per := map[string]float64{"f32": 4, "f16": 2, "q8_0": 34.0 / 32}[strings.ToLower(kvFormat)]
	if w.KVPerPos <= 0 || per == 0 || tgN < 1 || depth < 0 {
		return Num(math.NaN())
	}
	return Num(float64(w.KVPerPos) * per * (float64(depth) + 1 + float64(tgN+1)/2))
}

// WeightBytesFromInfo takes the decode read from `minfer info --json` (the
// engine counts it from the model's tensor table: model.DecodeReadOf): the
// harness never reads model files itself.
func WeightBytesFromInfo(info ModelInfo) (WeightBytes, error) {
	d := info.DecodeRead
	if d.WeightBytes <= 0 {
		return WeightBytes{FileSize: info.FileSize}, fmt.Errorf("minfer info --json of %s has no decode_read.weight_bytes_per_token", info.Path)
	}
	return WeightBytes{PerToken: d.WeightBytes, FileSize: info.FileSize, Method: "minfer info: " + d.Method, KVPerPos: d.KVElemsPerPos}, nil
}

// PerfMetric is one test (pp or tg) of one row.
type PerfMetric struct {
	Test    string  `json:"test"`               // pp512, tg128
	TokS    Num     `json:"tok_s"`              // median of the repetitions (what the reference reports)
	Mean    Num     `json:"mean"`               // mean of the repetitions
	Stddev  Num     `json:"stddev"`             // sample standard deviation
	Samples []Num   `json:"samples"`            // tok/s of every repetition
	Ref     Num     `json:"ref"`                // reference tok/s (NaN: none)
	RefFrom string  `json:"ref_from,omitempty"` // the peer measured in this run, or StoredReference
	Ratio   Num     `json:"ratio"`              // TokS / Ref
	Target  Num     `json:"target"`             // ours must be >= Target
	Met     *bool   `json:"met"`                // nil: not judged
	Short   Num     `json:"short"`              // Target - TokS when missed
	ShortBy float64 `json:"short_by"`           // (Target - TokS) / Target when missed
}

// NewPerfMetric compares one bench test with the reference and the target
// (ref or target <= 0: not compared, not judged).
func NewPerfMetric(t BenchTest, ref, target float64) PerfMetric {
	nan := Num(math.NaN())
	m := PerfMetric{Test: t.Name, TokS: Num(t.Value()), Mean: Num(t.MeanTokS), Stddev: Num(t.StddevTokS), Samples: Nums(t.TokS),
		Ref: nan, Ratio: nan, Target: nan, Short: nan}
	if ref > 0 {
		m.Ref, m.Ratio = Num(ref), Num(t.Value()/ref)
	}
	if target > 0 {
		met := t.Value() >= target
		m.Target, m.Met = Num(target), &met
		if !met {
			m.Short = Num(target - t.Value())
			m.ShortBy = (target - t.Value()) / target
		}
	}
	return m
}

// LongContext is the judgement of a long-context row: its tg at depth
// against the same invocation's tg at depth 0 on the same model.
type LongContext struct {
	Depth      int        `json:"depth"`
	TG0        PerfMetric `json:"tg_depth0"`                   // tg at empty KV (median of its repetitions)
	TG0From    string     `json:"tg_depth0_from"`              // which bench measured TG0
	TG0Command string     `json:"tg_depth0_command,omitempty"` // when the row ran it itself
	Ratio      Num        `json:"ratio"`                       // tg at depth / TG0
	MinRatio   float64    `json:"min_ratio,omitempty"`         // the target: Ratio >= MinRatio (0: not judged)
}

// NewLongContext compares tgDepth (the row's tg at depth) with tg0 (the
// same run's tg at depth 0): the returned metric is tgDepth judged against
// minRatio x tg0 (minRatio <= 0: not judged), so "missed by X%" reads as for
// every other target. There is no reference engine number.
func NewLongContext(depth int, tgDepth BenchTest, tg0 PerfMetric, tg0From string, minRatio float64) (PerfMetric, LongContext) {
	target := 0.0
	if minRatio > 0 {
		target = minRatio * float64(tg0.TokS)
	}
	m := NewPerfMetric(tgDepth, 0, target)
	lc := LongContext{Depth: depth, TG0: tg0, TG0From: tg0From, Ratio: Num(tgDepth.Value() / float64(tg0.TokS))}
	if minRatio > 0 {
		lc.MinRatio = minRatio
	}
	return m, lc
}

// Decode is the bandwidth view of a decode rate: the weight bytes read per
// second, its share of the HBM floor, and the floor itself in tok/s.
type Decode struct {
	GBs       Num `json:"gb_s"`        // bytes/token x tok/s / 1e9
	HBMShare  Num `json:"hbm_share"`   // GBs / HBMCopyGBs
	FloorTokS Num `json:"floor_tok_s"` // HBMCopyGBs*1e9 / bytes/token
}

// DecodeBandwidth computes the Decode view of tokS at bytesPerToken.
func DecodeBandwidth(bytesPerToken int64, tokS float64) Decode {
	if bytesPerToken <= 0 || !(tokS > 0) {
		nan := Num(math.NaN())
		return Decode{nan, nan, nan}
	}
	gbs := float64(bytesPerToken) * tokS / 1e9
	return Decode{GBs: Num(gbs), HBMShare: Num(gbs / HBMCopyGBs), FloorTokS: Num(HBMCopyGBs * 1e9 / float64(bytesPerToken))}
}

// Census run of a depth-0 perf row: one short decode-only bench with the
// launch census on and no warmup budget (its speed is perturbed by the
// census and never used).
const (
	CensusTG   = 32 // decode steps of the census run
	TopKernels = 5  // kernels listed per row, most launches per token first
)

// CensusBenchArgs is the census run's minfer command line (after the binary).
func CensusBenchArgs(model, device string) []string {
	return []string{"bench", "--model", model, "--device", device, "-p", "0", "-n", strconv.Itoa(CensusTG), "-r", "1", "--format", "json"}
}

// CensusBenchEnv is the census run's environment on top of the pinned one.
var CensusBenchEnv = map[string]string{"MINFER_LAUNCH_CENSUS": "1", "MINFER_BENCH_WARMUP_MS": "0"}

// KernelRate is one kernel's launches per decoded token.
type KernelRate struct {
	Kernel   string  `json:"kernel"`
	PerToken float64 `json:"per_token"`
}

// DecodeLaunches is the launch-bound view of a row's decode: kernels and
// graph replays per token from the census run, and the time per token and
// per launch from the row's timed bench (which ran without the census).
// When the census run failed, Error says why and every number is NaN.
type DecodeLaunches struct {
	Command              string       `json:"command,omitempty"`
	Test                 string       `json:"test,omitempty"`          // the census run's test (tg32)
	LaunchesPerToken     Num          `json:"launches_per_token"`      // kernel launches per decode step (a replayed graph counts each kernel it holds)
	GraphReplaysPerToken Num          `json:"graph_replays_per_token"` // CUDA graph replays per decode step
	TopKernels           []KernelRate `json:"top_kernels,omitempty"`   // most launches per token first
	MSPerToken           Num          `json:"ms_per_token"`            // 1000 / median tg tok/s of the timed bench
	USPerLaunch          Num          `json:"us_per_launch"`           // MSPerToken x 1000 / LaunchesPerToken
	Error                string       `json:"error,omitempty"`         // the census run failed: no launch numbers
	StderrTail           string       `json:"stderr_tail,omitempty"`   // of a failed census run
}

// NewDecodeLaunches reads the census run's bench JSON and combines it with
// timedTG, the row's timed tg (median tok/s) from the run without the
// census: the census run gives counts only, never times. An error means
// the census run has no usable counts; the caller states it in the row.
func NewDecodeLaunches(censusJSON []byte, timedTG float64) (DecodeLaunches, error) {
	nan := Num(math.NaN())
	d := DecodeLaunches{LaunchesPerToken: nan, GraphReplaysPerToken: nan, MSPerToken: nan, USPerLaunch: nan}
	if timedTG > 0 && !math.IsInf(timedTG, 0) {
		d.MSPerToken = Num(1000 / timedTG)
	}
	var doc BenchResult
	if err := json.Unmarshal(censusJSON, &doc); err != nil {
		return d, fmt.Errorf("census bench json: %w", err)
	}
	var tg *BenchTest
	for i := range doc.Tests {
		if strings.HasPrefix(doc.Tests[i].Name, "tg") {
			tg = &doc.Tests[i]
		}
	}
	if tg == nil {
		return d, fmt.Errorf("census bench json has no tg test")
	}
	d.Test = tg.Name
	if tg.LaunchesPerToken == nil || tg.GraphReplaysPerToken == nil {
		return d, fmt.Errorf("census bench json: %s has no launches_per_token (no CUDA backend opened, or the census is off)", tg.Name)
	}
	if l := *tg.LaunchesPerToken; !(l > 0) || math.IsInf(l, 0) {
		return d, fmt.Errorf("census bench json: %s has launches_per_token %v", tg.Name, l)
	}
	d.LaunchesPerToken, d.GraphReplaysPerToken = Num(*tg.LaunchesPerToken), Num(*tg.GraphReplaysPerToken)
	d.USPerLaunch = Num(float64(d.MSPerToken) * 1000 / *tg.LaunchesPerToken)
	for k, v := range tg.KernelsPerToken {
		d.TopKernels = append(d.TopKernels, KernelRate{Kernel: k, PerToken: v})
	}
	sort.Slice(d.TopKernels, func(i, j int) bool {
		a, b := d.TopKernels[i], d.TopKernels[j]
		if a.PerToken != b.PerToken {
			return a.PerToken > b.PerToken
		}
		return a.Kernel < b.Kernel
	})
	if len(d.TopKernels) > TopKernels {
		d.TopKernels = d.TopKernels[:TopKernels]
	}
	return d, nil
}

// PerfResult is one row of a perf run: measured, or failed with the stage
// and the stderr tail (a failed row has no numbers, never zeros).
type PerfResult struct {
	Row          PerfRow      `json:"row"`
	Model        string       `json:"model,omitempty"`
	ModelSHA256  string       `json:"model_sha256,omitempty"`
	Weights      WeightBytes  `json:"weight_bytes"`
	Backend      string       `json:"backend,omitempty"`
	KVFormat     string       `json:"kv_format,omitempty"`
	Clocks       *Clocks      `json:"clocks_before,omitempty"`
	ClocksNote   string       `json:"clocks_note,omitempty"`
	Synth        string       `json:"synth"` // "cached" or how long it took
	SynthCommand string       `json:"synth_command,omitempty"`
	BenchCommand string       `json:"bench_command,omitempty"`
	BenchWall    float64      `json:"bench_wall_s,omitempty"`
	Warmup       BenchWarmup  `json:"warmup"`
	PP           *PerfMetric  `json:"pp,omitempty"`
	TG           *PerfMetric  `json:"tg,omitempty"`
	Long         *LongContext `json:"long_context,omitempty"` // a long-context row's comparison
	Decode       Decode       `json:"decode"`
	RefDecode    Decode       `json:"ref_decode"` // the reference's tg at our bytes/token
	// Launches is the decode launch count of a depth-0 row, from its one
	// extra census run (nil: not run, e.g. a long-context or failed row).
	Launches *DecodeLaunches `json:"decode_launches,omitempty"`
	// DeviceMemory is the timed bench process's peak device memory,
	// sampled from outside it (nil: not sampled); a peer engine's row is
	// measured the same way.
	DeviceMemory *gpumem.Usage `json:"device_memory,omitempty"`
	// Peer is the peer engine's measurement of the row (nil: no --peer).
	Peer *PeerRow `json:"peer,omitempty"`
	// Base is the base build's measurement of the row and ours against it
	// (nil: no --base-minfer).
	Base   *BaseRow `json:"base,omitempty"`
	Failed bool     `json:"failed,omitempty"`
	// OutOfMemory: the failed row's minfer exited with
	// schema.ExitOutOfMemory (the row does not fit this machine): the row
	// could not run, which is no failure of the engine.
	OutOfMemory bool   `json:"out_of_memory,omitempty"`
	Stage       string `json:"stage,omitempty"` // synth, bench, parse, interrupted
	Error       string `json:"error,omitempty"`
	StderrTail  string `json:"stderr_tail,omitempty"`
}

// Judged reports whether any of the row's targets was judged (measured, at
// the test shapes its targets were set for): issue 6's rows have both, a
// long-context row its tg against the same run's tg at depth 0, issue 20's
// rows the ones they name.
func (r PerfResult) Judged() bool {
	return !r.Failed && (metJudged(r.PP) || metJudged(r.TG) || r.Base.judged())
}

// MetAll reports whether the row was judged and met every target it has.
func (r PerfResult) MetAll() bool {
	if !r.Judged() {
		return false
	}
	for _, m := range []*PerfMetric{r.PP, r.TG} {
		if metJudged(m) && !*m.Met {
			return false
		}
	}
	return !r.Base.slower()
}

func metJudged(m *PerfMetric) bool { return m != nil && m.Met != nil }

// Perf verdicts.
const (
	PerfMet       = "MET"
	PerfMissed    = "MISSED"
	PerfFailed    = "FAILED"
	PerfNoTargets = "NO TARGETS"
	// PerfCannotRun: a row does not fit this machine (out of memory) and
	// no row failed otherwise.
	PerfCannotRun = "COULD NOT RUN"
)

// PerfRecord is one `abtest perf` run.
type PerfRecord struct {
	Started       time.Time    `json:"started"`
	Verdict       string       `json:"verdict"`
	VerdictLine   string       `json:"verdict_line"`
	Command       string       `json:"command"`
	Device        string       `json:"device"`
	PP            int          `json:"pp"`
	TG            int          `json:"tg"`
	Reps          int          `json:"reps"`
	BenchWarmupMS int          `json:"bench_warmup_ms"`
	Reference     string       `json:"reference"`
	HBMCopyGBs    float64      `json:"hbm_copy_gb_s"`
	Comparable    string       `json:"comparable_note,omitempty"` // why ratios are not like-for-like
	Env           Environment  `json:"environment"`
	Rows          []PerfResult `json:"rows"`
	// Peer is the peer engine measured beside minfer (nil: no --peer; the
	// ratios then use the stored reference constants).
	Peer   *PerfPeer   `json:"peer,omitempty"`
	Slopes []PerfSlope `json:"slopes,omitempty"`
	// With are the --with settings every minfer process ran with (nil:
	// every lever at its registry default).
	With map[string]string `json:"with,omitempty"`
	// Base is the older minfer build measured beside ours (nil: no
	// --base-minfer).
	Base *PerfBase `json:"base,omitempty"`
}

// Decide sets Verdict and VerdictLine: FAILED when a row failed, else
// MISSED when a judged row missed a target, else MET when at least one row
// was judged, else NO TARGETS.
func (p *PerfRecord) Decide() {
	var met, missed, failed, unjudged int
	var missList, failList, noFit []string
	for _, r := range p.Rows {
		switch {
		case r.Failed && r.OutOfMemory:
			noFit = append(noFit, r.Row.Name())
		case r.Failed:
			failed++
			failList = append(failList, r.Row.Name()+" ("+r.Stage+")")
		case !r.Judged():
			unjudged++
		case r.MetAll():
			met++
		default:
			missed++
			missList = append(missList, r.Row.Name())
		}
	}
	var slower []string
	baseJudged, baseMet := 0, 0
	for _, r := range p.Rows {
		if r.Failed || !r.Base.judged() {
			continue
		}
		baseJudged++
		if !r.Base.slower() {
			baseMet++
			continue
		}
		var parts []string
		for _, v := range []*BaseVs{r.Base.VsPP, r.Base.VsTG} {
			if v != nil && !v.Met {
				parts = append(parts, fmt.Sprintf("%s %.3f x the base's, %.1f%% slower", v.Test, float64(v.Ratio), 100*v.SlowerBy))
			}
		}
		slower = append(slower, r.Row.Name()+" ("+strings.Join(parts, "; ")+")")
	}
	switch {
	case failed > 0:
		p.Verdict = PerfFailed
	case len(noFit) > 0:
		p.Verdict = PerfCannotRun
	case missed > 0:
		p.Verdict = PerfMissed
	case met > 0:
		p.Verdict = PerfMet
	default:
		p.Verdict = PerfNoTargets
	}
	line := fmt.Sprintf("%d row(s): %d met their targets, %d missed a target, %d failed (no numbers; never counted as zero), %d not judged (no reference or other test shapes)",
		len(p.Rows), met, missed, failed, unjudged)
	if len(missList) > 0 {
		line += "; missed: " + strings.Join(missList, ", ")
	}
	if p.Base != nil {
		line += fmt.Sprintf("; against the base build: %d of %d measured row(s) no slower", baseMet, baseJudged)
		if len(slower) > 0 {
			line += ", slower than the base: " + strings.Join(slower, ", ")
		}
	}
	if len(failList) > 0 {
		line += "; failed: " + strings.Join(failList, ", ")
	}
	if len(noFit) > 0 {
		line += "; could not run (out of memory: does not fit this machine): " + strings.Join(noFit, ", ")
	}
	for _, sl := range p.Slopes {
		if sl.Met != nil && !*sl.Met {
			if failed == 0 && len(noFit) == 0 {
				p.Verdict = PerfMissed
			}
			line += fmt.Sprintf("; pp%d chunk-time slope of %s %.2f ms per 1,024 cached tokens, above the peer's %.2f", sl.PP, sl.Model, float64(sl.Ours), float64(sl.Peer))
		}
	}
	if p.Comparable != "" {
		line += "; " + p.Comparable
	}
	p.VerdictLine = line
}

// ExitCode is 0 when no row failed and no judged target was missed, 2
// when a row could not run for want of memory (and none failed), else 1.
func (p *PerfRecord) ExitCode() int {
	switch p.Verdict {
	case PerfFailed, PerfMissed:
		return 1
	case PerfCannotRun:
		return 2
	}
	return 0
}

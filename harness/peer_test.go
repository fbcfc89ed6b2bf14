package harness

import (
	"math"
	"strings"
	"testing"
)

// llamaBenchDoc is the JSON example of llama.cpp's
// tools/llama-bench/README.md ("JSON"), trimmed to a few of its other
// fields, plus a tg test at depth 512 as `-d 512` prints it.
const llamaBenchDoc = `[
  {"build_commit": "8cf427ff", "model_filename": "models/Qwen2.5-7B-Instruct-Q4_K_M.gguf", "n_gpu_layers": -1,
   "n_prompt": 512, "n_gen": 0, "n_depth": 0, "test_time": "2025-04-24T11:58:50Z",
   "avg_ns": 72135640, "stddev_ns": 1453752, "avg_ts": 7100.002165, "stddev_ts": 140.341520,
   "samples_ns": [ 74601900, 71632900, 71745200, 71952700, 70745500 ],
   "samples_ts": [ 6863.1, 7147.55, 7136.37, 7115.79, 7237.21 ]},
  {"build_commit": "8cf427ff", "n_prompt": 0, "n_gen": 128, "n_depth": 0,
   "avg_ns": 1076767880, "stddev_ns": 9449585, "avg_ts": 118.881588, "stddev_ts": 1.041811,
   "samples_ns": [ 1075361300, 1065089400, 1071761200, 1081934900, 1089692600 ],
   "samples_ts": [ 119.03, 120.178, 119.43, 118.307, 117.464 ]},
  {"n_prompt": 0, "n_gen": 128, "n_depth": 512, "avg_ts": 116.7, "stddev_ts": 0.6, "samples_ts": [116.1, 116.7, 117.3]}
]`

func TestParseLlamaBench_DocumentedFieldsMedianOfSamplesTS(t *testing.T) {
	pp, tg, err := ParseLlamaBench([]byte(llamaBenchDoc), 512, 128, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The cell is the median of samples_ts, as ours; avg_ts is the mean.
	if pp.Name != "pp512" || pp.Value() != 7136.37 || pp.MeanTokS != 7100.002165 || pp.StddevTokS != 140.341520 || len(pp.TokS) != 5 {
		t.Errorf("pp %+v", pp)
	}
	if tg.Name != "tg128" || tg.Value() != 119.03 || tg.MeanTokS != 118.881588 {
		t.Errorf("tg %+v", tg)
	}
	_, td, err := ParseLlamaBench([]byte(llamaBenchDoc), 0, 128, 512)
	if err != nil || td.Name != "tg128@d512" || td.Value() != 116.7 {
		t.Errorf("tg at depth %+v: %v", td, err)
	}
	// A test of another depth is not taken for the one asked.
	if _, _, err := ParseLlamaBench([]byte(llamaBenchDoc), 512, 128, 4096); err == nil || !strings.Contains(err.Error(), "n_depth 4096") {
		t.Errorf("depth 4096: %v", err)
	}
}

func TestParseLlamaBench_MissingFieldsAreOneErrorNeverAZero(t *testing.T) {
	for doc, want := range map[string]string{
		``:   "printed nothing",
		`{}`: "not a JSON array",
		`[`:  "not a JSON array",
		`[]`: "an empty array",
		`[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "samples_ts": [1]}]`:                 "pp512 has no positive avg_ts",
		`[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 0, "samples_ts": [1]}]`:    "pp512 has no positive avg_ts",
		`[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 5}]`:                       "pp512 has no samples_ts",
		`[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 5, "samples_ts": [5, 0]}]`: "a sample of 0 tok/s",
		`[{"n_prompt": 512, "n_gen": 0, "avg_ts": 5, "samples_ts": [5]}]`:                  "lacks n_prompt, n_gen or n_depth",
		`[{"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 5, "samples_ts": [5]}]`:    "no test with n_prompt 0, n_gen 128, n_depth 0 (tg128)",
	} {
		if _, _, err := ParseLlamaBench([]byte(doc), 512, 128, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}

func TestParsePerfRows_Issue20DepthRowsParseAndIssue6RowKeepsItsBar(t *testing.T) {
	rows, err := ParsePerfRows("qwen2-7b:Q4_K_M@d4096,qwen2-7b:Q4_K_M@d8192,qwen2-7b:Q4_K_M@d16384,qwen2-7b:Q4_K_M@d30000,qwen2-7b:Q8_0@d32128")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{4096, 8192, 16384, 30000, 32128}
	for i, r := range rows {
		if r.Depth != want[i] {
			t.Errorf("row %d depth %d, want %d", i, r.Depth, want[i])
		}
	}
	if rows[0].TargetTGRatio != 0.85 || rows[1].TargetTGRatio != 0 {
		t.Errorf("issue 6's bar: %+v %+v", rows[0], rows[1])
	}
}

func TestSlopePer1024_LeastSquaresByHand(t *testing.T) {
	// 64 ms at 0, 96 at 4096, 128 at 8192: 32 ms per 4,096 = 8 per 1,024.
	if s := SlopePer1024([]int{0, 4096, 8192}, []float64{64, 96, 128}); math.Abs(s-8) > 1e-12 {
		t.Errorf("slope %v, want 8", s)
	}
	// Off the line: least squares over (0,10), (1024,14), (2048,15): 2.5.
	if s := SlopePer1024([]int{0, 1024, 2048}, []float64{10, 14, 15}); math.Abs(s-2.5) > 1e-12 {
		t.Errorf("slope %v, want 2.5", s)
	}
	if !math.IsNaN(SlopePer1024([]int{0}, []float64{1})) || !math.IsNaN(SlopePer1024([]int{5, 5}, []float64{1, 2})) {
		t.Error("one depth has no slope")
	}
}

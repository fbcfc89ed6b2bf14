package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/tokenizer"
	"github.com/minfer-go/minfer/schema"
)

// The JSON schema of minfer bench, as the gate runner reads it: every key
// of the document, of warmup and of each test.
var (
	benchKeys       = []string{"model", "model_sha256", "backend", "kv_format", "threads", "n_prompt", "n_gen", "reps", "warmup", "tests", "levers", "go_version", "date", "kernel_sources_sha256"}
	benchWarmupKeys = []string{"budget_ms", "iterations", "elapsed_ms"}
	benchTestKeys   = []string{"name", "n_tokens", "samples_ms", "tok_s", "mean_tok_s", "stddev_tok_s"}
)

func hasKeys(t *testing.T, what string, m map[string]any, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s lacks %q", what, k)
		}
	}
}

func TestBench_JSONFollowsTheDocumentedSchema(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "16", "-n", "4", "-r", "2", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	hasKeys(t, "bench", doc, benchKeys)
	warm, _ := doc["warmup"].(map[string]any)
	hasKeys(t, "warmup", warm, benchWarmupKeys)
	if it, _ := warm["iterations"].(float64); it < minWarmupIterations {
		t.Errorf("warmup ran %v iterations, want at least %d", warm["iterations"], minWarmupIterations)
	}
	if b, _ := warm["budget_ms"].(float64); b != 0 {
		t.Errorf("warmup budget %v, want the configured 0", warm["budget_ms"])
	}
	if len(doc["model_sha256"].(string)) != 64 {
		t.Errorf("model_sha256 %q", doc["model_sha256"])
	}
	tests, _ := doc["tests"].([]any)
	if len(tests) != 2 {
		t.Fatalf("tests: %v", doc["tests"])
	}
	for i, name := range []string{"pp16", "tg4"} {
		tt, _ := tests[i].(map[string]any)
		hasKeys(t, name, tt, benchTestKeys)
		if tt["name"] != name {
			t.Errorf("test %d is %v, want %s", i, tt["name"], name)
		}
		samples, _ := tt["samples_ms"].([]any)
		toks, _ := tt["tok_s"].([]any)
		if len(samples) != 2 || len(toks) != 2 {
			t.Errorf("%s: %d samples, %d rates, want 2 each", name, len(samples), len(toks))
		}
		for _, s := range toks {
			if v, _ := s.(float64); !(v > 0) {
				t.Errorf("%s: tok/s %v is not positive", name, s)
			}
		}
	}
	var res schema.Bench
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.NPrompt != 16 || res.NGen != 4 || res.Reps != 2 || res.Tests[1].NTokens != 4 {
		t.Errorf("sizes: %+v", res)
	}
}

func TestBench_MarkdownAndCSVPrintEveryTest(t *testing.T) {
	m := synthModel(t)
	cfg := testConfig(t)
	md, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(md, "pp8") || !strings.Contains(md, "tg2") || !strings.Contains(md, "±") {
		t.Errorf("markdown:\n%s", md)
	}
	out, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "0", "-r", "2", "--format", "csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 2 || rows[1][5] != "pp8" {
		t.Fatalf("csv %v (%v):\n%s", rows, err, out)
	}
}

func TestBench_BadArgumentsFailWithOneLine(t *testing.T) {
	cfg := testConfig(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "--format", "xml"}, 2, `--format "xml"`},
		{[]string{"bench", "--json", "--format", "csv"}, 2, "--json and --format csv disagree"},
		{[]string{"bench", "-r", "0"}, 2, "-r 0"},
		{[]string{"bench", "-p", "0", "-n", "0"}, 2, "not both 0"},
		{[]string{"bench", "--device", "tpu", "--model", "x.gguf"}, 2, "--device"},
		{[]string{"bench", "-p", "64", "--ctx", "32", "--model", "x.gguf"}, 1, "do not fit the context"},
		{[]string{"bench", "-d", "-1"}, 2, "-d -1"},
		{[]string{"bench", "-p", "8", "-n", "4", "-d", "16", "--ctx", "23", "--model", "x.gguf"}, 1, "pp8 / tg4@d16 do not fit the context of 23"},
		{[]string{"bench", "--model", "/nonexistent/m.gguf"}, 1, "m.gguf"},
	}
	for _, c := range cases {
		stdout, stderr, code := runCLI(t, cfg, c.args...)
		wantOneLineFailure(t, stdout, stderr, code, c.code, c.want)
	}
}

func TestMeanStddev_MatchesKnownValues(t *testing.T) {
	mean, sd := meanStddev([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if mean != 5 || math.Abs(sd-math.Sqrt(32.0/7)) > 1e-12 {
		t.Errorf("mean %g sd %g, want 5 and sqrt(32/7)", mean, sd)
	}
	if m, s := meanStddev([]float64{3}); m != 3 || s != 0 {
		t.Errorf("single: %g %g", m, s)
	}
	if m, s := meanStddev(nil); m != 0 || s != 0 {
		t.Errorf("empty: %g %g", m, s)
	}
}

// benchDoc runs bench with --format json and returns the document as a generic
// map (its exact key set) and typed.
func benchDoc(t *testing.T, args ...string) (map[string]any, schema.Bench) {
	t.Helper()
	stdout, stderr, code := runCLI(t, testConfig(t), append([]string{"bench", "--device", "cpu", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("bench %v: exit %d: %s", args, code, stderr)
	}
	var doc map[string]any
	var res schema.Bench
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	return doc, res
}

func testNamesOf(r schema.Bench) []string {
	var out []string
	for _, t := range r.Tests {
		out = append(out, t.Name)
	}
	return out
}

func TestBench_DepthZeroIsTodaysOutputExactly(t *testing.T) {
	m := synthModel(t)
	for _, args := range [][]string{
		{"--model", m, "-p", "8", "-n", "4", "-r", "1"},
		{"--model", m, "-p", "8", "-n", "4", "-r", "1", "-d", "0"},
	} {
		doc, res := benchDoc(t, args...)
		keys := make([]string, 0, len(doc))
		for k := range doc {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := slices.Sorted(slices.Values(benchKeys))
		if !slices.Equal(keys, want) {
			t.Errorf("%v: keys %v, want exactly %v (no \"depth\" at depth 0)", args, keys, want)
		}
		if got := testNamesOf(res); !slices.Equal(got, []string{"pp8", "tg4"}) {
			t.Errorf("%v: tests %v, want [pp8 tg4]", args, got)
		}
	}
	cfg := testConfig(t)
	out, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1", "-d", "0", "--format", "csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 3 || rows[1][5] != "pp8" || rows[2][5] != "tg2" {
		t.Fatalf("csv %v (%v)", rows, err)
	}
}

func TestBench_DepthNamesTestsAndRecordsDepthInEveryFormat(t *testing.T) {
	m := synthModel(t)
	// --ctx 24 is exactly the 16 + 8 positions pp8@d16 needs: the fill and
	// the test fit with nothing to spare.
	doc, res := benchDoc(t, "--model", m, "-p", "8", "-n", "4", "-r", "2", "-d", "16", "--ctx", "24")
	if d, _ := doc["depth"].(float64); d != 16 || res.Depth != 16 {
		t.Errorf("depth %v, want 16", doc["depth"])
	}
	if got := testNamesOf(res); !slices.Equal(got, []string{"pp8@d16", "tg4@d16"}) {
		t.Fatalf("tests %v, want [pp8@d16 tg4@d16]", got)
	}
	for _, tt := range res.Tests {
		if len(tt.TokS) != 2 || !(tt.MeanTokS > 0) {
			t.Errorf("%s: %+v", tt.Name, tt)
		}
	}
	if res.NPrompt != 8 || res.NGen != 4 || res.Tests[0].NTokens != 8 || res.Tests[1].NTokens != 4 {
		t.Errorf("sizes: %+v", res)
	}
	cfg := testConfig(t)
	md, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "4", "-r", "1", "-d", "16")
	if code != 0 || !strings.Contains(md, "pp8@d16") || !strings.Contains(md, "tg4@d16") {
		t.Errorf("exit %d (%s), markdown:\n%s", code, stderr, md)
	}
	out, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "0", "-n", "4", "-r", "1", "-d", "16", "--format", "csv")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil || len(rows) != 2 || rows[1][5] != "tg4@d16" {
		t.Errorf("exit %d (%s), csv %v (%v)", code, stderr, rows, err)
	}
}

func TestBench_DepthBeyondTheModelsContextIsOneError(t *testing.T) {
	m := synthModel(t) // qwen2-tiny: context_length 4096
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "4", "-d", "4096")
	wantOneLineFailure(t, stdout, stderr, code, 1, "maximum context of 4096")
	// One past the limit: 4089 + pp8 = 4097 positions (tg4 needs 4089+5).
	stdout, stderr, code = runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "0", "-d", "4089")
	wantOneLineFailure(t, stdout, stderr, code, 1, "need 4097 positions, more than the model's maximum context of 4096")
	// (A run at exactly the limit is TestBench_DepthNamesTestsAndRecordsDepthInEveryFormat's
	// --ctx 24: a 4K fill on the CPU takes tens of seconds.)
}

// recordingLM is an lm that records every Reset and Forward (the position
// it starts at and its length), to check what the bench runs untimed.
type recordingLM struct {
	pos int
	log []string
}

func (r *recordingLM) Forward(tokens []int32, _ bool) ([]float32, error) {
	r.log = append(r.log, fmt.Sprintf("%d+%d", r.pos, len(tokens)))
	r.pos += len(tokens)
	return make([]float32, 4), nil
}

func (r *recordingLM) ForwardInto(_ []float32, tokens []int32, all bool) ([]float32, error) {
	return r.Forward(tokens, all)
}
func (r *recordingLM) HParams() model.HParams          { return model.HParams{NVocab: 100} }
func (r *recordingLM) Tokenizer() *tokenizer.Tokenizer { return nil }
func (r *recordingLM) Reset()                          { r.pos = 0; r.log = append(r.log, "reset") }
func (r *recordingLM) Truncate(n int) error {
	if n < 0 || n > r.pos {
		return fmt.Errorf("truncate to %d of %d", n, r.pos)
	}
	r.pos = n
	r.log = append(r.log, fmt.Sprintf("truncate %d", n))
	return nil
}
func (r *recordingLM) Close() error { return nil }

func TestBenchRunner_DepthStartsEveryRepetitionAtTheFill(t *testing.T) {
	e := &recordingLM{}
	br := newBenchRunner(e, 8, 3, 600)
	for rep := 0; rep < 2; rep++ {
		if _, err := br.runPP(); err != nil {
			t.Fatal(err)
		}
	}
	// The first repetition empties the cache and fills 600 in chunks of
	// 512; the second cuts back to the fill; each times pp8 at 600.
	want := []string{"reset", "0+512", "512+88", "600+8", "truncate 600", "600+8"}
	if !slices.Equal(e.log, want) {
		t.Errorf("pp8@d600 ran %v, want %v", e.log, want)
	}
	e.log = nil
	if _, err := br.runTG(3); err != nil {
		t.Fatal(err)
	}
	// tg3@d600: back to the fill, the untimed one-token prefill at 600, steps at 601..603.
	want = []string{"truncate 600", "600+1", "601+1", "602+1", "603+1"}
	if !slices.Equal(e.log, want) {
		t.Errorf("tg3@d600 ran %v, want %v", e.log, want)
	}
	// Depth 0 is today's bench: no fill.
	e = &recordingLM{}
	br = newBenchRunner(e, 8, 2, 0)
	br.runPP()
	br.runTG(2)
	want = []string{"reset", "0+8", "reset", "0+1", "1+1", "2+1"}
	if !slices.Equal(e.log, want) || br.ppName() != "pp8" || br.tgName() != "tg2" {
		t.Errorf("depth 0 ran %v (%s, %s), want %v", e.log, br.ppName(), br.tgName(), want)
	}
}

// censusLM is an lm that counts launches as a CUDA backend's census would:
// every Forward launches 10 "step" kernels, one "tok" kernel per token and
// one graph replay, so any untimed Forward counted shows in the numbers.
type censusLM struct {
	recordingLM
	c censusCount
}

func (l *censusLM) Forward(tokens []int32, all bool) ([]float32, error) {
	l.c.add(censusCount{kernels: map[string]int64{"step": 10, "tok": int64(len(tokens))}, replays: 1})
	return l.recordingLM.Forward(tokens, all)
}

func (l *censusLM) ForwardInto(_ []float32, tokens []int32, all bool) ([]float32, error) {
	return l.Forward(tokens, all)
}

// read is the census reader: a copy, as Kernels.Census returns.
func (l *censusLM) read() censusCount {
	var c censusCount
	c.add(l.c)
	return c
}

func TestCensusPerToken_DeltaOverRepsTimesTokens(t *testing.T) {
	// The process has counted a warmup of 500 launches and 3 replays before
	// the timed reps; 2 reps of tg4 then launch 8 x (30 mmv + 10 norm) and
	// replay 8 graphs.
	before := censusCount{kernels: map[string]int64{"mmv": 300, "norm": 200}, replays: 3}
	after := censusCount{kernels: map[string]int64{"mmv": 300 + 240, "norm": 200 + 80, "gemm": 0}, replays: 3 + 8}
	var timed censusCount
	timed.add(after.sub(before))
	l, r, k := censusPerToken(timed, 2*4)
	if l == nil || r == nil || *l != 40 || *r != 1 || len(k) != 2 || k["mmv"] != 30 || k["norm"] != 10 {
		t.Fatalf("launches %v replays %v kernels %v, want 40, 1, {mmv:30 norm:10}", deref(l), deref(r), k)
	}
	// Counting from the process start (warmup included) would say 102.5.
	var all censusCount
	all.add(after)
	if l, _, _ := censusPerToken(all, 8); *l == 40 {
		t.Fatal("the warmup-inclusive census gives the same number: the case proves nothing")
	}
	if l, r, k := censusPerToken(timed, 0); l != nil || r != nil || k != nil {
		t.Fatal("no tokens must give no numbers, never a division by zero")
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestBenchRunner_CensusCountsOnlyTheTimedWindows(t *testing.T) {
	e := &censusLM{}
	br := newBenchRunner(e, 8, 3, 600)
	br.census = e.read
	// Warmup as the bench does it: a pp and a one-step tg, three times.
	for i := 0; i < minWarmupIterations; i++ {
		if _, err := br.runPP(); err != nil {
			t.Fatal(err)
		}
		if _, err := br.runTG(1); err != nil {
			t.Fatal(err)
		}
	}
	tg, err := br.measure("tg3@d600", 3, 2, func() (time.Duration, error) { return br.runTG(3) })
	if err != nil {
		t.Fatal(err)
	}
	// Timed: 2 reps x 3 steps, each 10 "step" + 1 "tok" launches and one
	// replay. Counting the fill (2 forwards of 512+88 tokens per rep), the
	// one-token prefill or the warmup would change every number.
	if tg.LaunchesPerToken == nil || *tg.LaunchesPerToken != 11 || *tg.GraphReplaysPerToken != 1 ||
		tg.KernelsPerToken["step"] != 10 || tg.KernelsPerToken["tok"] != 1 {
		t.Fatalf("tg3@d600: launches %v replays %v kernels %v, want 11, 1, {step:10 tok:1}",
			deref(tg.LaunchesPerToken), deref(tg.GraphReplaysPerToken), tg.KernelsPerToken)
	}
	pp, err := br.measure("pp8@d600", 8, 2, br.runPP)
	if err != nil {
		t.Fatal(err)
	}
	// Timed: 2 forwards of 8 tokens: (10 + 8) launches and 1 replay each, per 16 tokens.
	if *pp.LaunchesPerToken != 36.0/16 || *pp.GraphReplaysPerToken != 2.0/16 || pp.KernelsPerToken["tok"] != 1 {
		t.Fatalf("pp8@d600: launches %v replays %v kernels %v", deref(pp.LaunchesPerToken), deref(pp.GraphReplaysPerToken), pp.KernelsPerToken)
	}
	// Without a census reader the fields stay empty.
	br.census = nil
	if tg, _ := br.measure("tg3@d600", 3, 1, func() (time.Duration, error) { return br.runTG(3) }); tg.LaunchesPerToken != nil || tg.KernelsPerToken != nil {
		t.Fatalf("census off: %+v", tg)
	}
}

// On the CPU the census fields count node executions by path name (no
// graph replays) with the census on, and are absent with it off; the
// device fields are never there.
func TestBench_CPUWritesCensusFieldsOnlyWithTheCensusOnAndNoDeviceFields(t *testing.T) {
	m := synthModel(t)
	censusKeys := []string{"launches_per_token", "graph_replays_per_token", "kernels_per_token"}
	for _, env := range [][]string{{"MINFER_BENCH_WARMUP_MS=0"}, {"MINFER_BENCH_WARMUP_MS=0", "MINFER_LAUNCH_CENSUS=1"}} {
		cfg, err := levers.Parse(env)
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCLI(t, cfg, "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "4", "-r", "2", "--format", "json")
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", env, code, stderr)
		}
		var doc struct{ Tests []map[string]any }
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || len(doc.Tests) != 2 {
			t.Fatalf("%v: %v\n%s", env, err, stdout)
		}
		want := slices.Clone(benchTestKeys)
		if cfg.LaunchCensus {
			want = append(want, censusKeys...)
		}
		for _, tt := range doc.Tests {
			keys := slices.Sorted(maps.Keys(tt))
			if slices.Sort(want); !slices.Equal(keys, want) {
				t.Errorf("%v: %v has keys %v, want exactly %v", env, tt["name"], keys, want)
			}
		}
		if !cfg.LaunchCensus {
			continue
		}
		var res schema.Bench
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		for _, tt := range res.Tests {
			k := tt.KernelsPerToken
			if *tt.GraphReplaysPerToken != 0 || !(*tt.LaunchesPerToken > 0) || !(k["cpu_attn"] > 0) || !(k["cpu_fused_ffn_f16"] > 0) {
				t.Errorf("%s: launches %v replays %v per token, kernels %v: want CPU node counts, no replays",
					tt.Name, deref(tt.LaunchesPerToken), deref(tt.GraphReplaysPerToken), k)
			}
		}
		// qwen2-tiny decode: every layer runs one attention per token.
		tg := res.Tests[1]
		if layers := tg.KernelsPerToken["cpu_attn"]; layers != float64(int(layers)) || layers < 1 {
			t.Errorf("tg: cpu_attn %v per token, want a whole number of layers", layers)
		}
	}
}

// clockLM is an lm on a device that times its work: every forward takes
// 2 ms of device time per token.
type clockLM struct {
	recordingLM
	dev time.Duration
}

func (c *clockLM) Forward(tokens []int32, all bool) ([]float32, error) {
	c.dev += time.Duration(len(tokens)) * 2 * time.Millisecond
	return c.recordingLM.Forward(tokens, all)
}

func (c *clockLM) ForwardInto(_ []float32, tokens []int32, all bool) ([]float32, error) {
	return c.Forward(tokens, all)
}

// device_ms holds each repetition's timed window only (not the fill nor
// tg's one-token prefill), device_tok_s the rate over it; without a device
// clock both stay absent.
func TestBenchRunner_DeviceTimeCoversEachTimedWindow(t *testing.T) {
	e := &clockLM{}
	br := newBenchRunner(e, 8, 3, 100)
	br.device = func() time.Duration { return e.dev }
	tg, err := br.measure("tg3@d100", 3, 2, func() (time.Duration, error) { return br.runTG(3) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tg.DeviceMS, []float64{6, 6}) || !slices.Equal(tg.DeviceTokS, []float64{500, 500}) {
		t.Fatalf("tg3: device_ms %v device_tok_s %v, want [6 6] and [500 500]", tg.DeviceMS, tg.DeviceTokS)
	}
	pp, err := br.measure("pp8@d100", 8, 1, br.runPP)
	if err != nil || !slices.Equal(pp.DeviceMS, []float64{16}) || !slices.Equal(pp.DeviceTokS, []float64{500}) {
		t.Fatalf("pp8: %v, device_ms %v device_tok_s %v, want [16] and [500]", err, pp.DeviceMS, pp.DeviceTokS)
	}
	br.device = nil
	if tg, _ := br.measure("tg3@d100", 3, 1, func() (time.Duration, error) { return br.runTG(3) }); tg.DeviceMS != nil || tg.DeviceTokS != nil {
		t.Fatalf("no device clock: %+v", tg)
	}
	b, err := json.Marshal(schema.BenchTest{Name: "x"})
	if err != nil || strings.Contains(string(b), "device") {
		t.Fatalf("absent device fields are written: %s (%v)", b, err)
	}
}

// zeroFillLM is a recordingLM whose engine can write the fill's cells.
type zeroFillLM struct{ recordingLM }

func (z *zeroFillLM) FillKVZeros(tokens []int32) error {
	z.pos = len(tokens)
	z.log = append(z.log, fmt.Sprintf("zeros %d", len(tokens)))
	return nil
}

// --fill zeros gets the depth into the cache without a forward (the
// prefill fill is the test above), then every repetition cuts back to it.
func TestBenchRunner_FillZerosRunsNoForwardForTheDepth(t *testing.T) {
	e := &zeroFillLM{}
	br := newBenchRunner(e, 8, 2, 600)
	br.zeroFill = true
	for range 2 {
		if _, err := br.runPP(); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"zeros 600", "600+8", "truncate 600", "600+8"}; !slices.Equal(e.log, want) {
		t.Errorf("pp8@d600 with --fill zeros ran %v, want %v", e.log, want)
	}
	// An engine without the method is one error, never a silent prefill.
	br = newBenchRunner(&recordingLM{}, 8, 2, 600)
	br.zeroFill = true
	if _, err := br.runPP(); err == nil || !strings.Contains(err.Error(), "--fill zeros") {
		t.Errorf("zero fill on an engine without it: %v", err)
	}
}

// The document says how the depth was filled; a bad --fill, or zeros with
// a draft (whose own cache the zeros would not fill), is refused.
func TestBench_FillIsRecordedAndBadValuesAreRefused(t *testing.T) {
	m := synthModel(t)
	for _, fill := range []string{"zeros", "prefill"} {
		doc, res := benchDoc(t, "--model", m, "-p", "8", "-n", "4", "-r", "1", "-d", "16", "--ctx", "24", "--fill", fill)
		if res.DepthFill != fill || doc["depth_fill"] != fill || !slices.Equal(testNamesOf(res), []string{"pp8@d16", "tg4@d16"}) {
			t.Errorf("--fill %s: depth_fill %v, tests %v", fill, doc["depth_fill"], testNamesOf(res))
		}
	}
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-d", "16", "--fill", "random")
	wantOneLineFailure(t, stdout, stderr, code, 2, `--fill "random"`)
	stdout, stderr, code = runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-d", "16", "--fill", "zeros", "--draft", m)
	wantOneLineFailure(t, stdout, stderr, code, 2, "--fill zeros")
}

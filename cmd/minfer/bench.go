package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/cuda/kernels"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/internal/filehash"
	"github.com/minfer-go/minfer/schema"
)

// minfer bench --format json writes schema.Bench; the gate runner parses
// it. The document (every sample is kept):
//
//	{
//	  "model": "path", "model_sha256": "hex", "backend": "cpu|cuda", "kv_format": "f32|f16|q8_0|auto",
//	  "threads": 2, "n_prompt": 512, "n_gen": 128, "depth": 4096 (only when -d > 0), "reps": 5,
//	  "warmup": {"budget_ms": 2000, "iterations": 3, "elapsed_ms": 2345.6},
//	  "tests": [
//	    {"name": "pp512", "n_tokens": 512, "samples_ms": [..reps..], "tok_s": [..reps..],
//	     "mean_tok_s": 1.0, "stddev_tok_s": 0.1},
//	    {"name": "tg128", "n_tokens": 128, ...,
//	     "device_ms": [..reps..], "device_tok_s": [..reps..],   (CUDA only)
//	     "launches_per_token": 338.0, "graph_replays_per_token": 1.0,
//	     "kernels_per_token": {"minfer_...": 168.0, ...}}   (census only)
//	  ],   (at depth D > 0 the names are "pp512@dD", "tg128@dD")
//	  "levers": {"MINFER_...": "value"}, "go_version": "go1.26", "date": "RFC 3339, UTC",
//	  "kernel_sources_sha256": "hex",   (the kernel sources this minfer embeds)
//	  "kernels": {"path": "...", "sha256": "hex", "source_sha256": "hex", "compiler": "...", "flags": "..."}   (CUDA only)
//	}
//
// pp<P> times a prefill of P tokens from an empty KV cache; tg<N> times N
// single-token decode steps after a one-token prefill (the prefill is not
// timed). A test whose size is 0 is left out. stddev is the sample standard
// deviation (n-1), 0 for a single sample.
//
// With --depth D > 0 (llama-bench's -d) every test starts from a KV cache
// that already holds D tokens, filled by an untimed prefill (--fill zeros:
// their cells written as zeros instead, no compute; abtest's depth runs
// use it, since attention costs the same over any values): pp<P>@d<D>
// times the prefill at positions D..D+P-1, tg<N>@d<D> the N decode steps
// after the fill and the one-token prefill (positions D+1..D+N). "depth" is
// in the document only when D > 0, so -d 0 prints exactly what it did before
// the flag existed.
//
// With the launch census on (MINFER_LAUNCH_CENSUS=1) every test also
// carries what its timed windows ran, over all its repetitions:
// launches_per_token (census counts / (reps x n_tokens): on CUDA kernel
// launches, a graph replay counting every kernel it holds; on the CPU node
// executions by path name, cpu_*; both where a model is split),
// graph_replays_per_token (0 on the CPU) and kernels_per_token (the same
// per name). The census is read right before and right after each timed
// window, so the warmup, the depth fill and tg's one-token prefill are not
// counted. Without the census the three fields are absent.
//
// On CUDA every test also carries device_ms, per repetition the device time
// of its timed window (CUDA events at every split boundary of every
// forward in it, cuda/timing.go: the kernels and any gap in which the
// stream waited for the host), and device_tok_s, n_tokens / that time. On
// the CPU both are absent. A slow_decode / slow_prefill test mutation
// grows both wall and device time (its spin kernel is device time).

// minWarmupIterations is the warmup floor whatever the time budget.
const minWarmupIterations = 3

type benchFlags struct {
	modelFlags
	p, n, reps int
	depth      int
	fill       string // --fill: how the depth gets into the KV cache (prefill or zeros)
	format     string // md, json or csv
	json       bool   // --json: --format json
	output     string // -o: the file to write instead of stdout
	turns      int    // --turns: time a conversation of this many turns (bench_turns.go)
	script     string // --script: the user turns of --turns
	draft      draftFlags
	prompt     string // --prompt: the text tg continues with --draft (draft.go)
}

func newBenchCmd(a *app) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "measure prefill (pp) and decode (tg) throughput, llama-bench style",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.bench(cmd, &f)
		},
	}
	fl := cmd.Flags()
	f.register(cmd, 0)
	fl.IntVarP(&f.p, "n-prompt", "p", 512, "prefill test size in tokens (0: no pp test)")
	fl.IntVarP(&f.n, "n-gen", "n", 128, "decode test size in tokens (0: no tg test)")
	fl.IntVarP(&f.reps, "repetitions", "r", 5, "timed repetitions per test")
	fl.IntVarP(&f.depth, "depth", "d", 0, "tokens already in the KV cache before each test (untimed fill; 0: empty KV)")
	fl.StringVar(&f.fill, "fill", "prefill", "how -d fills the KV cache: prefill (the tokens run through the model) or zeros (their cells written as zeros, no compute: attention costs the same, in a fraction of the set-up; the timed tests then compute meaningless logits)")
	fl.StringVar(&f.format, "format", "md", "output format: md, json (schema.Bench) or csv")
	fl.BoolVar(&f.json, "json", false, "same as --format json")
	fl.StringVarP(&f.output, "output", "o", "", "write the output to this file instead of stdout")
	fl.IntVar(&f.turns, "turns", 0, "time a greedy conversation of this many turns instead of pp/tg: per turn the time to first token and the decode tok/s of its -n answer tokens (0: off)")
	fl.StringVar(&f.script, "script", "", "with --turns: the user turns, separated by lines of --- (cycled; default: a built-in script)")
	f.draft.register(cmd, a.cfg)
	fl.StringVar(&f.prompt, "prompt", "", "with --draft: the text the tg test generates after, greedily, drafts checked (default: a built-in Python snippet); tg then times generated tokens")
	return cmd
}

// benchFormats are the formats of --format.
var benchFormats = map[string]bool{"md": true, "json": true, "csv": true}

// resolveOutput settles --format, --json and -o before anything runs.
// "-o md|json|csv" without --format or --json is the spelling of before
// -o meant a file: it still selects the format (said on stderr), so the
// command lines recorded in committed reports still run; with --format
// given, -o json is a file named json.
func (f *benchFlags) resolveOutput(cmd *cobra.Command) error {
	formatGiven := cmd.Flags().Changed("format")
	if f.json {
		if formatGiven && f.format != "json" {
			return usagef("--json and --format %s disagree", f.format)
		}
		f.format, formatGiven = "json", true
	}
	if !formatGiven && benchFormats[f.output] {
		fmt.Fprintf(cmd.ErrOrStderr(), "minfer: bench -o %s is deprecated: -o is the output file now; use --format %s\n", f.output, f.output)
		f.format, f.output = f.output, ""
	}
	if !benchFormats[f.format] {
		return usagef("--format %q: want md, json or csv", f.format)
	}
	return nil
}

// meanStddev returns the mean and the sample standard deviation of xs.
func meanStddev(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// fileSHA256 is the file's SHA-256, remembered across processes
// (internal/filehash): every bench process of an A/B reports its model's.
func fileSHA256(path string) (string, error) {
	r, err := filehash.SHA256(path)
	if err != nil {
		return "", fmt.Errorf("sha256: %w", err)
	}
	if r.CacheErr != nil {
		fmt.Fprintf(os.Stderr, "minfer: warning: %v\n", r.CacheErr)
	}
	return r.SHA256, nil
}

// benchTokens is a deterministic pseudo-random token sequence (ids below
// min(nVocab, 32000) so they are ordinary text tokens in real vocabularies).
func benchTokens(n, nVocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 0x62656e6368))
	hi := min(nVocab, 32000)
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(hi))
	}
	return out
}

func (a *app) bench(cmd *cobra.Command, f *benchFlags) error {
	if err := f.resolveOutput(cmd); err != nil {
		return err
	}
	if err := f.draft.check(cmd); err != nil {
		return err
	}
	if f.prompt != "" && f.draft.draft == "" {
		return usagef("--prompt is the text of a --draft tg test: give --draft")
	}
	if f.turns != 0 || f.script != "" {
		if f.prompt != "" {
			return usagef("--prompt is the text of the tg test: --turns takes --script")
		}
		return a.benchTurns(cmd, f)
	}
	draftPrompt := f.prompt
	if draftPrompt == "" {
		draftPrompt = benchDraftPrompt
	}
	if f.p < 0 || f.n < 0 || (f.p == 0 && f.n == 0) {
		return usagef("-p %d -n %d: want non-negative sizes, not both 0", f.p, f.n)
	}
	if f.reps < 1 {
		return usagef("-r %d: want at least one repetition", f.reps)
	}
	if f.depth < 0 {
		return usagef("-d %d: want a non-negative depth (tokens in the KV cache before each test)", f.depth)
	}
	switch {
	case f.fill != "prefill" && f.fill != "zeros":
		return usagef("--fill %q: want prefill or zeros", f.fill)
	case f.fill == "zeros" && f.draft.draft != "":
		return usagef("--fill zeros fills the target's cache only: a --draft run fills by prefill")
	}
	// The context holds the fill and the larger test after it: D+P, D+1+N.
	need := f.depth + max(f.p, 1+f.n)
	if f.n == 0 {
		need = f.depth + f.p
	}
	if f.draft.draft != "" && f.n > 0 {
		// The prompt's tokens are at most its bytes (and BOS).
		need = max(need, f.depth+len(draftPrompt)+2+f.n)
	}
	if f.ctx == 0 {
		f.ctx = max(need, 16)
	}
	if err := f.check(); err != nil {
		return err
	}
	if need > f.ctx {
		return fmt.Errorf("pp%d / tg%d%s do not fit the context of %d (--ctx)", f.p, f.n, depthSuffix(f.depth), f.ctx)
	}
	path, err := f.path()
	if err != nil {
		return err
	}
	if f.depth > 0 {
		// Checked before the KV cache is allocated: a depth past what the
		// model was trained for is refused, not run with nonsense positions.
		limit, err := modelContextLimit(path)
		if err != nil {
			return err
		}
		if limit > 0 && need > limit {
			return fmt.Errorf("-d %d: the fill and the test need %d positions, more than the model's maximum context of %d (context_length)", f.depth, need, limit)
		}
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return err
	}
	e, err := a.open(path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer e.Close()
	dec, closeDraft, err := a.openDraft(&f.draft, e, path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer closeDraft()
	br := newBenchRunner(e, f.p, f.n, f.depth)
	br.zeroFill = f.fill == "zeros"
	br.census = a.censusReader()
	br.device = deviceClock(e)
	ppName, tgName := br.ppName(), br.tgName()
	runPP, runTG := br.runPP, br.runTG
	if dec != nil {
		ids := encodePrompt(e.Tokenizer(), draftPrompt, false)
		runTG = func(steps int) (time.Duration, error) { return br.runTGDraft(dec, ids, steps) }
	}

	// Untimed warmup: one iteration is the pp shape and one decode step,
	// repeated until the budget is spent and at least 3 have run.
	res, err := a.benchHead(e, path, sum, f)
	if err != nil {
		return err
	}
	res.NPrompt, res.Depth = f.p, f.depth
	if f.depth > 0 {
		res.DepthFill = f.fill
	}
	res.Warmup.BudgetMS = float64(a.cfg.BenchWarmupMS)
	budget := time.Duration(a.cfg.BenchWarmupMS) * time.Millisecond
	w0 := time.Now()
	for res.Warmup.Iterations < minWarmupIterations || time.Since(w0) < budget {
		if f.p > 0 {
			if _, err := runPP(); err != nil {
				return fmt.Errorf("warmup: %w", err)
			}
		}
		if f.n > 0 {
			steps := 1
			if dec != nil { // a few steps: the verify shape compiles (and is captured)
				steps = min(f.n, 4*(1+dec.K()))
			}
			if _, err := runTG(steps); err != nil {
				return fmt.Errorf("warmup: %w", err)
			}
		}
		res.Warmup.Iterations++
	}
	res.Warmup.ElapsedMS = ms(time.Since(w0))

	if f.p > 0 {
		t, err := br.measure(ppName, f.p, f.reps, runPP)
		if err != nil {
			return err
		}
		res.Tests = append(res.Tests, t)
	}
	if f.n > 0 {
		if dec != nil {
			dec.ResetStats()
		}
		t, err := br.measure(tgName, f.n, f.reps, func() (time.Duration, error) { return runTG(f.n) })
		if err != nil {
			return err
		}
		if dec != nil {
			t.Speculative = speculativeDoc(dec, dec.Stats())
		}
		res.Tests = append(res.Tests, t)
	}
	if res.DeviceMemory, err = benchDeviceMemory(e); err != nil {
		return err
	}
	return emitBench(cmd, f, &res)
}

// benchHead is what every bench document states before its tests: the
// model, the engine it ran on, the settings and the kernels.
func (a *app) benchHead(e lm, path, sum string, f *benchFlags) (schema.Bench, error) {
	res := schema.Bench{
		Model: path, ModelSHA256: sum, Backend: backendName(e, f.device), KVFormat: kvFormat(e, a.cfg.CacheType),
		Threads: threads(e), NGen: f.n, Reps: f.reps, Levers: a.cfg.Set(),
		GoVersion: runtime.Version(), KernelSources: kernels.SourceHash(),
	}
	var err error
	res.Kernels, err = a.kernelsDoc()
	return res, err
}

// emitBench dates the document and writes it in the chosen format to
// stdout or -o FILE.
func emitBench(cmd *cobra.Command, f *benchFlags, res *schema.Bench) error {
	res.Date = time.Now().UTC().Format(time.RFC3339)
	if f.output == "" {
		return writeBench(cmd.OutOrStdout(), f.format, res)
	}
	var buf bytes.Buffer
	if err := writeBench(&buf, f.format, res); err != nil {
		return err
	}
	if err := os.WriteFile(f.output, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench -o: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "minfer: wrote %s (%s)\n", f.output, f.format)
	return nil
}

// writeBench writes the result in format (md, json or csv).
func writeBench(w io.Writer, format string, res *schema.Bench) error {
	switch format {
	case "json":
		return writeJSON(w, res, true)
	case "csv":
		return writeBenchCSV(w, res)
	}
	return writeBenchMD(w, res)
}

// benchRunner runs one repetition of the pp and tg tests on an engine: the
// token sequences are fixed per process, so every repetition does the same
// work.
type benchRunner struct {
	e               lm
	p, n, depth     int
	pps, tgs, fills []int32
	filled          bool      // the depth fill is in the cache (fill)
	zeroFill        bool      // --fill zeros: the fill's cells written as zeros, not computed
	logits          []float32 // the last forward's logits, the buffer of the next

	// census reads the launch census (nil: off); timed sums its deltas
	// over the timed windows of the test being measured.
	census func() censusCount
	timed  censusCount

	// device reads the backend's device time (nil: not timed, the CPU);
	// lastDevice is the device time of the last timed window.
	device     func() time.Duration
	lastDevice time.Duration
}

// measure runs reps timed repetitions of one test of n tokens. With the
// census on, the test carries the launches of its timed windows per token.
func (b *benchRunner) measure(name string, n, reps int, run func() (time.Duration, error)) (schema.BenchTest, error) {
	t := schema.BenchTest{Name: name, NTokens: n}
	b.timed = censusCount{}
	for r := 0; r < reps; r++ {
		d, err := run()
		if err != nil {
			return t, err
		}
		t.SamplesMS = append(t.SamplesMS, ms(d))
		t.TokS = append(t.TokS, rate(n, d))
		if b.device != nil {
			t.DeviceMS = append(t.DeviceMS, ms(b.lastDevice))
			t.DeviceTokS = append(t.DeviceTokS, rate(n, b.lastDevice))
		}
	}
	t.MeanTokS, t.StddevTokS = meanStddev(t.TokS)
	if b.census != nil {
		t.LaunchesPerToken, t.GraphReplaysPerToken, t.KernelsPerToken = censusPerToken(b.timed, reps*n)
	}
	return t, nil
}

// timedWindow brackets one timed window: it reads the census and the
// device time before (the returned func reads them after: the census
// difference is added to b.timed, the device time of the window kept in
// b.lastDevice), so only what the window ran is counted. The census reads
// sit outside the timer.
func (b *benchRunner) timedWindow() (done func()) {
	var before censusCount
	if b.census != nil {
		before = b.census()
	}
	var dev0 time.Duration
	if b.device != nil {
		dev0 = b.device()
	}
	return func() {
		if b.device != nil {
			b.lastDevice = b.device() - dev0
		}
		if b.census != nil {
			b.timed.add(b.census().sub(before))
		}
	}
}

func newBenchRunner(e lm, p, n, depth int) *benchRunner {
	nVocab := e.HParams().NVocab
	return &benchRunner{e: e, p: p, n: n, depth: depth,
		pps: benchTokens(p, nVocab, 1), tgs: benchTokens(1+n, nVocab, 2), fills: benchTokens(depth, nVocab, 3)}
}

func (b *benchRunner) ppName() string { return "pp" + strconv.Itoa(b.p) + depthSuffix(b.depth) }
func (b *benchRunner) tgName() string { return "tg" + strconv.Itoa(b.n) + depthSuffix(b.depth) }

// fill leaves exactly the depth tokens in the KV cache, untimed. The first
// call empties the cache and prefills them (chunks of benchFillChunk bound
// the activations and share pp512's compiled graph); later calls cut the
// context back to them (Truncate): every test writes positions >= depth
// only, so the first depth cells still hold the fill. Depth 0 is Reset.
func (b *benchRunner) fill(what string) error {
	if len(b.fills) == 0 {
		b.e.Reset()
		return nil
	}
	if b.filled {
		if err := b.e.Truncate(len(b.fills)); err != nil {
			return fmt.Errorf("%s: back to the depth fill: %w", what, err)
		}
		return nil
	}
	if b.zeroFill {
		z, ok := b.e.(interface{ FillKVZeros([]int32) error })
		if !ok {
			return fmt.Errorf("%s: --fill zeros: this engine cannot write KV cells", what)
		}
		if err := z.FillKVZeros(b.fills); err != nil {
			return fmt.Errorf("%s: depth fill: %w", what, err)
		}
		b.filled = true
		return nil
	}
	b.e.Reset()
	for i := 0; i < len(b.fills); i += benchFillChunk {
		if _, err := b.forward(b.fills[i:min(i+benchFillChunk, len(b.fills))]); err != nil {
			return fmt.Errorf("%s: depth fill at %d: %w", what, i, err)
		}
	}
	b.filled = true
	return nil
}

// forward runs tokens and keeps their last logits in b.logits, reused from
// one forward to the next (the bench reads none of them).
func (b *benchRunner) forward(tokens []int32) ([]float32, error) {
	l, err := b.e.ForwardInto(b.logits, tokens, false)
	if err == nil {
		b.logits = l
	}
	return l, err
}

// runPP times one prefill of p tokens after the fill.
func (b *benchRunner) runPP() (time.Duration, error) {
	if err := b.fill(b.ppName()); err != nil {
		return 0, err
	}
	done := b.timedWindow()
	t := time.Now()
	if _, err := b.forward(b.pps); err != nil {
		return 0, fmt.Errorf("%s: %w", b.ppName(), err)
	}
	d := time.Since(t)
	done()
	return d, nil
}

// runTG times steps single-token decodes after the fill and an untimed
// one-token prefill.
func (b *benchRunner) runTG(steps int) (time.Duration, error) {
	if err := b.fill(b.tgName()); err != nil {
		return 0, err
	}
	if _, err := b.forward(b.tgs[:1]); err != nil {
		return 0, fmt.Errorf("%s prefill: %w", b.tgName(), err)
	}
	done := b.timedWindow()
	t := time.Now()
	for i := 1; i <= steps; i++ {
		if _, err := b.forward(b.tgs[i : i+1]); err != nil {
			return 0, fmt.Errorf("%s step %d: %w", b.tgName(), i, err)
		}
	}
	d := time.Since(t)
	done()
	return d, nil
}

// censusCount is what the launch census has counted: launches per kernel
// (a graph replay adds every kernel it holds) and graph replays.
type censusCount struct {
	kernels map[string]int64
	replays int64
}

// sub is c minus an earlier reading base.
func (c censusCount) sub(base censusCount) censusCount {
	d := censusCount{kernels: map[string]int64{}, replays: c.replays - base.replays}
	for k, n := range c.kernels {
		if n -= base.kernels[k]; n != 0 {
			d.kernels[k] = n
		}
	}
	return d
}

// add adds the counts of d to c.
func (c *censusCount) add(d censusCount) {
	if c.kernels == nil {
		c.kernels = map[string]int64{}
	}
	for k, n := range d.kernels {
		c.kernels[k] += n
	}
	c.replays += d.replays
}

// censusPerToken divides the census of a test's timed windows by the
// tokens they ran (reps x n_tokens): total launches, graph replays and
// launches per kernel, each per token.
func censusPerToken(timed censusCount, tokens int) (launches, replays *float64, kernels map[string]float64) {
	if tokens <= 0 {
		return nil, nil, nil
	}
	var total int64
	kernels = map[string]float64{}
	for k, n := range timed.kernels {
		total += n
		kernels[k] = float64(n) / float64(tokens)
	}
	l, r := float64(total)/float64(tokens), float64(timed.replays)/float64(tokens)
	return &l, &r, kernels
}

// censusReader reads the launch census over every backend the process
// opened, CUDA kernel launches and CPU node executions alike (nil: the
// census is off, and the bench writes no census fields). The CPU replays
// no graphs.
func (a *app) censusReader() func() censusCount {
	if !a.cfg.LaunchCensus {
		return nil
	}
	d := &a.dev
	return func() censusCount {
		c := censusCount{kernels: d.census()}
		for _, b := range d.backends {
			c.replays += int64(b.CaptureStats().Replays)
		}
		return c
	}
}

// deviceClock reads the device time of the backend the engine runs on
// (nil when it does not time its work: the CPU; the bench then writes no
// device fields).
func deviceClock(e lm) func() time.Duration {
	be, ok := e.(interface{ Backends() []graph.Backend })
	if !ok || len(be.Backends()) == 0 {
		return nil
	}
	if c, ok := be.Backends()[0].(model.DeviceClock); ok {
		return c.DeviceTime
	}
	return nil
}

// benchFillChunk is the largest forward of the untimed depth fill.
const benchFillChunk = 512

// depthSuffix is what a test name carries at depth d: "@d4096", or nothing
// at depth 0 (llama-bench's naming).
func depthSuffix(d int) string {
	if d == 0 {
		return ""
	}
	return "@d" + strconv.Itoa(d)
}

// modelContextLimit reads the model's trained context length from the GGUF
// header (0: the file does not say) without loading the weights.
func modelContextLimit(path string) (int, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("depth check: %w", err)
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		return 0, fmt.Errorf("depth check: %s: %w", path, err)
	}
	return hp.NCtxTrain, nil
}

// threads is the engine's worker count when it says, else GOMAXPROCS.
func threads(e lm) int {
	if t, ok := e.(interface{ Threads() int }); ok {
		return t.Threads()
	}
	return runtime.GOMAXPROCS(0)
}

func writeBenchMD(w io.Writer, r *schema.Bench) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| model\t backend\t kv\t threads\t test\t t/s\t")
	fmt.Fprintln(tw, "| ---\t ---\t ---\t ---:\t ---:\t ---:\t")
	for _, t := range r.Tests {
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %d\t %s\t %.2f ± %.2f\t\n", r.Model, r.Backend, r.KVFormat, r.Threads, t.Name, t.MeanTokS, t.StddevTokS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nwarmup: %d iterations in %.0f ms (budget %.0f ms); %d reps; %s\n",
		r.Warmup.Iterations, r.Warmup.ElapsedMS, r.Warmup.BudgetMS, r.Reps, r.GoVersion)
	return err
}

func writeBenchCSV(w io.Writer, r *schema.Bench) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"model", "model_sha256", "backend", "kv_format", "threads", "test", "n_tokens", "reps", "mean_tok_s", "stddev_tok_s", "samples_ms"})
	for _, t := range r.Tests {
		samples := make([]string, len(t.SamplesMS))
		for i, s := range t.SamplesMS {
			samples[i] = strconv.FormatFloat(s, 'f', 3, 64)
		}
		cw.Write([]string{r.Model, r.ModelSHA256, r.Backend, r.KVFormat, strconv.Itoa(r.Threads), t.Name,
			strconv.Itoa(t.NTokens), strconv.Itoa(r.Reps), strconv.FormatFloat(t.MeanTokS, 'f', 3, 64),
			strconv.FormatFloat(t.StddevTokS, 'f', 3, 64), strings.Join(samples, ";")})
	}
	cw.Flush()
	return cw.Error()
}

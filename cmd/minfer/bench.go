package main

import (
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
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
)

// benchResult is the --output json document of minfer bench; the gate
// runner parses it. Schema (every sample is kept):
//
//	{
//	  "model": "path", "model_sha256": "hex", "backend": "cpu|cuda", "kv_format": "f32|f16|q8_0|auto",
//	  "threads": 2, "n_prompt": 512, "n_gen": 128, "reps": 5,
//	  "warmup": {"budget_ms": 2000, "iterations": 3, "elapsed_ms": 2345.6},
//	  "tests": [
//	    {"name": "pp512", "n_tokens": 512, "samples_ms": [..reps..], "tok_s": [..reps..],
//	     "mean_tok_s": 1.0, "stddev_tok_s": 0.1},
//	    {"name": "tg128", "n_tokens": 128, ...}
//	  ],
//	  "levers": {"MINFER_...": "value"}, "go_version": "go1.26", "date": "RFC 3339, UTC"
//	}
//
// pp<P> times a prefill of P tokens from an empty KV cache; tg<N> times N
// single-token decode steps after a one-token prefill (the prefill is not
// timed). A test whose size is 0 is left out. stddev is the sample standard
// deviation (n-1), 0 for a single sample.
type benchResult struct {
	Model       string            `json:"model"`
	ModelSHA256 string            `json:"model_sha256"`
	Backend     string            `json:"backend"`
	KVFormat    string            `json:"kv_format"`
	Threads     int               `json:"threads"`
	NPrompt     int               `json:"n_prompt"`
	NGen        int               `json:"n_gen"`
	Reps        int               `json:"reps"`
	Warmup      benchWarmup       `json:"warmup"`
	Tests       []benchTest       `json:"tests"`
	Levers      map[string]string `json:"levers"`
	GoVersion   string            `json:"go_version"`
	Date        string            `json:"date"`
}

type benchWarmup struct {
	BudgetMS   int     `json:"budget_ms"`
	Iterations int     `json:"iterations"`
	ElapsedMS  float64 `json:"elapsed_ms"`
}

type benchTest struct {
	Name       string    `json:"name"`
	NTokens    int       `json:"n_tokens"`
	SamplesMS  []float64 `json:"samples_ms"`
	TokS       []float64 `json:"tok_s"`
	MeanTokS   float64   `json:"mean_tok_s"`
	StddevTokS float64   `json:"stddev_tok_s"`
}

// minWarmupIterations is the warmup floor whatever the time budget.
const minWarmupIterations = 3

type benchFlags struct {
	modelFlags
	p, n, reps int
	output     string
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
	fl.StringVarP(&f.output, "output", "o", "md", "output format: md, json or csv")
	return cmd
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

// fileSHA256 hashes the file at path.
func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("sha256: %w", err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("sha256: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
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
	switch f.output {
	case "md", "json", "csv":
	default:
		return usagef("-o %q: want md, json or csv", f.output)
	}
	if f.p < 0 || f.n < 0 || (f.p == 0 && f.n == 0) {
		return usagef("-p %d -n %d: want non-negative sizes, not both 0", f.p, f.n)
	}
	if f.reps < 1 {
		return usagef("-r %d: want at least one repetition", f.reps)
	}
	if f.ctx == 0 {
		f.ctx = max(f.p, 1+f.n, 16)
	}
	if err := f.check(); err != nil {
		return err
	}
	if f.p > f.ctx || 1+f.n > f.ctx {
		return fmt.Errorf("pp%d / tg%d do not fit the context of %d (--ctx)", f.p, f.n, f.ctx)
	}
	path, err := f.path()
	if err != nil {
		return err
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
	nVocab := e.HParams().NVocab
	pp := benchTokens(f.p, nVocab, 1)
	tg := benchTokens(1+f.n, nVocab, 2)

	runPP := func() (time.Duration, error) {
		e.Reset()
		t := time.Now()
		if _, err := e.Forward(pp, false); err != nil {
			return 0, fmt.Errorf("pp%d: %w", f.p, err)
		}
		return time.Since(t), nil
	}
	runTG := func(steps int) (time.Duration, error) {
		e.Reset()
		if _, err := e.Forward(tg[:1], false); err != nil {
			return 0, fmt.Errorf("tg%d prefill: %w", f.n, err)
		}
		t := time.Now()
		for i := 1; i <= steps; i++ {
			if _, err := e.Forward(tg[i:i+1], false); err != nil {
				return 0, fmt.Errorf("tg%d step %d: %w", f.n, i, err)
			}
		}
		return time.Since(t), nil
	}

	// Untimed warmup: one iteration is the pp shape and one decode step,
	// repeated until the budget is spent and at least 3 have run.
	res := benchResult{
		Model: path, ModelSHA256: sum, Backend: backendName(e, f.device), KVFormat: kvFormat(e, a.cfg.CacheType),
		Threads: threads(e), NPrompt: f.p, NGen: f.n, Reps: f.reps, Levers: a.cfg.Set(),
		GoVersion: runtime.Version(),
	}
	res.Warmup.BudgetMS = a.cfg.BenchWarmupMS
	budget := time.Duration(a.cfg.BenchWarmupMS) * time.Millisecond
	w0 := time.Now()
	for res.Warmup.Iterations < minWarmupIterations || time.Since(w0) < budget {
		if f.p > 0 {
			if _, err := runPP(); err != nil {
				return fmt.Errorf("warmup: %w", err)
			}
		}
		if f.n > 0 {
			if _, err := runTG(1); err != nil {
				return fmt.Errorf("warmup: %w", err)
			}
		}
		res.Warmup.Iterations++
	}
	res.Warmup.ElapsedMS = ms(time.Since(w0))

	measure := func(name string, n int, run func() (time.Duration, error)) error {
		t := benchTest{Name: name, NTokens: n}
		for r := 0; r < f.reps; r++ {
			d, err := run()
			if err != nil {
				return err
			}
			t.SamplesMS = append(t.SamplesMS, ms(d))
			t.TokS = append(t.TokS, rate(n, d))
		}
		t.MeanTokS, t.StddevTokS = meanStddev(t.TokS)
		res.Tests = append(res.Tests, t)
		return nil
	}
	if f.p > 0 {
		if err := measure("pp"+strconv.Itoa(f.p), f.p, runPP); err != nil {
			return err
		}
	}
	if f.n > 0 {
		if err := measure("tg"+strconv.Itoa(f.n), f.n, func() (time.Duration, error) { return runTG(f.n) }); err != nil {
			return err
		}
	}
	res.Date = time.Now().UTC().Format(time.RFC3339)

	out := cmd.OutOrStdout()
	switch f.output {
	case "json":
		return writeJSON(out, res, true)
	case "csv":
		return writeBenchCSV(out, &res)
	}
	return writeBenchMD(out, &res)
}

// threads is the engine's worker count when it says, else GOMAXPROCS.
func threads(e lm) int {
	if t, ok := e.(interface{ Threads() int }); ok {
		return t.Threads()
	}
	return runtime.GOMAXPROCS(0)
}

func writeBenchMD(w io.Writer, r *benchResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| model\t backend\t kv\t threads\t test\t t/s\t")
	fmt.Fprintln(tw, "| ---\t ---\t ---\t ---:\t ---:\t ---:\t")
	for _, t := range r.Tests {
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %d\t %s\t %.2f ± %.2f\t\n", r.Model, r.Backend, r.KVFormat, r.Threads, t.Name, t.MeanTokS, t.StddevTokS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nwarmup: %d iterations in %.0f ms (budget %d ms); %d reps; %s\n",
		r.Warmup.Iterations, r.Warmup.ElapsedMS, r.Warmup.BudgetMS, r.Reps, r.GoVersion)
	return err
}

func writeBenchCSV(w io.Writer, r *benchResult) error {
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

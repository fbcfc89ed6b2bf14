package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
	"github.com/minfer-go/minfer/report"
	"github.com/minfer-go/minfer/schema"
)

// PerfOptions are the flags of `abtest perf`.
// PerfOptions are the settings of `abtest perf`.
type PerfOptions struct {
	Rows, Device, Out, Minfer, SynthDir string
	PP, TG, Reps, BenchWarm             int
	Seed                                uint64
	Timeout                             time.Duration
}

// runPerf measures every row and writes the report; the error is a
// could-not-run (exit 2) only: failed rows are in the record.
// Perf measures every row and writes the report.
func Perf(ctx context.Context, f *PerfOptions, cmdline string, progress io.Writer) (*harness.PerfRecord, string, error) {
	rows, err := harness.ParsePerfRows(f.Rows)
	if err != nil {
		return nil, "", CannotRun("%v", err)
	}
	if f.PP < 1 || f.TG < 1 || f.Reps < 1 {
		return nil, "", CannotRun("--pp, --tg and --reps must be positive")
	}
	if f.BenchWarm < 1 {
		return nil, "", CannotRun("--bench-warmup-ms %d: want a positive budget in ms", f.BenchWarm)
	}
	if f.Timeout < 0 {
		return nil, "", CannotRun("--row-timeout %v: want a positive duration (0: no limit)", f.Timeout)
	}
	switch f.Device {
	case "auto", "cpu", "cuda":
	default:
		return nil, "", CannotRun("--device %q: want cuda, cpu or auto", f.Device)
	}
	bin, err := findMinfer(f.Minfer)
	if err != nil {
		return nil, "", err
	}
	probe := harness.DefaultProbe()
	hasGPU, why := probe.HasGPU(ctx)
	if f.Device == "cuda" && !hasGPU {
		return nil, "", CannotRun("--device cuda: %s", why)
	}
	r := &harness.Runner{Bin: bin, Timeout: f.Timeout, GPUMem: gpumem.NewMonitor(),
		Pinned: map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(f.BenchWarm)}}
	m := harness.Minfer{R: r, Device: f.Device}

	rec := &harness.PerfRecord{Started: time.Now(), Command: cmdline, Device: f.Device, PP: f.PP, TG: f.TG, Reps: f.Reps,
		BenchWarmupMS: f.BenchWarm, Reference: harness.PerfReference, HBMCopyGBs: harness.HBMCopyGBs}
	rec.Env = probe.Capture(ctx, bin, "")
	rec.Env.Model = "one per row (see the rows)"
	rec.Env.Pinned = map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(f.BenchWarm)}
	if ls, err := m.Levers(ctx); err == nil {
		rec.Env.Levers = map[string]string{}
		for _, l := range ls {
			v := l.Default
			if v == "" {
				v = harness.Unset
			}
			rec.Env.Levers[l.Name] = v
		}
	}
	sameShape := f.PP == harness.PerfRefPP && f.TG == harness.PerfRefTG
	var notes []string
	if !sameShape {
		notes = append(notes, fmt.Sprintf("--pp %d --tg %d is not the reference's pp%d/tg%d: no ratio, no target judged", f.PP, f.TG, harness.PerfRefPP, harness.PerfRefTG))
	}
	if f.Device != "cuda" {
		notes = append(notes, fmt.Sprintf("--device %s: the reference ran on the H200 (CUDA), so the ratios are not like-for-like", f.Device))
	}
	rec.Comparable = strings.Join(notes, "; ")

	// Depth-0 rows run first, so a long-context row compares with its base
	// row's tg from this invocation; the report keeps the order asked for.
	rec.Rows = make([]harness.PerfResult, len(rows))
	tg0 := map[string]*harness.PerfMetric{} // by lower-case "shape:type"
	for i, idx := range perfOrder(rows) {
		row := rows[idx]
		fmt.Fprintf(progress, "perf: row %d/%d %s\n", i+1, len(rows), row.Name())
		res := perfRow(ctx, f, r, probe, hasGPU && f.Device != "cpu", row, sameShape, tg0[strings.ToLower(row.BaseName())])
		switch {
		case res.Failed:
			fmt.Fprintf(progress, "perf: %s FAILED at %s: %s\n", row.Name(), res.Stage, res.Error)
		case res.Long != nil:
			fmt.Fprintf(progress, "perf: %s tg %.2f tok/s at depth %d, %.2f at depth 0: ratio %.3f\n", row.Name(), float64(res.TG.TokS), res.Long.Depth, float64(res.Long.TG0.TokS), float64(res.Long.Ratio))
		default:
			fmt.Fprintf(progress, "perf: %s pp %.1f tok/s, tg %.2f tok/s, decode %s GB/s (%s of the HBM floor)\n", row.Name(), float64(res.PP.TokS), float64(res.TG.TokS), report.GBs(float64(res.Decode.GBs)), report.Pct(float64(res.Decode.HBMShare)))
			tg0[strings.ToLower(row.Name())] = res.TG
			if l := res.Launches; l != nil && l.Error != "" {
				fmt.Fprintf(progress, "perf: %s launch census FAILED (speed numbers stand): %s\n", row.Name(), l.Error)
			} else if l != nil {
				fmt.Fprintf(progress, "perf: %s %.1f kernels and %.2f graph replays per token, %s µs per launch\n", row.Name(), float64(l.LaunchesPerToken), float64(l.GraphReplaysPerToken), report.Fnum(float64(l.USPerLaunch), "%.2f"))
			}
		}
		rec.Rows[idx] = res
	}
	rec.Decide()
	base := filepath.Join(f.Out, rec.Started.UTC().Format("2006-01-02T150405")+"-"+rec.Env.ShortCommit())
	if err := os.MkdirAll(f.Out, 0o755); err != nil {
		return rec, base, CannotRun("--out: %v", err)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return rec, base, CannotRun("perf json: %v", err)
	}
	if err := os.WriteFile(base+".json", b, 0o644); err != nil {
		return rec, base, CannotRun("%v", err)
	}
	if err := os.WriteFile(base+".md", []byte(report.PerfMarkdown(rec)), 0o644); err != nil {
		return rec, base, CannotRun("%v", err)
	}
	return rec, base, nil
}

// perfOrder is the order rows run in: every depth-0 row, then the
// long-context rows, each group in the order given.
func perfOrder(rows []harness.PerfRow) []int {
	var out, long []int
	for i, r := range rows {
		if r.Depth > 0 {
			long = append(long, i)
		} else {
			out = append(out, i)
		}
	}
	return append(out, long...)
}

// perfRow synthesizes (or reuses) one row's model and benches it. tg0 is
// the tg at depth 0 of the row's model measured earlier in this invocation
// (nil: none), what a long-context row is compared with.
func perfRow(ctx context.Context, f *PerfOptions, r *harness.Runner, probe harness.Probe, readClocks bool, row harness.PerfRow, sameShape bool, tg0 *harness.PerfMetric) harness.PerfResult {
	res := harness.PerfResult{Row: row, Synth: "not run"}
	nan := harness.Num(math.NaN())
	res.Decode = harness.Decode{GBs: nan, HBMShare: nan, FloorTokS: nan}
	res.RefDecode = res.Decode
	fail := func(stage string, err error) harness.PerfResult {
		res.Failed, res.Stage, res.Error = true, stage, err.Error()
		var ae *harness.ArmError
		if errors.As(err, &ae) {
			res.StderrTail = strings.TrimSpace(ae.Exec.Stderr)
			if ae.Exec.TimedOut {
				res.Stage = stage + " (timed out)"
			} else if ae.Exec.Exit == schema.ExitOutOfMemory {
				res.OutOfMemory, res.Stage = true, stage+" (out of memory)"
			}
		}
		if ctx.Err() != nil && stage != "interrupted" {
			res.Stage = stage + " (interrupted: " + ctx.Err().Error() + ")"
		}
		return res
	}
	if ctx.Err() != nil {
		return fail("interrupted", fmt.Errorf("not run: %v", ctx.Err()))
	}
	res.SynthCommand = fmt.Sprintf("%s synth --shape %s --type %s --seed %d -o PATH", harness.ShellQuote(r.Bin), harness.ShellQuote(row.Shape), harness.ShellQuote(row.Type), f.Seed)
	t0 := time.Now()
	path, cached, err := synthModel(ctx, r, f.SynthDir, row.Shape, row.Type, f.Seed)
	if err != nil {
		// synthModel folds the ArmError (with its stderr tail) into its message.
		res.StderrTail = stderrTailOf(err.Error())
		return fail("synth", err)
	}
	res.Model = path
	if cached {
		res.Synth = "cached"
	} else {
		res.Synth = fmt.Sprintf("written in %.1f s", time.Since(t0).Seconds())
	}
	res.SynthCommand = strings.Replace(res.SynthCommand, "-o PATH", "-o "+harness.ShellQuote(path), 1)
	if info, _, err := (harness.Minfer{R: r, Model: path}).Info(ctx); err != nil {
		res.Weights = harness.WeightBytes{Method: "unknown: " + err.Error()}
	} else if w, err := harness.WeightBytesFromInfo(info); err != nil {
		res.Weights = harness.WeightBytes{FileSize: w.FileSize, Method: "unknown: " + err.Error()}
	} else {
		res.Weights = w
	}
	if readClocks {
		if c, err := probe.ReadClocks(ctx); err != nil {
			res.ClocksNote = "nvidia-smi did not answer: " + err.Error()
		} else {
			res.Clocks = c
		}
	} else {
		res.ClocksNote = "no GPU clocks (no device, or --device cpu)"
	}
	if row.Depth > 0 {
		return perfLongRow(ctx, f, r, row, &res, path, tg0, fail)
	}
	args := []string{"bench", "--model", path, "--device", f.Device, "-p", strconv.Itoa(f.PP), "-n", strconv.Itoa(f.TG),
		"-r", strconv.Itoa(f.Reps), "--format", "json"}
	e, err := r.Run(ctx, "bench "+row.Name(), nil, args...)
	if e != nil {
		res.BenchCommand = e.Command(r.Bin)
		res.BenchWall = e.Wall.Seconds()
		res.DeviceMemory = e.DeviceMemory
	}
	if err != nil {
		return fail("bench", err)
	}
	b, err := harness.ParseBench(e.Stdout)
	if err != nil {
		res.StderrTail = strings.TrimSpace(e.Stderr)
		return fail("parse", err)
	}
	pp, okP := b.Test("pp")
	tg, okT := b.Test("tg")
	if !okP || !okT {
		res.StderrTail = strings.TrimSpace(e.Stderr)
		return fail("parse", fmt.Errorf("bench json has tests %v, want a pp and a tg test", testNames(b)))
	}
	res.ModelSHA256, res.Backend, res.KVFormat, res.Warmup = b.ModelSHA256, b.Backend, b.KVFormat, b.Warmup
	refPP, refTG, tgtPP, tgtTG := row.RefPP, row.RefTG, row.TargetPP, row.TargetTG
	if !sameShape {
		refPP, refTG, tgtPP, tgtTG = 0, 0, 0, 0
	}
	pm, tm := harness.NewPerfMetric(pp, refPP, tgtPP), harness.NewPerfMetric(tg, refTG, tgtTG)
	res.PP, res.TG = &pm, &tm
	res.Decode = harness.DecodeBandwidth(res.Weights.PerToken, tg.Value())
	if refTG > 0 {
		res.RefDecode = harness.DecodeBandwidth(res.Weights.PerToken, refTG)
	}
	l := perfCensus(ctx, f, r, row, path, tg.Value())
	res.Launches = &l
	return res
}

// perfCensus runs the row's one extra census process (a short decode with
// MINFER_LAUNCH_CENSUS=1) after its timed bench and derives the time per
// token and per launch from timedTG, the timed bench's median tg tok/s: the
// census run is perturbed by the census and gives counts only. A failure
// is stated in the result (Error, NaN counts), never the row's failure.
func perfCensus(ctx context.Context, f *PerfOptions, r *harness.Runner, row harness.PerfRow, path string, timedTG float64) harness.DecodeLaunches {
	e, err := r.Run(ctx, "census "+row.Name(), harness.CensusBenchEnv, harness.CensusBenchArgs(path, f.Device)...)
	if err == nil {
		l, perr := harness.NewDecodeLaunches(e.Stdout, timedTG)
		if perr == nil {
			l.Command = e.Command(r.Bin)
			return l
		}
		err = perr
	}
	l, _ := harness.NewDecodeLaunches(nil, timedTG) // the time per token stands; the counts are NaN
	l.Error = err.Error()
	if e != nil {
		l.Command = e.Command(r.Bin)
		l.StderrTail = strings.TrimSpace(e.Stderr)
	}
	return l
}

// perfLongRow benches a long-context row: `minfer bench -p 0 -n TG -d DEPTH`
// on the row's model, judged against tg0 (the same invocation's depth-0 tg
// of that model) or, when none was measured, against a depth-0 bench it
// runs itself right after: never a number from another run. res is
// perfRow's result so far, the one fail records a failure on.
func perfLongRow(ctx context.Context, f *PerfOptions, r *harness.Runner, row harness.PerfRow, res *harness.PerfResult, path string,
	tg0 *harness.PerfMetric, fail func(string, error) harness.PerfResult) harness.PerfResult {
	bench := func(label string, depth int) (harness.BenchTest, harness.BenchResult, *harness.Exec, string, error) {
		args := []string{"bench", "--model", path, "--device", f.Device, "-p", "0", "-n", strconv.Itoa(f.TG)}
		if depth > 0 {
			args = append(args, "-d", strconv.Itoa(depth))
		}
		args = append(args, "-r", strconv.Itoa(f.Reps), "--format", "json")
		e, err := r.Run(ctx, label, nil, args...)
		if err != nil {
			return harness.BenchTest{}, harness.BenchResult{}, e, "bench", err
		}
		b, err := harness.ParseBench(e.Stdout)
		if err != nil {
			return harness.BenchTest{}, b, e, "parse", err
		}
		// The name proves minfer ran at that depth (one that ignored -d
		// would answer a plain tgN).
		want := fmt.Sprintf("tg%d", f.TG)
		if depth > 0 {
			want += fmt.Sprintf("@d%d", depth)
		}
		t, ok := b.Test("tg")
		if !ok || t.Name != want {
			return t, b, e, "parse", fmt.Errorf("bench json has tests %v, want %s", testNames(b), want)
		}
		return t, b, e, "", nil
	}
	td, b, e, stage, err := bench("bench "+row.Name(), row.Depth)
	if e != nil {
		res.BenchCommand = e.Command(r.Bin)
		res.BenchWall = e.Wall.Seconds()
		res.DeviceMemory = e.DeviceMemory
		if stage == "parse" {
			res.StderrTail = strings.TrimSpace(e.Stderr)
		}
	}
	if err != nil {
		return fail(stage, err)
	}
	res.ModelSHA256, res.Backend, res.KVFormat, res.Warmup = b.ModelSHA256, b.Backend, b.KVFormat, b.Warmup
	from, cmd0 := "row "+row.BaseName()+" of this run", ""
	if tg0 == nil {
		t0, _, e0, stage, err := bench("bench "+row.BaseName()+" at depth 0 for "+row.Name(), 0)
		if e0 != nil {
			cmd0 = e0.Command(r.Bin)
			if stage == "parse" {
				res.StderrTail = strings.TrimSpace(e0.Stderr)
			}
		}
		if err != nil {
			return fail(stage+" at depth 0", err)
		}
		m0 := harness.NewPerfMetric(t0, 0, 0)
		tg0 = &m0
		from = "this row's own depth-0 bench (" + row.BaseName() + " was not run in this invocation)"
	}
	minRatio := row.TargetTGRatio
	if f.TG != harness.PerfRefTG {
		minRatio = 0 // the bar is tg128's
	}
	tm, lc := harness.NewLongContext(row.Depth, td, *tg0, from, minRatio)
	lc.TG0Command = cmd0
	res.TG, res.Long = &tm, &lc
	res.Decode = harness.DecodeBandwidth(res.Weights.PerToken, td.Value())
	return *res
}

// stderrTailOf extracts the "stderr tail: ..." part of an ArmError message.
func stderrTailOf(msg string) string {
	if _, t, ok := strings.Cut(msg, "stderr tail: "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

func testNames(b harness.BenchResult) []string {
	var out []string
	for _, t := range b.Tests {
		out = append(out, t.Name)
	}
	return out
}

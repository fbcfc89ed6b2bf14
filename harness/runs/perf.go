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

// PerfOptions are the settings of `abtest perf`.
type PerfOptions struct {
	Rows, Device, Out, Minfer, SynthDir string
	PP, TG, Reps, BenchWarm             int
	Seed                                uint64
	Timeout                             time.Duration
	// Peer is "llama-bench=PATH" (empty: no peer; the ratios use the
	// stored reference constants). PeerRounds is the number of rounds per
	// row with a peer: one minfer bench and one peer process each, the
	// order alternating (odd rounds minfer first), after one untimed
	// warm-up process of each engine.
	Peer       string
	PeerRounds int
	// BaseMinfer is another minfer binary (--base-minfer: e.g. a build of
	// an older commit) measured beside ours on every row with the same
	// arguments and environment, PeerRounds rounds per row; ours must be
	// no slower than it (harness.BaseNotSlower).
	BaseMinfer string
	// With are MINFER_X=V settings every minfer process runs with (--with):
	// the table of another path than the defaults, stated in the report.
	With []string
}

// peerRun is the peer engine of a perf run: its runner (the same device
// memory monitor as minfer's) and how many rounds a row gets.
type peerRun struct {
	name   string
	r      *harness.Runner
	rounds int
}

// baseRun is the base build of a perf run (--base-minfer): its runner has
// our runner's environment (the same pinned map: --with and
// MINFER_BENCH_WARMUP_MS) and device memory monitor.
type baseRun struct {
	r      *harness.Runner
	rounds int
	oldCLI bool // the base's bench has no --format: -o json in its place
}

// args is the base's bench command line for ours: the same, except that a
// base from before bench --format (715715f's CLI: -o json was the JSON
// switch) gets -o json in place of --format json.
func (b *baseRun) args(ours []string) []string {
	out := append([]string(nil), ours...)
	if !b.oldCLI {
		return out
	}
	for i := range out {
		if out[i] == "--format" {
			out[i] = "-o"
		}
	}
	return out
}

// parseBase checks --base-minfer PATH: an executable file, before anything
// runs; it returns the absolute path and its sha256.
func parseBase(path string) (string, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", "", CannotRun("--base-minfer: %v", err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", "", CannotRun("--base-minfer: %s is not an executable file", path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	sum, err := harness.FileSHA256(path)
	if err != nil {
		return "", "", CannotRun("--base-minfer: %v", err)
	}
	return path, sum, nil
}

// parsePeer reads --peer NAME=PATH: llama-bench is the one peer known.
func parsePeer(spec string) (name, path, sum string, err error) {
	name, path, ok := strings.Cut(spec, "=")
	if !ok || name != harness.PeerLlamaBench || path == "" {
		return "", "", "", CannotRun("--peer %q: want llama-bench=PATH (the llama.cpp benchmark binary)", spec)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", "", "", CannotRun("--peer: %v", err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", "", "", CannotRun("--peer: %s is not an executable file", path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	sum, err = harness.FileSHA256(path)
	if err != nil {
		return "", "", "", CannotRun("--peer: %v", err)
	}
	return name, path, sum, nil
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
	if err := noInheritedLevers(os.Environ()); err != nil {
		return nil, "", err
	}
	if f.Timeout < 0 {
		return nil, "", CannotRun("--row-timeout %v: want a positive duration (0: no limit)", f.Timeout)
	}
	switch f.Device {
	case "auto", "cpu", "cuda":
	default:
		return nil, "", CannotRun("--device %q: want cuda, cpu or auto", f.Device)
	}
	var peer *harness.PerfPeer
	if f.Peer != "" {
		if f.PeerRounds < 1 {
			return nil, "", CannotRun("--peer-rounds %d: want at least one round", f.PeerRounds)
		}
		name, path, sum, err := parsePeer(f.Peer)
		if err != nil {
			return nil, "", err
		}
		peer = &harness.PerfPeer{Name: name, Path: path, SHA256: sum, Rounds: f.PeerRounds}
	}
	var baseBuild *harness.PerfBase
	if f.BaseMinfer != "" {
		if f.PeerRounds < 1 {
			return nil, "", CannotRun("--peer-rounds %d: want at least one round", f.PeerRounds)
		}
		path, sum, err := parseBase(f.BaseMinfer)
		if err != nil {
			return nil, "", err
		}
		baseBuild = harness.NewPerfBase(path, sum, f.PeerRounds)
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
	var pr *peerRun
	if peer != nil {
		pr = &peerRun{name: peer.Name, rounds: peer.Rounds, r: &harness.Runner{Bin: peer.Path, Timeout: f.Timeout, GPUMem: r.GPUMem}}
	}
	var br *baseRun
	if baseBuild != nil {
		// r.Pinned is shared: the --with settings added below reach the
		// base's processes too.
		br = &baseRun{rounds: baseBuild.Rounds, r: &harness.Runner{Bin: baseBuild.Path, Timeout: f.Timeout, GPUMem: r.GPUMem, Pinned: r.Pinned}}
		has, err := benchTakesFormat(ctx, baseBuild.Path)
		if err != nil {
			return nil, "", CannotRun("--base-minfer %s: %v", baseBuild.Path, err)
		}
		if !has {
			br.oldCLI = true
			baseBuild.ArgsNote = "its bench has no --format (an older CLI): it runs with -o json in place of --format json, every other argument ours"
		}
	}

	rec := &harness.PerfRecord{Started: time.Now(), Command: cmdline, Device: f.Device, PP: f.PP, TG: f.TG, Reps: f.Reps,
		BenchWarmupMS: f.BenchWarm, Reference: harness.PerfReference, HBMCopyGBs: harness.HBMCopyGBs, Peer: peer, Base: baseBuild}
	rec.Env = probe.Capture(ctx, bin, "")
	rec.Env.Model = "one per row (see the rows)"
	rec.Env.Pinned = map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(f.BenchWarm)}
	ls, lerr := m.Levers(ctx)
	if lerr == nil {
		rec.Env.Levers = map[string]string{}
		for _, l := range ls {
			v := l.Default
			if v == "" {
				v = harness.Unset
			}
			rec.Env.Levers[l.Name] = v
		}
	}
	if len(f.With) > 0 && lerr != nil {
		return nil, "", CannotRun("--with: the registry of %s could not be read to check it: %v", bin, lerr)
	}
	with, err := perfWith(f.With, ls)
	if err != nil {
		return nil, "", err
	}
	for name, v := range with {
		r.Pinned[name], rec.Env.Pinned[name], rec.Env.Levers[name] = v, v, v
	}
	rec.With = with
	sameShape := f.PP == harness.PerfRefPP && f.TG == harness.PerfRefTG
	var notes []string
	if !sameShape && peer == nil {
		notes = append(notes, fmt.Sprintf("--pp %d --tg %d is not the reference's pp%d/tg%d: no ratio, no target judged", f.PP, f.TG, harness.PerfRefPP, harness.PerfRefTG))
	} else if !sameShape {
		notes = append(notes, fmt.Sprintf("--pp %d --tg %d is not issue 6's pp%d/tg%d: no target judged (the ratios are against the peer at the same sizes)", f.PP, f.TG, harness.PerfRefPP, harness.PerfRefTG))
	}
	if f.Device != "cuda" && peer != nil {
		notes = append(notes, fmt.Sprintf("--device %s: the peer runs with -ngl 99 (its GPU build offloads every layer), so the ratios are not like-for-like", f.Device))
	} else if f.Device != "cuda" {
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
		res := perfRow(ctx, f, r, pr, br, probe, hasGPU && f.Device != "cpu", row, sameShape, tg0[strings.ToLower(row.BaseName())])
		switch {
		case res.Failed:
			fmt.Fprintf(progress, "perf: %s FAILED at %s: %s\n", row.Name(), res.Stage, res.Error)
		case res.Long != nil:
			fmt.Fprintf(progress, "perf: %s pp %.1f tok/s, tg %.2f tok/s at depth %d, tg %.2f at depth 0: ratio %.3f\n", row.Name(), float64(res.PP.TokS), float64(res.TG.TokS), res.Long.Depth, float64(res.Long.TG0.TokS), float64(res.Long.Ratio))
		default:
			fmt.Fprintf(progress, "perf: %s pp %.1f tok/s, tg %.2f tok/s, decode %s GB/s (%s of the HBM floor)\n", row.Name(), float64(res.PP.TokS), float64(res.TG.TokS), report.GBs(float64(res.Decode.GBs)), report.Pct(float64(res.Decode.HBMShare)))
			tg0[strings.ToLower(row.Name())] = res.TG
			if l := res.Launches; l != nil && l.Error != "" {
				fmt.Fprintf(progress, "perf: %s launch census FAILED (speed numbers stand): %s\n", row.Name(), l.Error)
			} else if l != nil {
				fmt.Fprintf(progress, "perf: %s %.1f kernels and %.2f graph replays per token, %s µs per launch\n", row.Name(), float64(l.LaunchesPerToken), float64(l.GraphReplaysPerToken), report.Fnum(float64(l.USPerLaunch), "%.2f"))
			}
		}
		if p := res.Peer; p != nil && !res.Failed {
			fmt.Fprintf(progress, "perf: %s peer %s pp %.1f tok/s, tg %.2f tok/s: ratios %.3f, %.3f\n", row.Name(), pr.name, float64(p.PP.TokS), float64(p.TG.TokS), float64(res.PP.Ratio), float64(res.TG.Ratio))
		}
		if b := res.Base; b != nil && b.PP != nil && !res.Failed {
			var order []string
			for _, rd := range b.Rounds {
				order = append(order, fmt.Sprintf("%d: %s", rd.Round, strings.Join(rd.Order, ", ")))
			}
			verdict := "no slower"
			if b.Slower() {
				verdict = "SLOWER than the base"
			}
			fmt.Fprintf(progress, "perf: %s base pp %.1f tok/s, tg %.2f tok/s: ours/base %.3f, %.3f: %s (rounds %s)\n", row.Name(),
				float64(b.PP.TokS), float64(b.TG.TokS), float64(b.VsPP.Ratio), float64(b.VsTG.Ratio), verdict, strings.Join(order, "; "))
		}
		rec.Rows[idx] = res
	}
	rec.Slopes = harness.NewPerfSlopes(rec.Rows, f.PP)
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
func perfRow(ctx context.Context, f *PerfOptions, r *harness.Runner, pr *peerRun, br *baseRun, probe harness.Probe, readClocks bool, row harness.PerfRow, sameShape bool, tg0 *harness.PerfMetric) harness.PerfResult {
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
		return perfLongRow(ctx, f, r, pr, br, row, &res, path, tg0, fail)
	}
	args := []string{"bench", "--model", path, "--device", f.Device, "-p", strconv.Itoa(f.PP), "-n", strconv.Itoa(f.TG),
		"-r", strconv.Itoa(f.Reps), "--format", "json"}
	pp, tg, stage, err := perfMeasure(ctx, f, r, pr, br, row, path, args, &res)
	if err != nil {
		return fail(stage, err)
	}
	refPP, refTG, tgtPP, tgtTG := row.RefPP, row.RefTG, row.TargetPP, row.TargetTG
	if !sameShape {
		refPP, refTG, tgtPP, tgtTG = 0, 0, 0, 0
	}
	from := harness.StoredReference
	if res.Peer != nil {
		refPP, refTG = float64(res.Peer.PP.TokS), float64(res.Peer.TG.TokS)
		from = pr.name + ", measured in this run"
	}
	pm, tm := harness.NewPerfMetric(pp, refPP, tgtPP), harness.NewPerfMetric(tg, refTG, tgtTG)
	if refPP > 0 {
		pm.RefFrom, tm.RefFrom = from, from
	}
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
func perfLongRow(ctx context.Context, f *PerfOptions, r *harness.Runner, pr *peerRun, br *baseRun, row harness.PerfRow, res *harness.PerfResult, path string,
	tg0 *harness.PerfMetric, fail func(string, error) harness.PerfResult) harness.PerfResult {
	// pp and tg at depth in one process, as llama-bench -p PP -n TG -d D
	// runs them; the context holds the fill and both tests, as llama-bench's
	// n_ctx = n_prompt + n_gen + n_depth.
	args := []string{"bench", "--model", path, "--device", f.Device, "-p", strconv.Itoa(f.PP), "-n", strconv.Itoa(f.TG),
		"-d", strconv.Itoa(row.Depth), "-r", strconv.Itoa(f.Reps), "--format", "json", "--ctx", strconv.Itoa(row.Depth + f.PP + f.TG)}
	pd, td, stage, err := perfMeasure(ctx, f, r, pr, br, row, path, args, res)
	if err != nil {
		return fail(stage, err)
	}
	from, cmd0 := "row "+row.BaseName()+" of this run", ""
	if tg0 == nil {
		// The depth-0 tg of this model, measured by this row: never a
		// number from another run.
		args0 := []string{"bench", "--model", path, "--device", f.Device, "-p", "0", "-n", strconv.Itoa(f.TG), "-r", strconv.Itoa(f.Reps), "--format", "json"}
		e0, err := r.Run(ctx, "bench "+row.BaseName()+" at depth 0 for "+row.Name(), nil, args0...)
		if e0 != nil {
			cmd0 = e0.Command(r.Bin)
		}
		if err != nil {
			return fail("bench at depth 0", err)
		}
		b0, err := harness.ParseBench(e0.Stdout)
		t0, ok := b0.Test("tg")
		if err == nil && (!ok || t0.Name != fmt.Sprintf("tg%d", f.TG)) {
			err = fmt.Errorf("bench json has tests %v, want tg%d", testNames(b0), f.TG)
		}
		if err != nil {
			res.StderrTail = strings.TrimSpace(e0.Stderr)
			return fail("parse at depth 0", err)
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
	// Absolute targets at depth (issue 20's rows), only at the shapes
	// they were set for.
	tgtPP, tgtTG := row.TargetPP, row.TargetTG
	if f.PP != harness.PerfRefPP {
		tgtPP = 0
	}
	if f.TG != harness.PerfRefTG {
		tgtTG = 0
	}
	if tgtTG > 0 && minRatio == 0 {
		tm = harness.NewPerfMetric(td, 0, tgtTG)
	}
	pm := harness.NewPerfMetric(pd, 0, tgtPP)
	if res.Peer != nil {
		// The peer ran the same depth: its numbers are the ratios' (no
		// stored constant exists at depth).
		from := pr.name + ", measured in this run"
		pm = harness.NewPerfMetric(pd, float64(res.Peer.PP.TokS), tgtPP)
		tm.Ref, tm.Ratio = res.Peer.TG.TokS, harness.Num(td.Value()/float64(res.Peer.TG.TokS))
		pm.RefFrom, tm.RefFrom = from, from
		res.RefDecode = harness.DecodeBandwidth(res.Weights.PerToken, float64(res.Peer.TG.TokS))
	}
	res.PP, res.TG, res.Long = &pm, &tm, &lc
	res.Decode = harness.DecodeBandwidth(res.Weights.PerToken, td.Value())
	return *res
}

// perfMeasure runs a row's timed processes on the model at path: without a
// peer or a base one `minfer bench` process (args); with one or both, an
// untimed warm-up process of each engine (-r 1; ours, the base, the peer),
// then rounds of one timed process of each engine, the order rotating
// (harness.RoundOrder of minfer, base, peer: with two engines odd rounds
// minfer first, even rounds the other first). The base runs `bench` with
// our args through br.r, whose environment is ours. Each engine's pp and
// tg pool the repetitions of all its rounds (the cell is their median). It
// fills res's commands, wall, memory (the peak over the timed processes,
// each engine's own), Peer and Base; on an error the stage says whose and
// the stderr tail is in res.
func perfMeasure(ctx context.Context, f *PerfOptions, r *harness.Runner, pr *peerRun, br *baseRun, row harness.PerfRow, path string, args []string,
	res *harness.PerfResult) (pp, tg harness.BenchTest, stage string, err error) {
	suffix := ""
	if row.Depth > 0 {
		suffix = fmt.Sprintf("@d%d", row.Depth)
	}
	wantPP, wantTG := fmt.Sprintf("pp%d%s", f.PP, suffix), fmt.Sprintf("tg%d%s", f.TG, suffix)
	// bench runs one `minfer bench` of runner x (ours or the base's); the
	// stage of a failure is prefixed with who ("base bench").
	bench := func(x *harness.Runner, who, label string, args []string) (harness.BenchTest, harness.BenchTest, *harness.Exec, string, error) {
		e, err := x.Run(ctx, label, nil, args...)
		if err != nil {
			return pp, tg, e, who + "bench", err
		}
		b, err := harness.ParseBench(e.Stdout)
		if err != nil {
			res.StderrTail = strings.TrimSpace(e.Stderr)
			return pp, tg, e, who + "parse", err
		}
		// The names prove minfer ran at the depth asked (one that ignored
		// -d would answer a plain tgN).
		t, okT := b.Test("tg")
		p, okP := b.Test("pp")
		switch {
		case !okT || t.Name != wantTG:
			err = fmt.Errorf("%sbench json has tests %v, want %s", who, testNames(b), wantTG)
		case !okP || p.Name != wantPP:
			err = fmt.Errorf("%sbench json has tests %v, want %s", who, testNames(b), wantPP)
		}
		if err != nil {
			res.StderrTail = strings.TrimSpace(e.Stderr)
			return p, t, e, who + "parse", err
		}
		if who == "" {
			res.ModelSHA256, res.Backend, res.KVFormat, res.Warmup = b.ModelSHA256, b.Backend, b.KVFormat, b.Warmup
		}
		return p, t, e, "", nil
	}
	ours := func(label string, args []string) (harness.BenchTest, harness.BenchTest, *harness.Exec, string, error) {
		return bench(r, "", label, args)
	}
	timedOurs := func(label string) (harness.BenchTest, harness.BenchTest, string, error) {
		p, t, e, stage, err := ours(label, args)
		if e != nil {
			if res.BenchCommand == "" {
				res.BenchCommand = e.Command(r.Bin)
			}
			res.BenchWall += e.Wall.Seconds()
			res.DeviceMemory = harness.PeakOf(res.DeviceMemory, e.DeviceMemory)
		}
		return p, t, stage, err
	}
	if pr == nil && br == nil {
		p, t, stage, err := timedOurs("bench " + row.Name())
		return p, t, stage, err
	}
	peerArgs := func(reps int) []string { return harness.PeerArgs(path, f.PP, f.TG, reps, row.Depth) }
	peer := func(label string, reps int) (harness.BenchTest, harness.BenchTest, *harness.Exec, string, error) {
		e, err := pr.r.RunCall(ctx, harness.Call{Label: label, Args: peerArgs(reps)})
		if err != nil {
			what := fmt.Sprintf("exit %d", e.Exit)
			if e.TimedOut {
				what = "timed out after " + e.Wall.Round(time.Millisecond).String()
			} else if e.Exit < 0 {
				what = err.Error()
			}
			res.StderrTail = strings.TrimSpace(e.Stderr)
			return pp, tg, e, pr.name, fmt.Errorf("%s: %s: %s", label, e.Command(pr.r.Bin), what)
		}
		p, t, err := harness.ParseLlamaBench(e.Stdout, f.PP, f.TG, row.Depth)
		if err != nil {
			res.StderrTail = strings.TrimSpace(e.Stderr)
			return p, t, e, pr.name + " parse", err
		}
		return p, t, e, "", nil
	}
	warm := append([]string(nil), args...)
	for i := range warm {
		if warm[i] == "-r" && i+1 < len(warm) {
			warm[i+1] = "1"
		}
	}
	engines := []string{harness.EngineOurs}
	if br != nil {
		engines = append(engines, harness.EngineBase)
		res.Base = &harness.BaseRow{Command: harness.ShellQuote(br.r.Bin) + " " + quoteAll(br.args(args))}
	}
	if pr != nil {
		engines = append(engines, pr.name)
		res.Peer = &harness.PeerRow{Command: harness.ShellQuote(pr.r.Bin) + " " + quoteAll(peerArgs(f.Reps))}
	}
	if _, _, _, stage, err := ours("warm-up bench "+row.Name(), warm); err != nil {
		return pp, tg, stage + " (warm-up)", err
	}
	if br != nil {
		if _, _, _, stage, err := bench(br.r, "base ", "warm-up base bench "+row.Name(), br.args(warm)); err != nil {
			return pp, tg, stage + " (warm-up)", err
		}
	}
	if pr != nil {
		if _, _, _, stage, err := peer("warm-up "+pr.name+" "+row.Name(), 1); err != nil {
			return pp, tg, stage + " (warm-up)", err
		}
	}
	rounds := f.PeerRounds
	if pr != nil {
		rounds = pr.rounds
	} else if br != nil {
		rounds = br.rounds
	}
	var oursPP, oursTG, peerPP, peerTG, basePP, baseTG []harness.BenchTest
	for i := 1; i <= rounds; i++ {
		order := harness.RoundOrder(engines, i)
		if res.Peer != nil {
			res.Peer.Rounds = append(res.Peer.Rounds, harness.PeerRound{Round: i, First: order[0]})
		}
		if res.Base != nil {
			res.Base.Rounds = append(res.Base.Rounds, harness.PerfRound{Round: i, Order: order})
		}
		for _, who := range order {
			if ctx.Err() != nil {
				return pp, tg, "interrupted", fmt.Errorf("round %d: %v", i, ctx.Err())
			}
			switch who {
			case harness.EngineOurs:
				p, t, stage, err := timedOurs(fmt.Sprintf("bench %s round %d", row.Name(), i))
				if err != nil {
					return pp, tg, stage, err
				}
				oursPP, oursTG = append(oursPP, p), append(oursTG, t)
			case harness.EngineBase:
				p, t, e, stage, err := bench(br.r, "base ", fmt.Sprintf("base bench %s round %d", row.Name(), i), br.args(args))
				if e != nil {
					res.Base.DeviceMemory = harness.PeakOf(res.Base.DeviceMemory, e.DeviceMemory)
				}
				if err != nil {
					return pp, tg, stage, err
				}
				basePP, baseTG = append(basePP, p), append(baseTG, t)
			default:
				p, t, e, stage, err := peer(fmt.Sprintf("%s %s round %d", pr.name, row.Name(), i), f.Reps)
				if e != nil {
					res.Peer.DeviceMemory = harness.PeakOf(res.Peer.DeviceMemory, e.DeviceMemory)
				}
				if err != nil {
					return pp, tg, stage, err
				}
				peerPP, peerTG = append(peerPP, p), append(peerTG, t)
			}
		}
	}
	pp, tg = harness.PoolTests(oursPP), harness.PoolTests(oursTG)
	if res.Peer != nil {
		ppm, tgm := harness.NewPerfMetric(harness.PoolTests(peerPP), 0, 0), harness.NewPerfMetric(harness.PoolTests(peerTG), 0, 0)
		res.Peer.PP, res.Peer.TG = &ppm, &tgm
	}
	if res.Base != nil {
		bp, bt := harness.PoolTests(basePP), harness.PoolTests(baseTG)
		ppm, tgm := harness.NewPerfMetric(bp, 0, 0), harness.NewPerfMetric(bt, 0, 0)
		vp, vt := harness.NewBaseVs(pp.Name, pp.Value(), bp.Value()), harness.NewBaseVs(tg.Name, tg.Value(), bt.Value())
		res.Base.PP, res.Base.TG, res.Base.VsPP, res.Base.VsTG = &ppm, &tgm, &vp, &vt
	}
	return pp, tg, "", nil
}

func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = harness.ShellQuote(a)
	}
	return strings.Join(q, " ")
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

// noInheritedLevers refuses a MINFER_* setting in abtest's own environment:
// every minfer process starts from the defaults plus --with, so a variable
// set around `abtest perf` would be dropped without a word (session 17's
// peer run measured the default layout that way).
func noInheritedLevers(environ []string) error {
	for _, kv := range environ {
		if strings.HasPrefix(kv, "MINFER_") {
			return CannotRun("%s is set in abtest's environment, but perf runs every minfer process with the registry defaults and --with only: pass --with %s, or unset it", kv, kv)
		}
	}
	return nil
}

// perfWith checks --with: each MINFER_NAME=VALUE a lever of the binary's
// registry at one of its values, set once. MINFER_BENCH_WARMUP_MS has its
// own flag and the mutation seam is no setting to measure speed under.
func perfWith(ws []string, ls []harness.Lever) (map[string]string, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, w := range ws {
		name, v, ok := strings.Cut(w, "=")
		if !ok || !strings.HasPrefix(name, "MINFER_") {
			return nil, CannotRun("--with %q: want MINFER_NAME=VALUE", w)
		}
		switch name {
		case "MINFER_BENCH_WARMUP_MS":
			return nil, CannotRun("--with %s: use --bench-warmup-ms", w)
		case "MINFER_TEST_MUTATE", "MINFER_TEST_CALL_FAIL":
			return nil, CannotRun("--with %s: a test seam, not a setting to measure", w)
		}
		l, err := harness.FindLever(ls, name)
		if err == nil {
			err = l.Validate(v)
		}
		if err != nil {
			return nil, CannotRun("--with %s: %v", w, err)
		}
		if old, dup := out[name]; dup && old != v {
			return nil, CannotRun("--with %s: %s is already set to %s", w, name, old)
		}
		out[name] = v
	}
	return out, nil
}

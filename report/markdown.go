package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
)

// Paths returns reports/<lever>/<date>-<shortcommit> (no extension) under out.
func Paths(out string, rec *gates.Record) string {
	date := rec.Started.UTC().Format("2006-01-02T150405")
	name := date + "-" + rec.Env.ShortCommit()
	if rec.Mutate != "" {
		name += "-mutate-" + rec.Mutate
	}
	return filepath.Join(out, rec.Lever, name)
}

// WriteJSON writes the record atomically (temp file + rename), so a reader
// or an interrupted run never sees half a file.
func WriteJSON(path string, rec *gates.Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadJSON loads a record.
func ReadJSON(path string) (*gates.Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r gates.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Write renders base.md (and the plots beside it) and base.json.
func Write(base string, rec *gates.Record) error { return WriteFinal(base, rec, nil) }

// WriteFinal is Write with a hook that runs after the plots are drawn and
// before the JSON and the markdown are rendered, so the run's overhead can
// include the plotting.
func WriteFinal(base string, rec *gates.Record, beforeRender func()) error {
	var ab *gates.ABDetail
	for _, g := range rec.Gates {
		if g.AB != nil {
			ab = g.AB
		}
	}
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	plots, perr := Plots(base, ab, rec.Config.BarPP, rec.Config.BarTG)
	if beforeRender != nil {
		beforeRender()
	}
	if err := WriteJSON(base+".json", rec); err != nil {
		return err
	}
	md := Markdown(rec, plots)
	if perr != nil {
		md += fmt.Sprintf("\n(plots incomplete: %v)\n", perr)
	}
	return os.WriteFile(base+".md", []byte(md), 0o644)
}

// Markdown renders a record; plots are file names relative to the report.
func Markdown(rec *gates.Record, plots []string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("**Verdict: %s**\n\n", rec.VerdictLine)
	if len(rec.Config.Deviations) > 0 {
		w("**Deviations from the registry's pre-registered values:** %s.\n\n", strings.Join(rec.Config.Deviations, "; "))
	}
	w("%s\n\n", MemoryLine(rec))
	if line := PowerLine(rec); line != "" {
		w("**Power (gate 3):** %s\n\n", line)
	}
	title := fmt.Sprintf("# abtest: %s = %s (B) vs %s (A)\n\n", rec.Lever, rec.B, rec.A)
	w("%s", title)
	if rec.Mutate != "" {
		w("> **MUTATION RUN (site %s, arm B)**: `MINFER_TEST_MUTATE=%s` was set in arm B only. Caught by: %s.\n\n",
			rec.Mutate, rec.Mutate, orNone(rec.CaughtBy))
	}
	if !rec.Complete {
		w("> **INCOMPLETE**: %s. The numbers below are what finished before the run stopped.\n\n", rec.IncompleteReason)
	}
	if note := rec.Config.Lever.WorkloadMismatch(rec.Config.Model, rec.Config.PP); note != "" {
		w("> **Not the lever's workload**: %s. The run ran what it was told; the lever's path may not run here (`abtest nightly` runs it on its workload).\n\n", note)
	}
	w("%s: %s (path: %s). Tolerance class: %s.\n\n", rec.Lever, rec.Doc, rec.Path, rec.Config.Tol.String())
	if line := PinsLine(rec); line != "" {
		w("%s\n\n", line)
	}

	w("## Gates\n\n")
	var rows [][]string
	for _, g := range rec.Gates {
		ev := g.Evidence
		if ev == "" {
			ev = g.Reason
		} else {
			ev = g.Reason + " — " + ev
		}
		live := g.Liveness
		if live == "" {
			live = "—"
		}
		if g.Control != "" {
			ev += fmt.Sprintf(" (without the mutation: %s)", g.Control)
		}
		rows = append(rows, []string{g.Gate, g.Defends, string(g.Status), live, ev})
	}
	w("%s\n", Table([]string{"gate", "what it defends", "result", "liveness (this gate's arm processes)", "evidence"}, rows))
	w("%s\n\n", OverheadLine(rec.Overhead))

	envSection(&b, rec)
	for _, g := range rec.Gates {
		switch {
		case g.Parity != nil:
			paritySection(&b, g)
		case g.Greedy != nil:
			greedySection(&b, g)
		case g.AB != nil:
			abSection(&b, g, rec, plots)
		case g.Suite != nil:
			suiteSection(&b, g)
		case g.Profile != nil:
			profileSection(&b, g, rec.Config.Lever)
		default:
			w("## Gate %s: %s\n\n%s\n\n", g.Gate, g.Status, g.Reason)
		}
	}
	w("## Reproduce\n\n```sh\n%s\n", rec.CommandLine)
	for _, c := range rec.Reproduce {
		w("%s\n", c)
	}
	w("```\n")
	return b.String()
}

// MemoryLine states each arm's peak device memory and the lever's memory
// bar ("memory: A 10.1 GiB, B 17.8 GiB (+76%) — within the bar: ..."), or
// why it was not measured, then how it was taken.
func MemoryLine(rec *gates.Record) string {
	var m *gates.MemoryCheck
	var marked, rounds int
	for _, g := range rec.Gates {
		if g.AB != nil {
			m, marked, rounds = g.AB.Memory, len(g.AB.Marked), len(g.AB.Rounds)
		}
	}
	s := "**" + m.Line() + "**"
	if d := m.Details(); d != "" {
		s += " " + d
	}
	if marked > 0 {
		s += fmt.Sprintf(" **%d of %d rounds marked: another process used the GPU during them** (gate 3's round table names it).", marked, rounds)
	}
	return s
}

// PowerLine states, per gate-3 metric, its timing basis, sd, rounds, power
// at twice the bar and the smallest slowdown it refuses with probability
// 0.8 ("" without a gate 3).
func PowerLine(rec *gates.Record) string {
	var parts []string
	for _, g := range rec.Gates {
		if g.AB == nil {
			continue
		}
		for _, m := range g.AB.Metrics {
			if m.Power == nil {
				continue
			}
			p := m.Power
			parts = append(parts, fmt.Sprintf("%s on %s time: sd %.4f (%s), %d rounds, power %.2f against a slowdown of x%.3f, smallest slowdown refused with 0.8: %s%s",
				m.Name, m.Basis, float64(p.SD), p.Source, p.Rounds, float64(p.Power), float64(p.Slowdown), slowdownPct(float64(p.MinDetectable)), noisyNote(p)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + "."
}

func noisyNote(p *gates.MetricPower) string {
	switch {
	case p.Noisy:
		return fmt.Sprintf(" (**this run was noisier**: sd %.4f, p %.2g)", float64(p.SDRun), float64(p.NoisierP))
	case !math.IsNaN(float64(p.NoisierP)):
		return fmt.Sprintf(" (this run's sd %.4f)", float64(p.SDRun))
	}
	return ""
}

// OverheadLine states abtest's own share of the run and where the rest went.
func OverheadLine(o gates.Overhead) string {
	return fmt.Sprintf("Harness overhead: %.1f%% of %.1f s (%.1f s in abtest itself: start-up, probes, hashing, file writing, plotting, waiting). Arm work: minfer processes %.1f s (%d); profilers: %.1f s (%d: ncu, nsys, nsys importer/stats, cuobjdump); device tests: %.1f s (%d).",
		o.Fraction*100, o.Total.Seconds(), o.Harness.Seconds(), o.InArms.Seconds(), o.Execs, o.Profilers.Seconds(), o.ProfilerExecs, o.DeviceTests.Seconds(), o.DeviceTestRuns)
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "**no gate (the mutation was not caught)**"
	}
	return strings.Join(xs, ", ")
}

func envSection(b *strings.Builder, rec *gates.Record) {
	e := rec.Env
	fmt.Fprintf(b, "## Environment\n\n")
	gpu := "none: " + e.GPUNote
	if e.GPU != nil {
		gpu = fmt.Sprintf("%s, driver %s, CUDA %s, %s (read before the run; per-round readings in gate 3)", e.GPU.Name, e.GPU.Driver, e.CUDA, e.GPU.String())
	}
	rows := [][]string{
		{"date", e.Date}, {"commit", e.CommitLine()}, {"host", e.Host + " " + e.OS},
		{"CPU", fmt.Sprintf("%s (%d logical CPUs)", e.CPUModel, e.NumCPU)}, {"GPU", gpu},
		{"Go", fmt.Sprintf("abtest %s, minfer %s", e.GoVersion, e.MinferGo)},
		{"binary", e.Binary + " sha256 " + e.BinarySHA256},
		{"kernels", e.KernelsLine()},
		{"model", modelLine(e)},
		{"backend", e.Backend}, {"device flag", rec.Config.Device},
		{"started / finished", rec.Started.UTC().Format(time.RFC3339) + " / " + rec.Finished.UTC().Format(time.RFC3339)},
	}
	fmt.Fprintf(b, "%s\n", Table([]string{"what", "value"}, rows))
	fmt.Fprintf(b, "Every lever (arm A / arm B; every other lever at its registry default, no MINFER_* inherited):\n\n")
	names := make([]string, 0, len(e.Levers))
	for k := range e.Levers {
		names = append(names, k)
	}
	sort.Strings(names)
	pins := map[string]harness.Pin{}
	for _, p := range runPins(rec) {
		pins[p.Name] = p
	}
	var lr [][]string
	for _, k := range names {
		a, bb := e.Levers[k], e.Levers[k]
		if v, ok := rec.Config.A.Env[k]; ok {
			a = v
		}
		if v, ok := rec.Config.B.Env[k]; ok {
			bb = v
		}
		if v, ok := e.Pinned[k]; ok {
			a, bb = v+" (pinned)", v+" (pinned)"
		}
		if p, ok := pins[k]; ok && p.By == harness.PinAnyDepth {
			// Not in the arms' settings: the gates that apply it say so.
			on, _ := anyDepthGates(rec)
			a, bb = fmt.Sprintf("%s (%s in %s: any_depth)", a, p.Value, on), fmt.Sprintf("%s (%s in %s: any_depth)", bb, p.Value, on)
		} else if ok && a == p.Value && bb == p.Value {
			a, bb = a+" ("+pinLabel(p)+")", bb+" ("+pinLabel(p)+")"
		}
		lr = append(lr, []string{k, a, bb})
	}
	fmt.Fprintf(b, "%s\n", Table([]string{"lever", "A", "B"}, lr))
}

// runPins are the settings the run pinned in both arms for the lever's path
// (harness.Lever.Pins on the run's backend): none for a run between two
// builds, which has no lever.
func runPins(rec *gates.Record) []harness.Pin {
	if rec.Config.Between {
		return nil
	}
	return rec.Config.Lever.Pins(rec.Config.Backend)
}

// pinLabel marks a pinned value in the lever table.
func pinLabel(p harness.Pin) string {
	if p.By == harness.PinKVCache {
		return "pinned: the path's KV cache"
	}
	return "pinned: required"
}

// anyDepthGates names the run's gates that apply the lever's any_depth
// pins (gates.AnyDepthGate) and those that do not, each as "a, b and c"
// ("no gate of this run" when none).
func anyDepthGates(rec *gates.Record) (on, off string) {
	var yes, no []string
	for _, g := range rec.Config.Gates {
		if gates.AnyDepthGate(g) {
			yes = append(yes, g)
		} else {
			no = append(no, g)
		}
	}
	return andList(yes), andList(no)
}

// andList joins names as "a", "a and b", "a, b and c".
func andList(xs []string) string {
	switch len(xs) {
	case 0:
		return "no gate of this run"
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// PinsLine states, under the lever's description, the settings pinned in
// both arms because the lever's path needs them: its Requires, the KV
// cache format its rule reads, and a path routed by depth's any_depth
// setting with the gates that applied it. They are part of the lever's
// declaration, not deviations; "" when there are none.
func PinsLine(rec *gates.Record) string {
	var parts []string
	for _, p := range runPins(rec) {
		why := p.Why
		if p.By == harness.PinKVCache {
			why += "; not in the device suite, whose tests choose their caches"
		}
		if p.By == harness.PinAnyDepth {
			on, off := anyDepthGates(rec)
			why += "; applied in " + on
			if off != andList(nil) {
				why += "; not in " + off + ", which run the route as users get it at the run's workload"
			}
		}
		parts = append(parts, fmt.Sprintf("%s=%s (%s)", p.Name, p.Value, why))
	}
	if len(parts) == 0 {
		return ""
	}
	return "Pinned in both arms, for the path (the registry's declaration, not a deviation): " + strings.Join(parts, "; ") + "."
}

// modelLine never prints a size it does not know.
func modelLine(e harness.Environment) string {
	size := "size unknown"
	if e.ModelSize > 0 {
		size = fmt.Sprintf("%d bytes, %.1f MiB", e.ModelSize, float64(e.ModelSize)/(1<<20))
	}
	sha := e.ModelSHA256
	if sha == "" {
		sha = "unknown"
	}
	return fmt.Sprintf("%s (%s) sha256 %s", e.Model, size, sha)
}

func paritySection(b *strings.Builder, g gates.Result) {
	d := g.Parity
	fmt.Fprintf(b, "## Gate 1: parity x3 — %s\n\n%s\n\n", g.Status, g.Reason)
	fmt.Fprintf(b, "Liveness over this gate's logits processes: %s\n\n", g.Liveness)
	if d.Repeat > 1 {
		fmt.Fprintf(b, "Each arm computed its logits %d times in one process (`minfer logits --repeat %d`, every run bitwise the first): the lever's path runs only from that execution on.\n\n", d.Repeat, d.Repeat)
	}
	fmt.Fprintf(b, "1. Kernel parity: **%s** — %s\n", d.KernelStatus, d.Kernel)
	if len(d.Classes) == 0 {
		fmt.Fprintf(b, "2. Whole-graph logits against the CPU reference (`--device cpu`, lever at its baseline, no mutation); bar: max|diff| <= %g and top-1 equal where the reference top-2 margin > %g.\n", d.GraphTol, d.GraphGap)
	} else {
		fmt.Fprintf(b, "2. Whole-graph logits against the CPU reference (`--device cpu`, lever at its baseline, no mutation), judged by a tolerance class chosen from facts (model weight types: %s):\n", d.ModelInfo)
		for _, k := range d.Classes {
			fmt.Fprintf(b, "   - arm %s: class **%s**: %s. Why: %s.\n", k.Arm, k.Name, k.Bar, k.Why)
		}
	}
	fmt.Fprintf(b, "3. A vs B: %s.\n\n", d.Tolerance.String())
	fmt.Fprintf(b, "n_vocab %d; token ids per nt are deterministic (`harness.DeterministicIDs`).\n\n", d.NVocab)
	var rows [][]string
	for _, c := range append(append(append([]gates.Comparison{}, d.Graph...), d.Exact...), d.AvsB...) {
		bit := "no"
		if c.Bitwise {
			bit = "yes"
		}
		pass := "PASS"
		if !c.Pass {
			pass = "FAIL"
		}
		class := c.Class
		if class == "" {
			class = d.Tolerance.Class // A vs B: the lever's declared class
		}
		rows = append(rows, []string{c.Label, fmt.Sprint(c.NT), class, g3(float64(c.MaxAbsDiff)), g3(float64(c.RelL2)),
			fmt.Sprintf("%d/%d", c.Top1Agree, c.Positions), bit, pass, c.Why})
	}
	fmt.Fprintf(b, "%s\n", Table([]string{"comparison", "nt", "class", "max|diff|", "rel L2", "top-1 agree", "bitwise", "result", "why"}, rows))
	// Per-position detail of the A vs B comparisons (first 8 positions of each).
	var pr [][]string
	for _, c := range append(append([]gates.Comparison{}, d.AvsB...), d.Graph...) {
		for i, p := range c.PerPos {
			if i >= 8 && p.Agree {
				continue
			}
			pr = append(pr, []string{c.Label, fmt.Sprint(c.NT), fmt.Sprint(p.Pos), fmt.Sprint(p.RefTop1), fmt.Sprint(p.Top1),
				g3(float64(p.RefMargin)), g3(float64(p.MaxAbsDiff)), yn(p.Agree)})
		}
	}
	if len(pr) > 0 {
		fmt.Fprintf(b, "<details><summary>per-position top-1 (first 8 positions of each comparison, plus every disagreement)</summary>\n\n%s\n</details>\n\n",
			Table([]string{"comparison", "nt", "pos", "ref top-1", "top-1", "ref margin", "max|diff|", "agree"}, pr))
	}
}

func yn(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func greedySection(b *strings.Builder, g gates.Result) {
	d := g.Greedy
	fmt.Fprintf(b, "## Gate 2: greedy identity — %s\n\n%s\n\n", g.Status, g.Reason)
	fmt.Fprintf(b, "`minfer generate --greedy -n %d --repeat-penalty 1.0`; declared margin bar: %g.\n\n", d.N, d.MarginBar)
	fmt.Fprintf(b, "Liveness over this gate's generate processes: %s\n\n", g.Liveness)
	if d.Repeat > 1 {
		fmt.Fprintf(b, "Each generation ran %d times in its process (`--repeat %d`), identical every time.\n\n", d.Repeat, d.Repeat)
	}
	var rows [][]string
	for _, p := range d.Prompts {
		div := "—"
		if p.Div != nil {
			div = fmt.Sprintf("step %d: A %d, B %d", p.Div.Step, p.Div.TokA, p.Div.TokB)
		}
		rows = append(rows, []string{p.Name, fmt.Sprint(p.NPrompt), fmt.Sprintf("%d/%d", len(p.IDsA), len(p.IDsB)), yn(p.Identical), div,
			fmt.Sprintf("%.1f / %.1f", p.DecodeMSA, p.DecodeMSB), idsHead(p.IDsA)})
	}
	fmt.Fprintf(b, "%s\n", Table([]string{"prompt", "prompt tokens", "generated A/B", "identical", "first divergence", "decode ms A/B", "ids A (head)"}, rows))
	for _, p := range d.Prompts {
		if p.Div == nil {
			continue
		}
		v := p.Div
		fmt.Fprintf(b, "First divergence of %q at step %d (%s):\n\n", p.Name, v.Step, v.Note)
		var rr [][]string
		for i := 0; i < max(len(v.TopA), len(v.TopB)); i++ {
			ra, rb := []string{"", ""}, []string{"", ""}
			if i < len(v.TopA) {
				ra = []string{fmt.Sprint(v.TopA[i].ID), fmt.Sprintf("%.5f", v.TopA[i].Logit)}
			}
			if i < len(v.TopB) {
				rb = []string{fmt.Sprint(v.TopB[i].ID), fmt.Sprintf("%.5f", v.TopB[i].Logit)}
			}
			rr = append(rr, append([]string{fmt.Sprint(i + 1)}, append(ra, rb...)...))
		}
		fmt.Fprintf(b, "%s\n", Table([]string{"rank", "A id", "A logit", "B id", "B logit"}, rr))
		fmt.Fprintf(b, "A chose %d, B chose %d; top-2 margin A %.5g, B %.5g; allowed by the declared bar: %v.\n\n", v.TokA, v.TokB, v.MarginA, v.MarginB, v.Allowed)
	}
}

func idsHead(ids []int32) string {
	if len(ids) > 8 {
		return harness.JoinIDs(ids[:8]) + ",…"
	}
	return harness.JoinIDs(ids)
}

func abSection(b *strings.Builder, g gates.Result, rec *gates.Record, plots []string) {
	d := g.AB
	c := rec.Config
	fmt.Fprintf(b, "## Gate 3: interleaved A/B — %s\n\n%s\n\n", g.Status, g.Reason)
	fmt.Fprintf(b, "Liveness over the rounds' bench processes: %s\n\n", g.Liveness)
	depth := ""
	if c.Depth > 0 {
		depth = fmt.Sprintf(" at depth %d (each process first puts %d zero cells in its KV cache, untimed: minfer bench -d %d --fill zeros)", c.Depth, c.Depth, c.Depth)
	}
	fmt.Fprintf(b, "%d of %d pre-registered rounds, order alternating AB/BA; pp%d and tg%d%s, %d repetitions per process (the round value is their median); in-process warmup %d ms before each timed bench. Not-slower bars: pp %g, tg %g (refuse at %d of %d slower, one-sided sign test alpha 0.09). Improvement claim: median >= 1+%g and one-sided sign-test p <= 0.05.\n\n",
		len(d.Rounds), d.Planned, c.PP, c.TG, depth, c.Reps, c.BenchWarm, c.BarPP, c.BarTG, refuseAt(d), d.Planned, c.ClaimBar)
	var wr [][]string
	for _, x := range d.Warmup {
		wr = append(wr, []string{x.Arm, fmt.Sprintf("%.0f", x.Warmup.BudgetMS), fmt.Sprint(x.Warmup.Iterations), fmt.Sprintf("%.0f", x.Warmup.ElapsedMS), fmt.Sprintf("%.2f", x.Wall.Seconds())})
	}
	fmt.Fprintf(b, "Untimed warmup before round 1 (one process per arm):\n\n%s\n", Table([]string{"arm", "budget ms", "iterations", "elapsed ms", "process s"}, wr))
	// The memory and mark columns appear where there is something in them.
	withMem := false
	for _, r := range d.Rounds {
		withMem = withMem || r.Marked != "" || (r.A.Mem != nil && r.A.Mem.Measured) || (r.B.Mem != nil && r.B.Mem.Measured)
	}
	var rr [][]string
	for _, r := range d.Rounds {
		row := []string{fmt.Sprint(r.I), r.Order, fmt.Sprintf("%.2f", r.A.PP), fmt.Sprintf("%.2f", r.B.PP), f4(r.B.PP / r.A.PP),
			fmt.Sprintf("%.2f", r.A.TG), fmt.Sprintf("%.2f", r.B.TG), f4(r.B.TG / r.A.TG), fmt.Sprintf("%d/%d", r.A.Warmup.Iterations, r.B.Warmup.Iterations)}
		if withMem {
			marked := "-"
			if r.Marked != "" {
				marked = "**" + r.Marked + "**"
			}
			row = append(row, memCell(r.A.Mem)+" / "+memCell(r.B.Mem), marked)
		}
		rr = append(rr, append(row, r.Clock))
	}
	head := []string{"round", "order", "pp A", "pp B", "pp B/A", "tg A", "tg B", "tg B/A", "warmup it. A/B"}
	what := "tok/s; clocks read before the round"
	if withMem {
		head = append(head, "device memory A / B", "marked")
		what = "tok/s; device memory: each process's peak, sampled from outside it; marked: another process on the GPU; clocks read before the round"
	}
	fmt.Fprintf(b, "Every round (%s):\n\n%s\n", what, Table(append(head, "clocks"), rr))
	var mr [][]string
	for _, m := range d.Metrics {
		if len(m.Ratios) == 0 {
			continue
		}
		claim := "no"
		if m.Claim.Claim {
			claim = "**yes**"
		}
		mr = append(mr, []string{m.Name + " (" + m.Basis + ")", fmt.Sprintf("%.2f", m.SummaryA.Median), fmt.Sprintf("%.2f", m.SummaryB.Median), f4(float64(m.Median)),
			fmt.Sprintf("[%s, %s] (%.1f%%)", f4(float64(m.CILo)), f4(float64(m.CIHi)), float64(m.CIConf)*100),
			fmt.Sprintf("[%s, %s]", f4(float64(m.BootLo)), f4(float64(m.BootHi))),
			fmt.Sprintf("%d/%d slower than 1/%g: %s", m.NotSlower.Slower, m.NotSlower.N, m.NotSlower.Bar, passWord(m.NotSlower.Pass)),
			fmt.Sprintf("%d wins, p=%.4g: %s", m.Claim.Wins, m.Claim.P, claim), yn2(m.SEP), g3(float64(m.WilcoxonP)),
			fmt.Sprintf("%.2f%% / %.2f%%", m.SummaryA.CV*100, m.SummaryB.CV*100), outliers(m.Outliers)})
	}
	fmt.Fprintf(b, "Per metric (ratio = B/A, higher is better; the deciding metrics first, each on the timing basis named: device time where the backend timed its splits and the lever moves no host work):\n\n%s\n", Table([]string{"metric", "median A", "median B", "median B/A", "95% CI (order stat.)", "bootstrap 95% CI", "not-slower", "claim (sign test)", "SEP", "Wilcoxon p (2-sided)", "CV A / B", "MAD outlier rounds"}, mr))
	var pr [][]string
	for _, m := range d.Metrics {
		if p := m.Power; p != nil {
			pr = append(pr, []string{m.Name, m.Basis, fmt.Sprintf("%.4f", float64(p.SD)), p.Source, fmt.Sprintf("%.4f", float64(p.SDRun)), fmt.Sprint(p.Rounds),
				fmt.Sprintf("%.3f", float64(p.Power)), fmt.Sprintf("x%.3f", float64(p.Slowdown)), slowdownPct(float64(p.MinDetectable)), g3(float64(p.NoisierP))})
		}
	}
	if len(pr) > 0 {
		fmt.Fprintf(b, "Power of the not-slower check (per-round log ratios ~ N(-ln s, sd^2); a round is slower when its ratio < 1/bar, probability Phi((ln s - ln bar)/sd); the check refuses at k(n) slower rounds; power = P(Binomial(n, p) >= k(n)) at s = twice the bar; GATES.md asks >= 0.8):\n\n%s\n",
			Table([]string{"metric", "basis", "sd used", "sd from", "this run's sd", "rounds", "power", "at slowdown", "smallest slowdown refused with 0.8", "p(noisier than calibrated)"}, pr))
	}
	if len(d.Wall) > 0 {
		var wr2 [][]string
		for _, m := range d.Wall {
			wr2 = append(wr2, []string{m.Name, fmt.Sprintf("%.2f", m.SummaryA.Median), fmt.Sprintf("%.2f", m.SummaryB.Median), f4(float64(m.Median)),
				fmt.Sprintf("[%s, %s]", f4(float64(m.CILo)), f4(float64(m.CIHi))), fmt.Sprintf("%d/%d slower", m.NotSlower.Slower, m.NotSlower.N), g3(float64(m.Power.SDRun))})
		}
		fmt.Fprintf(b, "The same metrics on wall time (reported, not deciding):\n\n%s\n", Table([]string{"metric", "median A", "median B", "median B/A", "95% CI", "not-slower count", "sd of log ratio"}, wr2))
	}
	for _, m := range d.Metrics {
		if m.Key == "tg" && m.SummaryA.Median > 0 && m.SummaryB.Median > 0 {
			fmt.Fprintf(b, "Decode time per token (%s, median over rounds): A %.4f ms, B %.4f ms.\n\n", m.Name, 1000/m.SummaryA.Median, 1000/m.SummaryB.Median)
		}
	}
	if dd := d.Decode; dd != nil {
		if dd.Why != "" {
			fmt.Fprintf(b, "Decode bandwidth: not computed (%s).\n\n", dd.Why)
		} else {
			fmt.Fprintf(b, "Decode bandwidth (weight bytes per token %d, %s; the H200 HBM floor %.0f GB/s): A %.1f GB/s (%.1f%% of the floor), B %.1f GB/s (%.1f%%); the floor is %.0f tok/s.\n\n",
				dd.BytesPerToken, dd.Method, harness.HBMCopyGBs, float64(dd.A.GBs), float64(dd.A.HBMShare)*100, float64(dd.B.GBs), float64(dd.B.HBMShare)*100, float64(dd.A.FloorTokS))
			if kv := float64(dd.KVRead); kv > 0 {
				fmt.Fprintf(b, "At depth %d a tg step also reads %.0f MB of KV cache on average (not in the GB/s above).\n\n", rec.Config.Depth, kv/1e6)
			}
		}
	}
	for _, p := range plots {
		fmt.Fprintf(b, "![%s](%s)\n\n", p, p)
	}
}

// memCell is one process's peak device memory ("0.488 GiB", "-" when not
// measured).
func memCell(u *gpumem.Usage) string {
	if u == nil || !u.Measured {
		return "-"
	}
	return gpumem.GiB(u.PeakBytes)
}

func refuseAt(d *gates.ABDetail) int {
	for _, m := range d.Metrics {
		if m.NotSlower.RefuseAt > 0 {
			return m.NotSlower.RefuseAt
		}
	}
	return 0
}

func passWord(p bool) string {
	if p {
		return "pass"
	}
	return "**refuse**"
}

func yn2(b bool) string {
	if b {
		return "SEP"
	}
	return "-"
}

func outliers(is []int) string {
	if len(is) == 0 {
		return "none"
	}
	var s []string
	for _, i := range is {
		s = append(s, fmt.Sprint(i+1))
	}
	return strings.Join(s, ", ")
}

func suiteSection(b *strings.Builder, g gates.Result) {
	d := g.Suite
	fmt.Fprintf(b, "## Gate 4: device suite — %s\n\n%s\n\n", g.Status, g.Reason)
	fmt.Fprintf(b, "Ran with arm B's settings: %s.\n\n", envLine(d.Env))
	if d.Reused != "" {
		fmt.Fprintf(b, "Reused, not run now: %s.\n\n", d.Reused)
	}
	if len(d.Refused) > 0 {
		fmt.Fprintf(b, "Binaries given but not this suite's (by their build stamp): %s.\n\n", strings.Join(d.Refused, "; "))
	}
	var rows [][]string
	for _, r := range d.Binaries {
		rows = append(rows, []string{r.Binary, fmt.Sprint(r.Passed), fmt.Sprint(r.Failed), fmt.Sprint(r.Skipped), strings.Join(r.Failures, ", ")})
	}
	fmt.Fprintf(b, "%s\n", Table([]string{"binary", "passed", "failed", "skipped", "failures"}, rows))
	for _, r := range d.Binaries {
		for _, name := range r.Failures {
			if lines := r.FailureLogs[name]; len(lines) > 0 {
				fmt.Fprintf(b, "%s %s said (last %d lines):\n\n```\n%s\n```\n\n", r.Binary, name, len(lines), strings.Join(lines, "\n"))
			}
		}
	}
}

// envLine renders lever settings "A=1 B=0" sorted ("defaults" when none).
func envLine(m map[string]string) string {
	if len(m) == 0 {
		return "every lever at its default"
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var out []string
	for _, k := range ks {
		out = append(out, "`"+k+"="+m[k]+"`")
	}
	return strings.Join(out, " ")
}

func profileSection(b *strings.Builder, g gates.Result, lv harness.Lever) {
	d := g.Profile
	fmt.Fprintf(b, "## Gate 5: profile evidence — %s\n\n%s\n\n", g.Status, g.Reason)
	if d.Rule != nil && lv.Liveness != nil {
		var what []string
		if len(d.Rule.Census) > 0 {
			what = append(what, "census names "+strings.Join(d.Rule.Census, ", "))
		}
		if d.Rule.Graphs {
			what = append(what, "CUDA graphs captured/replayed")
		}
		if d.Rule.PDL {
			what = append(what, "PDL launches")
		}
		if d.Rule.PrefillGraphs {
			what = append(what, "prefill graphs captured")
		}
		if len(d.Rule.Funcs) > 0 {
			what = append(what, "pprof functions "+strings.Join(d.Rule.Funcs, ", "))
		}
		fmt.Fprintf(b, "Liveness rule (the registry, `minfer levers --json`): path on at %s=%s; judged by %s. %s\n\n", lv.Name, lv.Liveness.On, strings.Join(what, "; "), lv.Liveness.Why)
	}
	if len(d.Missing) > 0 {
		fmt.Fprintf(b, "Evidence missing: %s.\n\n", strings.Join(d.Missing, "; "))
	}
	if c := d.CPU; c != nil {
		fmt.Fprintf(b, "pprof CPU profiles (MINFER_CPU_PROFILE, one bench per arm): %s\n\n", c.Note)
		var pr [][]string
		for _, a := range c.Arms {
			var top []string
			for _, h := range a.Top {
				top = append(top, fmt.Sprintf("%s %d", shortFunc(h.Func), h.Samples))
			}
			pr = append(pr, []string{a.Arm, fmt.Sprint(a.Samples), fmt.Sprint(a.InFuncs), strings.Join(a.Matched, ", "), strings.Join(top, "; "), a.Error})
		}
		fmt.Fprintf(b, "%s\n", Table([]string{"arm", "samples", "in the lever's functions", "functions matched", "top functions (flat samples)", "error"}, pr))
	}
	fmt.Fprintf(b, "Liveness: **%s**\n\n", d.Liveness)
	fmt.Fprintf(b, "CUDA graphs (the backend's `{\"cuda_graphs\"}` exit line, census runs): %s.\n\n", gates.GraphsLine(d))
	var cr [][]string
	for _, x := range d.Diff {
		cr = append(cr, []string{x.Kernel, fmt.Sprint(x.A), fmt.Sprint(x.B)})
	}
	fmt.Fprintf(b, "Launch census (MINFER_LAUNCH_CENSUS=1, graph replays included; %d kernels in A, %d in B), kernels whose launches differ:\n\n%s\n", len(d.CensusA), len(d.CensusB), Table([]string{"kernel", "A", "B"}, cr))
	fmt.Fprintf(b, "ncu: %s\n\n", d.NCUNote)
	var nr [][]string
	for _, k := range d.NCU {
		row := []string{k.Kernel, k.Arm, fmt.Sprintf("%.0f", float64(k.DurNS)), fmt.Sprintf("%.0f", float64(k.Bytes)), fmt.Sprintf("%.1f", float64(k.GBs)), fmt.Sprintf("%.1f%%", float64(k.OfCeiling)*100)}
		extra := map[string]string{}
		for _, m := range k.Metrics {
			v := "n/a"
			if len(m.Values) > 0 {
				v = g3(m.Mean())
			}
			extra[m.Metric] = v
		}
		row = append(row, extra["sm__throughput.avg.pct_of_peak_sustained_elapsed"], extra["launch__registers_per_thread"], extra["sm__warps_active.avg.pct_of_peak_sustained_active"])
		nr = append(nr, row)
	}
	if len(nr) > 0 {
		fmt.Fprintf(b, "%s\n", Table([]string{"kernel", "arm", "duration ns", "DRAM bytes", "GB/s", "of copy ceiling", "SM throughput %", "registers", "occupancy %"}, nr))
	}
	fmt.Fprintf(b, "nsys: %s\n\n", d.NsysNote)
	var sr [][]string
	for _, k := range d.Nsys {
		sr = append(sr, []string{k.Name, fmt.Sprint(k.Instances), fmt.Sprintf("%.0f", k.TotalNS), fmt.Sprintf("%.0f", k.MedNS)})
	}
	if len(sr) > 0 {
		fmt.Fprintf(b, "%s\n", Table([]string{"kernel", "instances", "total ns", "median ns"}, sr))
	}
	for _, ot := range d.OpTiming {
		if ot.Timing == nil {
			fmt.Fprintf(b, "MINFER_OP_TIMING arm %s: %s\n\n", ot.Arm, ot.Error)
			continue
		}
		scope := "every launch"
		if ot.Timing.DirectLaunchesOnly {
			scope = "direct launches only: kernels inside replayed CUDA graphs are not timed"
		}
		fmt.Fprintf(b, "MINFER_OP_TIMING arm %s (%s; env %s):\n\n", ot.Arm, scope, strings.Join(ot.Env, " "))
		var or [][]string
		for _, k := range ot.Timing.Kernels {
			or = append(or, []string{k.Kernel, fmt.Sprint(k.Count), fmt.Sprintf("%.0f", k.TotalNS), fmt.Sprintf("%.0f", k.AvgNS())})
		}
		fmt.Fprintf(b, "%s\n", Table([]string{"kernel", "launches", "total ns", "avg ns"}, or))
	}
	fmt.Fprintf(b, "SASS: %s\n\n", d.SASSNote)
	var sa [][]string
	for _, f := range d.SASS {
		sa = append(sa, []string{f.Name, f.Arch, fmt.Sprint(f.Total), fmt.Sprint(f.Opcodes["IMMA"]), fmt.Sprint(f.Opcodes["HMMA"]), fmt.Sprint(f.Opcodes["LDGSTS"]), strings.Join(f.TopOpcodes(6), " ")})
	}
	if len(sa) > 0 {
		fmt.Fprintf(b, "%s\n", Table([]string{"function", "arch", "instructions", "IMMA", "HMMA", "LDGSTS", "top opcodes"}, sa))
	}
}

// shortFunc drops the module path of a Go function name.
func shortFunc(f string) string {
	if i := strings.LastIndex(f, "/"); i >= 0 {
		return f[i+1:]
	}
	return f
}

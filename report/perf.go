package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
)

// targetCell says whether the target was met, and by how much it was missed.
func targetCell(m *harness.PerfMetric, decimals int) string {
	if m == nil || m.Met == nil {
		return "-"
	}
	if *m.Met {
		return "met (>= " + thousands(float64(m.Target), 0) + ")"
	}
	return fmt.Sprintf("**MISSED** >= %s by %s (%.1f%%)", thousands(float64(m.Target), 0), thousands(float64(m.Short), decimals), 100*m.ShortBy)
}

// longTargetCell is a long-context row's target: a share of the same run's
// tg at depth 0, met or missed by how much.
func longTargetCell(r harness.PerfResult) string {
	if r.Long == nil || r.TG == nil || r.TG.Met == nil {
		return "-"
	}
	if r.Long.MinRatio == 0 {
		return targetCell(r.TG, 1) // an absolute target at depth (issue 20)
	}
	t := fmt.Sprintf(">= %.2f x d0 = %s", r.Long.MinRatio, thousands(float64(r.TG.Target), 1))
	if *r.TG.Met {
		return "met (" + t + ")"
	}
	return fmt.Sprintf("**MISSED** %s by %s (%.1f%%)", t, thousands(float64(r.TG.Short), 1), 100*r.TG.ShortBy)
}

func ratioCell(m *harness.PerfMetric) string {
	if m == nil {
		return "-"
	}
	return Fnum(float64(m.Ratio), "%.3f")
}

// PerfMarkdown renders a perf table.
func PerfMarkdown(p *harness.PerfRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**Perf: %s** — %s\n\n", p.Verdict, p.VerdictLine)
	fmt.Fprintf(&b, "# minfer speed against the reference engine (issue 6), %s\n\n", p.Started.UTC().Format("2006-01-02 15:04 MST"))
	if len(p.With) > 0 {
		var ws []string
		for _, k := range slices.Sorted(maps.Keys(p.With)) {
			ws = append(ws, k+"="+p.With[k])
		}
		fmt.Fprintf(&b, "**Not the defaults:** every minfer process ran with %s (--with); every other lever at its registry default.\n\n", strings.Join(ws, ", "))
	}
	if pe := p.Peer; pe != nil {
		fmt.Fprintf(&b, "Reference: **measured in this run** by the peer engine %s (`%s`, sha256 %s) on every row's same GGUF file: "+
			"per row one untimed warm-up process of each engine (-r 1), then %d round(s) of one `minfer bench` and one `%s -m FILE -ngl 99 -p %d -n %d -r %d -o json` process "+
			"(`-d DEPTH` on a depth row), odd rounds minfer first, even rounds the peer first; each engine's cell is the median of all its rounds' repetitions "+
			"(llama-bench's samples_ts). The ratio columns are ours / the peer's; the stored constants of issue 6 are not used where the peer ran.\n\n",
			pe.Name, pe.Path, pe.SHA256, pe.Rounds, pe.Name, p.PP, p.TG, p.Reps)
	} else {
		fmt.Fprintf(&b, "Reference: %s: %s; no peer ran in this run (`--peer llama-bench=PATH` measures one).\n\n", harness.StoredReference, p.Reference)
	}
	fmt.Fprintf(&b, "Ours: one `minfer bench -p %d -n %d -r %d --format json` process per row on the synthesized model of that shape and weight type (seed 1), "+
		"after an untimed in-process warmup of MINFER_BENCH_WARMUP_MS=%d (at least 3 iterations; on the H200 the GPU idles near 375 MHz and ramps under load). "+
		"A cell is the **median** of the %d repetitions, as the reference's (mean ± sd in the details). "+
		"Decode GB/s = weight bytes read per token × tg tok/s; share of the HBM floor = GB/s / %.0f (DEVICE.md's measured HBM copy, ~4.3 TB/s), "+
		"which is also tg tok/s / floor tok/s. "+
		"A depth row (SHAPE:TYPE@dDEPTH) runs `minfer bench -p %d -n %d -d DEPTH --ctx DEPTH+%d` (an untimed fill of DEPTH tokens before every repetition): "+
		"its pp and tg at that depth; no stored constant exists there (only a peer gives it a ratio), and its tg is judged against the same run's tg at depth 0 of that model (section \"Long context\").\n\n",
		p.PP, p.TG, p.Reps, p.BenchWarmupMS, p.Reps, p.HBMCopyGBs, p.PP, p.TG, p.PP+p.TG)
	if p.Comparable != "" {
		fmt.Fprintf(&b, "**Not like-for-like:** %s.\n\n", p.Comparable)
	}
	fmt.Fprintf(&b, "%s\n\n", perfMemoryNote(p))
	pp, tg := fmt.Sprintf("pp%d", p.PP), fmt.Sprintf("tg%d", p.TG)
	var rows [][]string
	for _, r := range p.Rows {
		if r.Failed {
			f := "FAILED (" + r.Stage + ")"
			if r.OutOfMemory {
				f = "COULD NOT RUN (out of memory)"
			}
			refPP, refTG, from := thousandsRef(r.Row.RefPP, 0), thousandsRef(r.Row.RefTG, 1), "-"
			if p.Peer != nil {
				refPP, refTG = "-", "-"
			} else if r.Row.RefPP > 0 {
				from = harness.StoredReference
			}
			rows = append(rows, withBase(p, []string{r.Row.Name(), f, refPP, "-", "-", f, refTG, "-", "-", "-", "-", "-", perfMemCell(r), from}, r))
			continue
		}
		if r.Long != nil {
			ppCell, ppRef, ppRatio, ppTarget := "-", "-", "-", "-"
			if r.PP != nil {
				ppCell, ppRef, ppRatio, ppTarget = thousands(float64(r.PP.TokS), 0), refCell(r.PP, 0), ratioCell(r.PP), targetCell(r.PP, 0)
			}
			tgRatio := Fnum(float64(r.Long.Ratio), "%.3f") + " of d0"
			if r.TG.RefFrom != "" {
				tgRatio = ratioCell(r.TG) + "; " + tgRatio
			}
			rows = append(rows, withBase(p, []string{r.Row.Name(), ppCell, ppRef, ppRatio, ppTarget,
				thousands(float64(r.TG.TokS), 1), refCell(r.TG, 1), tgRatio, longTargetCell(r),
				GBs(float64(r.Decode.GBs)), Pct(float64(r.Decode.HBMShare)), thousands(float64(r.Decode.FloorTokS), 0), perfMemCell(r), refFromCell(r)}, r))
			continue
		}
		rows = append(rows, withBase(p, []string{r.Row.Name(),
			thousands(float64(r.PP.TokS), 0), refCell(r.PP, 0), ratioCell(r.PP), targetCell(r.PP, 0),
			thousands(float64(r.TG.TokS), 1), refCell(r.TG, 1), ratioCell(r.TG), targetCell(r.TG, 1),
			GBs(float64(r.Decode.GBs)), Pct(float64(r.Decode.HBMShare)), thousands(float64(r.Decode.FloorTokS), 0), perfMemCell(r), refFromCell(r)}, r))
	}
	head := []string{"row", "ours " + pp, "ref " + pp, pp + " ratio", pp + " target",
		"ours " + tg, "ref " + tg, tg + " ratio", tg + " target", "decode GB/s", "share of HBM floor", "floor tg tok/s", "peak device memory", "reference"}
	if p.Base != nil {
		head = append(head, "base "+pp, "base "+tg, "vs base")
	}
	fmt.Fprintf(&b, "%s\n", Table(head, rows))
	b.WriteString(slopeSection(p))
	b.WriteString(peerSection(p))
	b.WriteString(baseSection(p))

	rows = nil
	for _, r := range p.Rows {
		if r.Long == nil {
			continue
		}
		rows = append(rows, []string{r.Row.Name(), thousands(float64(r.Long.TG0.TokS), 1), thousands(float64(r.TG.TokS), 1),
			Fnum(float64(r.Long.Ratio), "%.3f"), longTargetCell(r), r.Long.TG0From})
	}
	if len(rows) > 0 {
		fmt.Fprintf(&b, "## Long context\n\n"+
			"Issue 6: \"tg128 after a 4K-token prompt within 15%% of tg128 at empty KV on 7B Q4_K_M\": ours at depth >= 0.85 x ours at depth 0, "+
			"both measured in this run (no llama.cpp number for this bar). Medians of %d repetitions each.\n\n", p.Reps)
		fmt.Fprintf(&b, "%s\n", Table([]string{"row", tg + " at depth 0 (tok/s)", tg + " at depth (tok/s)", "ratio", "target", "depth-0 number from"}, rows))
	}

	b.WriteString(launchesSection(p))

	fmt.Fprintf(&b, "## Rows in detail\n\n")
	rows = nil
	for _, r := range p.Rows {
		if r.Failed {
			continue
		}
		clk := r.ClocksNote
		if r.Clocks != nil {
			clk = r.Clocks.String()
		}
		ppCell := "-"
		if r.PP != nil {
			ppCell = fmt.Sprintf("%s ± %s", thousands(float64(r.PP.Mean), 0), thousands(float64(r.PP.Stddev), 0))
		}
		rows = append(rows, []string{r.Row.Name(), r.Backend + " / KV " + r.KVFormat, ppCell,
			fmt.Sprintf("%s ± %s", thousands(float64(r.TG.Mean), 1), thousands(float64(r.TG.Stddev), 1)),
			thousands(float64(r.Weights.PerToken), 0), kvCell(r, p.TG), GBs(float64(r.RefDecode.GBs)) + " (" + Pct(float64(r.RefDecode.HBMShare)) + ")",
			fmt.Sprintf("%d it, %.0f ms", r.Warmup.Iterations, r.Warmup.ElapsedMS), fmt.Sprintf("%.1f s", r.BenchWall), r.Synth, clk})
	}
	fmt.Fprintf(&b, "%s\n", Table([]string{"row", "backend", pp + " mean ± sd", tg + " mean ± sd", "weight bytes/token", "KV read/token (vs weights)",
		"reference GB/s at these bytes (share)", "warmup", "bench wall", "model", "GPU before the row"}, rows))
	for _, r := range p.Rows {
		if r.Failed {
			continue
		}
		fmt.Fprintf(&b, "- %s: model %s (sha256 %s, %s bytes); bytes/token by %s.\n", r.Row.Name(), r.Model, orDash(r.ModelSHA256),
			thousands(float64(r.Weights.FileSize), 0), r.Weights.Method)
	}
	b.WriteString("\n")

	var failed []harness.PerfResult
	for _, r := range p.Rows {
		if r.Failed {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "## Failed rows (no numbers: a failure is never a zero)\n\n")
		for _, r := range failed {
			word := "FAILED"
			if r.OutOfMemory {
				word = "COULD NOT RUN (does not fit this machine)"
			}
			fmt.Fprintf(&b, "### %s: %s at %s\n\n%s\n\n", r.Row.Name(), word, r.Stage, r.Error)
			tail := r.StderrTail
			if tail == "" {
				tail = "(no stderr)"
			}
			fmt.Fprintf(&b, "stderr tail:\n\n```\n%s\n```\n\n", tail)
		}
	}

	fmt.Fprintf(&b, "## Weight bytes per token (the approximation)\n\n"+
		"Read from each model's GGUF tensor table: a batch-1 decode step reads every tensor in full (all matmul weights, norms, biases) "+
		"and one row of token_embd; when the output is tied to the embedding (no output.weight: qwen2-0.5b, qwen3-0.6b), the logits matmul reads token_embd in full as well. "+
		"Not counted: activations, and the KV cache, whose mean read per step of %s (one prompt token, then the decode steps; on a long-context row after the depth fill as well) is in the details column \"KV read/token\" in the bench's kv_format. "+
		"Issue 6 quotes the 7B floors from the whole file size (7B Q8_0 ~531, Q4_K_M ~920 tok/s); "+
		"leaving out the untied 7B embedding table's unread rows puts the floor here somewhat higher.\n\n", tg)

	fmt.Fprintf(&b, "## Environment\n\n")
	e := p.Env
	gpu := e.GPUNote
	if e.GPU != nil {
		gpu = fmt.Sprintf("%s, driver %s, CUDA %s; at the start: %s", e.GPU.Name, e.GPU.Driver, orDash(e.CUDA), e.GPU.String())
	}
	fmt.Fprintf(&b, "- device: --device %s; GPU: %s\n", p.Device, gpu)
	fmt.Fprintf(&b, "- host: %s, %s, %s, %d CPUs\n", e.Host, e.OS, e.CPUModel, e.NumCPU)
	fmt.Fprintf(&b, "- commit: %s\n", e.CommitLine())
	fmt.Fprintf(&b, "- minfer: %s (sha256 %s); abtest built with %s\n", e.Binary, e.BinarySHA256, e.GoVersion)
	if bb := p.Base; bb != nil {
		args := "the same arguments and environment as ours"
		if bb.ArgsNote != "" {
			args = "the same environment as ours; " + bb.ArgsNote
		}
		fmt.Fprintf(&b, "- base minfer: %s (sha256 %s); commit: %s; %s\n", bb.Path, bb.SHA256, bb.CommitLine(), args)
	}
	pinned := fmt.Sprintf("MINFER_BENCH_WARMUP_MS=%d", p.BenchWarmupMS)
	for _, k := range slices.Sorted(maps.Keys(p.With)) {
		pinned += fmt.Sprintf(", **%s=%s** (--with)", k, p.With[k])
	}
	fmt.Fprintf(&b, "- pinned in every minfer process: %s; every other MINFER_* unset (levers at their defaults)\n", pinned)
	fmt.Fprintf(&b, "- GPU clocks before each row: in the details table\n\n")

	fmt.Fprintf(&b, "## Commands\n\n```sh\n%s\n", p.Command)
	for _, r := range p.Rows {
		fmt.Fprintf(&b, "# %s\n", r.Row.Name())
		if r.SynthCommand != "" {
			fmt.Fprintf(&b, "%s   # %s\n", r.SynthCommand, r.Synth)
		}
		if r.BenchCommand != "" {
			fmt.Fprintf(&b, "%s\n", r.BenchCommand)
		}
		if r.Base != nil {
			fmt.Fprintf(&b, "%s   # the base build, the same arguments and environment\n", r.Base.Command)
		}
		if r.Peer != nil {
			fmt.Fprintf(&b, "%s   # the peer, on the same file\n", r.Peer.Command)
		}
		if r.Long != nil && r.Long.TG0Command != "" {
			fmt.Fprintf(&b, "%s   # depth 0, for the ratio\n", r.Long.TG0Command)
		}
		if r.Launches != nil && r.Launches.Command != "" {
			fmt.Fprintf(&b, "%s   # launch census (counts only, not timed)\n", r.Launches.Command)
		}
	}
	b.WriteString("```\n")
	return b.String()
}

// refCell is a metric's reference tok/s: the peer's measured number or a
// stored constant ("-": none).
func refCell(m *harness.PerfMetric, decimals int) string {
	if m == nil || m.RefFrom == "" {
		return "-"
	}
	return thousands(float64(m.Ref), decimals)
}

// refFromCell says where a row's reference numbers come from.
func refFromCell(r harness.PerfResult) string {
	for _, m := range []*harness.PerfMetric{r.PP, r.TG} {
		if m != nil && m.RefFrom != "" {
			return m.RefFrom
		}
	}
	return "-"
}

// perfMemCell is a row's peak device memory: minfer's timed bench
// processes, and the peer's beside it when one ran.
func perfMemCell(r harness.PerfResult) string {
	s := perfMem(r.DeviceMemory)
	if r.Peer != nil {
		s = "ours " + s + "; peer " + perfMem(r.Peer.DeviceMemory)
	}
	return s
}

// slopeSection is the pp chunk time's growth with the KV depth, per model
// with a depth-0 row and depth rows ("" when none).
func slopeSection(p *harness.PerfRecord) string {
	if len(p.Slopes) == 0 {
		return ""
	}
	var rows [][]string
	for _, s := range p.Slopes {
		var pts []string
		for i, d := range s.Depths {
			pt := fmt.Sprintf("d%d: %.2f", d, float64(s.OursMS[i]))
			if len(s.PeerMS) == len(s.Depths) {
				pt += fmt.Sprintf(" / %.2f", float64(s.PeerMS[i]))
			}
			pts = append(pts, pt)
		}
		verdict := "- (no peer)"
		if s.Met != nil && *s.Met {
			verdict = "met (ours <= the peer's)"
		} else if s.Met != nil {
			verdict = "**MISSED** (ours above the peer's)"
		}
		rows = append(rows, []string{s.Model, Fnum(float64(s.Ours), "%.3f"), Fnum(float64(s.Peer), "%.3f"), verdict, strings.Join(pts, ", ")})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## pp%d chunk time over the KV depth\n\n"+
		"Per model with a depth-0 row and depth rows in this run: the time of one pp%d chunk (%d / median tok/s, in ms) at each depth, "+
		"and its least-squares slope over the depths in ms per 1,024 cached tokens, ours and the peer's (issue 20's bar: ours <= the peer's).\n\n", p.PP, p.PP, p.PP)
	fmt.Fprintf(&b, "%s\n", Table([]string{"model", "ours ms / 1,024 tokens", "peer ms / 1,024 tokens", "bar", "chunk ms at each depth (ours / peer)"}, rows))
	return b.String()
}

// peerSection lists, per row, the order of the rounds and the peer's
// numbers ("" without a peer).
func peerSection(p *harness.PerfRecord) string {
	if p.Peer == nil {
		return ""
	}
	var rows [][]string
	for _, r := range p.Rows {
		if r.Peer == nil {
			continue
		}
		var order []string
		for _, rd := range r.Peer.Rounds {
			order = append(order, fmt.Sprintf("%d: %s first", rd.Round, rd.First))
		}
		cell := func(m *harness.PerfMetric, d int) string {
			if m == nil {
				return "-"
			}
			return fmt.Sprintf("%s (%s ± %s, %d samples)", thousands(float64(m.TokS), d), thousands(float64(m.Mean), d), thousands(float64(m.Stddev), d), len(m.Samples))
		}
		rows = append(rows, []string{r.Row.Name(), cell(r.Peer.PP, 0), cell(r.Peer.TG, 1), perfMem(r.Peer.DeviceMemory), orDash(strings.Join(order, ", "))})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Peer engine: %s\n\n%s, sha256 %s; its peak device memory is sampled from outside each of its timed processes, as minfer's.\n\n", p.Peer.Name, p.Peer.Path, p.Peer.SHA256)
	fmt.Fprintf(&b, "%s\n", Table([]string{"row", "peer pp median (mean ± sd, samples)", "peer tg median (mean ± sd, samples)", "peer peak device memory", "rounds"}, rows))
	return b.String()
}

// withBase appends a row's base columns (base pp, base tg, vs base) to
// cells when the run had a base build.
func withBase(p *harness.PerfRecord, cells []string, r harness.PerfResult) []string {
	if p.Base == nil {
		return cells
	}
	b := r.Base
	if r.Failed || b == nil || b.PP == nil || b.TG == nil {
		return append(cells, "-", "-", "-")
	}
	return append(cells, thousands(float64(b.PP.TokS), 0), thousands(float64(b.TG.TokS), 1), vsBaseCell(b))
}

// vsBaseCell is ours / the base's for pp and tg, and whether ours is no
// slower than the base by the bar, by how much when it is.
func vsBaseCell(b *harness.BaseRow) string {
	var parts, missed []string
	for _, v := range []*harness.BaseVs{b.VsPP, b.VsTG} {
		if v == nil {
			continue
		}
		kind := "tg"
		if strings.HasPrefix(v.Test, "pp") {
			kind = "pp"
		}
		parts = append(parts, kind+" "+Fnum(float64(v.Ratio), "%.3f"))
		if !v.Met {
			missed = append(missed, fmt.Sprintf("%s %.1f%% slower", kind, 100*v.SlowerBy))
		}
	}
	if len(missed) > 0 {
		return strings.Join(parts, ", ") + ": **MISSED** (" + strings.Join(missed, ", ") + ")"
	}
	return strings.Join(parts, ", ") + ": met"
}

// baseSection is "Against the base build": the rule, the base's commit and
// per row its medians with their samples and the rounds' order ("" without
// a base).
func baseSection(p *harness.PerfRecord) string {
	bb := p.Base
	if bb == nil {
		return ""
	}
	var rows [][]string
	for _, r := range p.Rows {
		if r.Base == nil {
			continue
		}
		var order []string
		for _, rd := range r.Base.Rounds {
			order = append(order, fmt.Sprintf("%d: %s", rd.Round, strings.Join(rd.Order, ", ")))
		}
		cell := func(m *harness.PerfMetric, d int) string {
			if m == nil {
				return "-"
			}
			return fmt.Sprintf("%s (%s ± %s, %d samples)", thousands(float64(m.TokS), d), thousands(float64(m.Mean), d), thousands(float64(m.Stddev), d), len(m.Samples))
		}
		verdict := "-"
		switch {
		case r.Failed:
			verdict = "FAILED (" + r.Stage + ")"
		case r.Base.VsPP != nil:
			verdict = vsBaseCell(r.Base)
		}
		rows = append(rows, []string{r.Row.Name(), cell(r.Base.PP, 0), cell(r.Base.TG, 1), verdict, perfMem(r.Base.DeviceMemory), orDash(strings.Join(order, "; "))})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Against the base build\n\n"+
		"Base: %s (sha256 %s), commit %s. Rule: on every row and for each of pp and tg, ours must be no slower than the base: "+
		"our median >= the base's median / %.3f (GATES.md gate 3's not-slower bar of 1.5%% for whole prefill and decode); a row slower than its base is a missed target, "+
		"a failed base bench a FAILED row (never a zero). Per row one untimed warm-up process of each engine (-r 1), then %d round(s) of one `minfer bench` of ours and one of the base "+
		"with the same arguments and environment (--with and MINFER_BENCH_WARMUP_MS included)%s, the engines' order rotating each round (round i: minfer, base%s rotated left by i-1; "+
		"the order each round ran is below); each engine's cell is the median of all its rounds' repetitions.\n\n",
		bb.Path, bb.SHA256, bb.CommitLine(), bb.NotSlower, bb.Rounds, peerWord(p), peerTail(p))
	if bb.ArgsNote != "" {
		fmt.Fprintf(&b, "**Base arguments:** %s.\n\n", bb.ArgsNote)
	}
	fmt.Fprintf(&b, "%s\n", Table([]string{"row", "base pp median (mean ± sd, samples)", "base tg median (mean ± sd, samples)", "ours / base", "base peak device memory", "rounds (order)"}, rows))
	return b.String()
}

func peerWord(p *harness.PerfRecord) string {
	if p.Peer == nil {
		return ""
	}
	return " and one " + p.Peer.Name + " process"
}

func peerTail(p *harness.PerfRecord) string {
	if p.Peer == nil {
		return ""
	}
	return ", " + p.Peer.Name
}

// perfMem is one peak device memory reading of a perf row.
func perfMem(u *gpumem.Usage) string {
	if u == nil || !u.Measured {
		return "not measured"
	}
	s := gpumem.GiB(u.PeakBytes)
	if len(u.Others) > 0 {
		s += " (**another process on the GPU**: " + gpumem.OthersLine(u.Others) + ")"
	}
	return s
}

// perfMemoryNote says how the memory column was measured, or why not.
func perfMemoryNote(p *harness.PerfRecord) string {
	src, why := "", ""
	for _, r := range p.Rows {
		switch u := r.DeviceMemory; {
		case u == nil:
		case u.Measured && src == "":
			src = u.Source
		case !u.Measured && why == "":
			why = u.Why
		}
	}
	switch {
	case src != "" && why != "":
		return fmt.Sprintf("Peak device memory: each row's timed bench process, sampled from outside it by %s for its lifetime (some rows not measured: %s).", src, why)
	case src != "":
		if p.Peer != nil {
			return fmt.Sprintf("Peak device memory: each row's timed bench processes (the peak over its rounds), and the peer's beside it (\"ours X; peer Y\"), sampled from outside each process by %s for its lifetime.", src)
		}
		return fmt.Sprintf("Peak device memory: each row's timed bench process, sampled from outside it by %s for its lifetime.", src)
	case why != "":
		return "Peak device memory: not measured (" + why + ")."
	}
	return "Peak device memory: not measured (the harness sampled none)."
}

// launchesSection is the "Decode launches (per token)" section: the census
// counts of every depth-0 row with the time per token of its timed bench
// ("" when no row has a census result).
func launchesSection(p *harness.PerfRecord) string {
	var rows [][]string
	var failed []harness.PerfResult
	for _, r := range p.Rows {
		l := r.Launches
		if r.Failed || l == nil {
			continue
		}
		if l.Error != "" {
			failed = append(failed, r)
			f := "census run FAILED"
			rows = append(rows, []string{r.Row.Name(), f, f, Fnum(float64(l.MSPerToken), "%.3f"), "-", "-"})
			continue
		}
		var top []string
		for _, k := range l.TopKernels {
			top = append(top, fmt.Sprintf("%s %.4g", k.Kernel, k.PerToken))
		}
		rows = append(rows, []string{r.Row.Name(), Fnum(float64(l.LaunchesPerToken), "%.1f"), Fnum(float64(l.GraphReplaysPerToken), "%.2f"),
			Fnum(float64(l.MSPerToken), "%.3f"), Fnum(float64(l.USPerLaunch), "%.2f"), orDash(strings.Join(top, ", "))})
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Decode launches (per token)\n\n"+
		"Counted by one extra `MINFER_LAUNCH_CENSUS=1 MINFER_BENCH_WARMUP_MS=0 minfer bench -p 0 -n %d -r 1` process per depth-0 row, run after its timed bench: "+
		"kernel launches and CUDA graph replays of the %d decode steps, per token (a replayed graph counts every kernel it holds; the warmup and the one-token prefill are not counted). "+
		"The census perturbs the speed, so the times come from the row's timed bench, which ran without it: ms per token = 1000 / its median tg tok/s, "+
		"µs per launch = ms per token × 1000 / kernels per token (the mean time per kernel, its launch gap included).\n\n", harness.CensusTG, harness.CensusTG)
	fmt.Fprintf(&b, "%s\n", Table([]string{"row", "kernels per token", "graph replays per token", "ms per token (median tg)", "µs per launch",
		fmt.Sprintf("top %d kernels (launches per token)", harness.TopKernels)}, rows))
	for _, r := range failed {
		tail := r.Launches.StderrTail
		if tail == "" {
			tail = "(no stderr)"
		}
		fmt.Fprintf(&b, "- %s: the census run failed (the row's speed numbers above stand): %s; stderr tail:\n\n```\n%s\n```\n\n", r.Row.Name(), r.Launches.Error, tail)
	}
	return b.String()
}

// kvCell is the mean KV-cache read of a decode step and its size next to
// the weights'.
func kvCell(r harness.PerfResult, tgN int) string {
	kv := float64(r.Weights.KVReadPerToken(r.KVFormat, r.Row.Depth, tgN))
	if math.IsNaN(kv) || r.Weights.PerToken <= 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", thousands(kv, 0), Pct(kv/float64(r.Weights.PerToken)))
}

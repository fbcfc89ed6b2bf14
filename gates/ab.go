package gates

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
	"github.com/minfer-go/minfer/harness/stats"
	"github.com/minfer-go/minfer/schema"
)

// ArmRun is one arm's timed bench in one round: wall-time tok/s, and
// device-time tok/s where the backend timed its splits (0: none).
type ArmRun struct {
	PP       float64             `json:"pp_tok_s"`
	TG       float64             `json:"tg_tok_s"`
	PPDev    float64             `json:"pp_device_tok_s,omitempty"`
	TGDev    float64             `json:"tg_device_tok_s,omitempty"`
	PPSamp   []float64           `json:"pp_samples_tok_s"`
	TGSamp   []float64           `json:"tg_samples_tok_s"`
	Warmup   harness.BenchWarmup `json:"warmup"`
	Backend  string              `json:"backend"`
	KVFormat string              `json:"kv_format"`
	Wall     time.Duration       `json:"wall_ns"`
	// Mem is the process's device memory, sampled from outside it (nil:
	// not sampled); EngineMem the engine's own device_memory field of its
	// bench JSON (raw, "" without one), the cross-check.
	Mem       *gpumem.Usage `json:"device_memory,omitempty"`
	EngineMem string        `json:"engine_device_memory,omitempty"`
}

// value is the arm's tok/s of a metric ("pp", "tg") on a timing basis.
func (r ArmRun) value(key, basis string) float64 {
	switch {
	case key == "pp" && basis == BasisDevice:
		return r.PPDev
	case key == "pp":
		return r.PP
	case basis == BasisDevice:
		return r.TGDev
	}
	return r.TG
}

// Timing bases of gate 3's metrics.
const (
	BasisWall   = "wall"
	BasisDevice = "device"
)

// Round is one matched pair.
type Round struct {
	I      int             `json:"i"`
	Order  string          `json:"order"`
	Clocks *harness.Clocks `json:"clocks,omitempty"`
	Clock  string          `json:"clock"` // the reading, or why there is none
	A      ArmRun          `json:"a"`
	B      ArmRun          `json:"b"`
	// Marked: another process was on the GPU during the round (its arms'
	// sampling saw it, before, during or after); the speed verdict cannot
	// rest on a marked round.
	Marked     string         `json:"marked,omitempty"`
	Neighbours []gpumem.Other `json:"neighbours,omitempty"`
}

// Metric is the verdict on one metric (pp or tg) on one timing basis.
type Metric struct {
	Name      string                `json:"name"` // pp512, tg128
	Key       string                `json:"key"`  // pp, tg
	Basis     string                `json:"basis"`
	A         []float64             `json:"a"`
	B         []float64             `json:"b"`
	Ratios    []float64             `json:"ratios"`
	Median    harness.Num           `json:"median"`
	CILo      harness.Num           `json:"ci_lo"`
	CIHi      harness.Num           `json:"ci_hi"`
	CIConf    harness.Num           `json:"ci_conf"`
	BootLo    harness.Num           `json:"boot_lo"`
	BootHi    harness.Num           `json:"boot_hi"`
	WilcoxonP harness.Num           `json:"wilcoxon_p_two_sided"`
	NotSlower stats.NotSlowerResult `json:"not_slower"`
	Claim     stats.ClaimResult     `json:"claim"`
	SEP       bool                  `json:"sep"`
	Outliers  []int                 `json:"outliers"` // MAD flags on the ratios, reported, not dropped
	SummaryA  stats.Describe        `json:"summary_a"`
	SummaryB  stats.Describe        `json:"summary_b"`
	Power     *MetricPower          `json:"power,omitempty"`
}

// MetricPower is what the not-slower check of one metric could detect.
type MetricPower struct {
	// SD is the per-round log-ratio sd the power is computed at: the
	// calibration's when there is one and this run was not noisier than
	// it, else this run's own.
	SD     harness.Num `json:"sd"`
	Source string      `json:"source"`
	// SDRun is this run's own log-ratio sd.
	SDRun  harness.Num `json:"sd_run"`
	Rounds int         `json:"rounds"`
	// Power is the probability of refusing a slowdown of twice the bar
	// with these rounds; MinDetectable the slowdown refused with
	// stats.TargetPower.
	Power         harness.Num `json:"power"`
	Slowdown      harness.Num `json:"slowdown"` // twice the bar
	MinDetectable harness.Num `json:"min_detectable"`
	// NoisierP: the one-sided p that this run is noisier than its
	// calibration (chi-square of the variance ratio); NaN without one.
	NoisierP harness.Num `json:"noisier_p"`
	// Noisy: the run was noisier than its calibration (NoisierP below
	// NoisierAlpha), so SD is the run's own. Underpowered (at SD) makes the
	// gate INCONCLUSIVE.
	Underpowered bool `json:"underpowered"`
	Noisy        bool `json:"noisy"`
}

// NoisierAlpha is the level at which a run counts as noisier than its
// calibration (its power would then be overstated).
const NoisierAlpha = 0.01

// WarmupRun is one untimed process before round 1.
type WarmupRun struct {
	Arm         string `json:"arm"`
	Model       string `json:"model"`
	ModelSHA256 string `json:"model_sha256"`
	Backend     string `json:"backend"`
	GoVersion   string `json:"go_version"`
	// KernelSources and Kernels as the arm's bench document states them
	// (issue 25: which kernels ran).
	KernelSources string              `json:"kernel_sources_sha256,omitempty"`
	Kernels       *schema.Kernels     `json:"kernels,omitempty"`
	Warmup        harness.BenchWarmup `json:"warmup"`
	Wall          time.Duration       `json:"wall_ns"`
	Mem           *gpumem.Usage       `json:"device_memory,omitempty"`
}

// ABDetail is gate 3's evidence.
type ABDetail struct {
	Rounds  []Round     `json:"rounds"`
	Planned int         `json:"planned"`
	Warmup  []WarmupRun `json:"warmup"`
	// Metrics are the deciding metrics (pp, tg), each on its basis; Wall
	// holds the wall-time view of a metric decided on device time.
	Metrics []Metric `json:"metrics"`
	Wall    []Metric `json:"wall,omitempty"`
	PP, TG  int      `json:"-"`
	// Decode is the bandwidth view of the tg medians (issue 6: every decode
	// number states its GB/s and its share of the HBM floor).
	Decode  *ABDecode   `json:"decode,omitempty"`
	CensusA ArmEvidence `json:"census_a"`
	CensusB ArmEvidence `json:"census_b"`
	// Memory is each arm's peak device memory against the lever's memory
	// bar; Marked the rounds during which another process used the GPU.
	Memory *MemoryCheck `json:"memory,omitempty"`
	Marked []int        `json:"marked_rounds,omitempty"`
	// Failed is the round whose arm process failed (kept out of the
	// statistics; its device memory counts in the memory check).
	Failed *Round `json:"failed_round,omitempty"`
}

// ABDecode is the weight bytes a decode step reads (from `minfer info
// --json` of the A/B model) and what the arms' median tg rates make of them.
type ABDecode struct {
	BytesPerToken int64          `json:"bytes_per_token"`
	Method        string         `json:"method,omitempty"`
	A             harness.Decode `json:"a"`
	B             harness.Decode `json:"b"`
	// KVRead is, at depth, the mean KV-cache bytes a tg step also reads
	// (harness.WeightBytes.KVReadPerToken; not in the GB/s, whose floor is
	// the weights'): at 32K it can exceed the weights.
	KVRead harness.Num `json:"kv_read_per_token,omitempty"`
	// Why says why there are no numbers (minfer info failed, no tg medians).
	Why string `json:"why,omitempty"`
}

// abDecode computes the decode bandwidth of both arms' median tg rates
// (wall time: what a user sees).
func abDecode(ctx context.Context, cfg Config, env *Env, d *ABDetail) *ABDecode {
	var ma, mb float64
	for _, m := range append(append([]Metric{}, d.Metrics...), d.Wall...) {
		if m.Key == "tg" && m.Basis == BasisWall {
			ma, mb = m.SummaryA.Median, m.SummaryB.Median
		}
	}
	if !(ma > 0) || !(mb > 0) {
		return &ABDecode{Why: "no tg medians"}
	}
	info, e, err := env.M.Info(ctx)
	env.Cmd("ab: decode bytes per token", e)
	if err != nil {
		return &ABDecode{Why: "minfer info: " + err.Error()}
	}
	w, err := harness.WeightBytesFromInfo(info)
	if err != nil {
		return &ABDecode{Why: err.Error()}
	}
	dec := &ABDecode{BytesPerToken: w.PerToken, Method: w.Method,
		A: harness.DecodeBandwidth(w.PerToken, ma), B: harness.DecodeBandwidth(w.PerToken, mb)}
	if cfg.Depth > 0 && len(d.Rounds) > 0 {
		dec.KVRead = w.KVReadPerToken(d.Rounds[0].A.KVFormat, cfg.Depth, cfg.TG)
	}
	return dec
}

// AB is gate 3: warmup, the pre-registered interleaved rounds, paired sign
// tests, power.
func AB(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateAB, Defends: Defends(GateAB)}
	d := &ABDetail{Planned: cfg.Rounds, PP: cfg.PP, TG: cfg.TG, CensusA: ArmEvidence{Arm: cfg.A}, CensusB: ArmEvidence{Arm: cfg.B}}
	res.AB = d
	err := abRounds(ctx, cfg, env, d, func() { env.publish(res) })
	if err != nil && !canceled(ctx) {
		res.Status, res.Reason = Fail, err.Error()
		finishAB(&res, cfg)
		res.Status, res.Reason = Fail, err.Error()
		if armSetup(&res, cfg, failedArm(err), err) && res.CannotRun {
			return res // the baseline does not fit: no memory bar to judge
		}
		if d.Memory != nil && d.Memory.Status != MemNotMeasured {
			res.Reason += " [" + d.Memory.Line() + "]" // an out-of-memory in B where A fits
		}
		return res
	}
	finishAB(&res, cfg)
	if canceled(ctx) {
		res.Status, res.Reason = Skip, fmt.Sprintf("interrupted after %d of %d rounds", len(d.Rounds), cfg.Rounds)
		return res
	}
	d.Decode = abDecode(ctx, cfg, env, d)
	gateLiveness(&res, cfg, d.CensusA, d.CensusB)
	return res
}

// abRounds runs the untimed warmup of each arm and then cfg.Rounds rounds
// in AB, BA, AB, ... order, one bench process per arm and round, every
// process with the launch census (evidence) and the arm's settings. It
// stops at the first error (a failed arm) or when ctx ends; after each
// round it calls published.
func abRounds(ctx context.Context, cfg Config, env *Env, d *ABDetail, published func()) error {
	warm := map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(cfg.WarmupMS)}
	timed := map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(cfg.BenchWarm)}
	// Untimed warmup: one process per arm with the full warmup budget, so the
	// first timed round is never the first run (page cache, clocks).
	for _, arm := range []Arm{cfg.A, cfg.B} {
		b, e, err := benchMinfer(env.M, cfg, arm).Bench(ctx, "warmup "+arm.Name, armEnv(arm, warm), cfg.PP, cfg.TG, 1)
		env.Cmd("ab: warmup arm "+arm.Name, e)
		if err != nil {
			return &armFailure{arm.Name, fmt.Errorf("warmup of arm %s failed: %w", arm.Name, err)}
		}
		d.Warmup = append(d.Warmup, WarmupRun{Arm: arm.Name, Model: b.Model, ModelSHA256: b.ModelSHA256, Backend: b.Backend,
			GoVersion: b.GoVersion, KernelSources: b.KernelSources, Kernels: b.Kernels, Warmup: b.Warmup, Wall: e.Wall, Mem: e.DeviceMemory})
		env.step("ab warmup %s (%d in-process iterations, %.0f ms)", arm.Name, b.Warmup.Iterations, b.Warmup.ElapsedMS)
	}
	for i := 0; i < cfg.Rounds; i++ {
		if canceled(ctx) {
			return ctx.Err()
		}
		r := Round{I: i + 1, Order: harness.Order(i)}
		if env.HasGPU {
			c, err := env.Probe.ReadClocks(ctx)
			if err != nil {
				r.Clock = "nvidia-smi failed: " + err.Error()
			} else {
				r.Clocks, r.Clock = c, c.String()
			}
		} else {
			r.Clock = "n/a (no GPU)"
		}
		for _, slot := range r.Order {
			arm, dst, ev := cfg.A, &r.A, &d.CensusA
			if slot == 'B' {
				arm, dst, ev = cfg.B, &r.B, &d.CensusB
			}
			label := fmt.Sprintf("round %d %s", i+1, arm.Name)
			b, e, err := benchMinfer(env.M, cfg, arm).Bench(ctx, label, armEnv(arm, timed), cfg.PP, cfg.TG, cfg.Reps)
			env.Cmd("ab: timed round, arm "+arm.Name, e)
			ev.Add(label, e)
			if e != nil {
				dst.Mem = e.DeviceMemory // kept for a failed arm too: an out-of-memory's evidence
			}
			if err != nil {
				fr := r
				d.Failed = &fr // its memory is the evidence of an out-of-memory
				if canceled(ctx) {
					return ctx.Err()
				}
				return &armFailure{arm.Name, fmt.Errorf("round %d arm %s failed: %w", i+1, arm.Name, err)}
			}
			pp, ok1 := b.Test("pp")
			tg, ok2 := b.Test("tg")
			if !ok1 || !ok2 {
				return fmt.Errorf("round %d arm %s: bench JSON lacks the pp or tg test", i+1, arm.Name)
			}
			// A minfer that ignored -d would time depth 0 under the run's name.
			if wantPP, wantTG := cfg.TestNames(); cfg.Depth > 0 && (pp.Name != wantPP || tg.Name != wantTG) {
				return fmt.Errorf("round %d arm %s: bench ran %s and %s, want %s and %s: this minfer does not take bench -d", i+1, arm.Name, pp.Name, tg.Name, wantPP, wantTG)
			}
			*dst = ArmRun{PP: pp.Value(), TG: tg.Value(), PPSamp: pp.TokS, TGSamp: tg.TokS, Warmup: b.Warmup,
				Backend: b.Backend, KVFormat: b.KVFormat, Wall: e.Wall, Mem: e.DeviceMemory, EngineMem: engineMemory(e.Stdout)}
			dst.PPDev, _ = pp.DeviceValue()
			dst.TGDev, _ = tg.DeviceValue()
		}
		d.Rounds = append(d.Rounds, r)
		env.step("ab round %d/%d %s: pp %.4g, tg %.4g", i+1, cfg.Rounds, r.Order, r.B.PP/r.A.PP, r.B.TG/r.A.TG)
		if published != nil {
			published()
		}
	}
	return nil
}

// basisOf is the timing basis a metric is decided on: device time when
// every round of both arms has it and the lever moves no host work (whose
// cost device time would not see), else wall time.
func basisOf(cfg Config, rounds []Round, key string) string {
	if cfg.Lever.HostWork || len(rounds) == 0 {
		return BasisWall
	}
	for _, r := range rounds {
		if !(r.A.value(key, BasisDevice) > 0) || !(r.B.value(key, BasisDevice) > 0) {
			return BasisWall
		}
	}
	return BasisDevice
}

// metricOf computes one metric's statistics on a basis.
func metricOf(cfg Config, rounds []Round, key, basis string) (Metric, error) {
	ppName, tgName := cfg.TestNames()
	m := Metric{Key: key, Basis: basis, Name: ppName}
	bar := cfg.BarPP
	if key == "tg" {
		m.Name, bar = tgName, cfg.BarTG
	}
	for _, r := range rounds {
		m.A, m.B = append(m.A, r.A.value(key, basis)), append(m.B, r.B.value(key, basis))
	}
	ratios, err := stats.Ratios(m.A, m.B)
	if err != nil {
		return m, err
	}
	m.Ratios = ratios
	m.Claim = stats.ImprovementClaim(ratios, cfg.ClaimBar)
	m.Median = harness.Num(m.Claim.Median)
	lo, hi, conf := stats.MedianCI(ratios, 0.95)
	m.CILo, m.CIHi, m.CIConf = harness.Num(lo), harness.Num(hi), harness.Num(conf)
	blo, bhi := stats.BootstrapMedianCI(ratios, 10000, 0.95, 1)
	m.BootLo, m.BootHi = harness.Num(blo), harness.Num(bhi)
	logs := make([]float64, len(ratios))
	for i, r := range ratios {
		logs[i] = math.Log(r)
	}
	_, _, p2 := stats.WilcoxonSignedRank(logs)
	m.WilcoxonP = harness.Num(p2)
	m.NotSlower = stats.NotSlower(ratios, bar)
	m.SEP = stats.Separated(m.A, m.B)
	m.Outliers = stats.MADOutliers(ratios, 3.5)
	m.SummaryA, m.SummaryB = stats.Summary(m.A), stats.Summary(m.B)
	m.Power = metricPower(cfg, key, basis, bar, ratios)
	return m, nil
}

// metricPower states the power of a metric's not-slower check: at the
// calibrated sd of its key and basis when the run has a calibration (and
// whether this run was noisier than it), else at this run's own sd.
func metricPower(cfg Config, key, basis string, bar float64, ratios []float64) *MetricPower {
	n := len(ratios)
	p := &MetricPower{SDRun: harness.Num(stats.LogSD(ratios)), Rounds: n, Slowdown: harness.Num(stats.TwiceBar(bar)), NoisierP: harness.Num(math.NaN())}
	sd, src := float64(p.SDRun), "this run's own rounds (no calibration of this workload on this machine)"
	if cal := cfg.Power; cal != nil {
		if c, ok := cal.SD[key+"_"+basis]; ok && c > 0 {
			sd, src = c, fmt.Sprintf("the calibration %s (%s, %d A/A rounds)", cal.File, cal.Date, cal.Rounds)
			p.NoisierP = harness.Num(stats.NoisierThan(float64(p.SDRun), n, c))
			p.Noisy = float64(p.NoisierP) < NoisierAlpha
			if p.Noisy {
				// The calibration understates this run's noise: its power
				// is judged at the run's own, larger sd instead.
				sd, src = float64(p.SDRun), fmt.Sprintf("this run's own rounds: noisier than the calibration %s (sd %.4f, p %.2g)", cal.File, c, float64(p.NoisierP))
			}
		} else {
			src = fmt.Sprintf("this run's own rounds (the calibration %s has no %s %s sd)", cal.File, basis, key)
		}
	}
	p.SD, p.Source = harness.Num(sd), src
	p.Power = harness.Num(stats.NotSlowerPower(n, sd, bar, stats.TwiceBar(bar)))
	p.MinDetectable = harness.Num(stats.MinDetectableSlowdown(n, sd, bar, stats.TargetPower))
	p.Underpowered = !(float64(p.Power) >= stats.TargetPower)
	return p
}

// finishAB computes the per-metric statistics and the verdict from the
// rounds done so far: FAIL when the not-slower check refuses (a refusal
// stands at any noise: the sign test's false-positive rate does not depend
// on it), INCONCLUSIVE when a metric is underpowered (at its calibration's
// sd, or at the run's own where the run was noisier), else PASS.
func finishAB(res *Result, cfg Config) {
	d := res.AB
	d.Metrics, d.Wall = nil, nil
	d.Memory = memoryCheck(cfg, d)
	d.Marked = nil
	for i := range d.Rounds {
		if markRound(cfg, &d.Rounds[i]) {
			d.Marked = append(d.Marked, d.Rounds[i].I)
		}
	}
	if len(d.Rounds) == 0 {
		res.Status, res.Reason = Fail, "no rounds completed"
		return
	}
	var refused, claims, weak, notes []string
	for _, key := range []string{"pp", "tg"} {
		basis := basisOf(cfg, d.Rounds, key)
		m, err := metricOf(cfg, d.Rounds, key, basis)
		if err != nil {
			notes = append(notes, m.Name+": "+err.Error())
			refused = append(refused, m.Name)
			d.Metrics = append(d.Metrics, m)
			continue
		}
		if basis == BasisDevice {
			if w, err := metricOf(cfg, d.Rounds, key, BasisWall); err == nil {
				d.Wall = append(d.Wall, w)
			}
		}
		if !m.NotSlower.Pass {
			refused = append(refused, fmt.Sprintf("%s (%s time: %s)", m.Name, basis, m.NotSlower.Reason))
		}
		if m.Claim.Claim {
			claims = append(claims, fmt.Sprintf("%s %+.1f%% [%+.1f%%, %+.1f%%] (%s time, sign-test p %.3g)", m.Name, (m.Claim.Median-1)*100,
				(float64(m.CILo)-1)*100, (float64(m.CIHi)-1)*100, basis, m.Claim.P))
		}
		if pw := m.Power; pw.Underpowered {
			weak = append(weak, fmt.Sprintf("%s could refuse only a slowdown of %s or more with probability %.1f (power %.2f at x%.3f, sd %.4f from %s, %d rounds)",
				m.Name, pct(float64(pw.MinDetectable)), stats.TargetPower, float64(pw.Power), float64(pw.Slowdown), float64(pw.SD), pw.Source, pw.Rounds))
		}
		d.Metrics = append(d.Metrics, m)
	}
	var ev []string
	for _, m := range d.Metrics {
		if len(m.Ratios) == 0 {
			continue
		}
		sep := ""
		if m.SEP {
			sep = ", SEP"
		}
		ev = append(ev, fmt.Sprintf("%s (%s) B/A median %.4f [%.4f, %.4f], slower %d/%d (refuse at %d)%s, power %.2f",
			m.Name, m.Basis, float64(m.Median), float64(m.CILo), float64(m.CIHi), m.NotSlower.Slower, m.NotSlower.N, m.NotSlower.RefuseAt, sep, float64(m.Power.Power)))
	}
	if d.Memory.Status != MemNotMeasured {
		ev = append(ev, d.Memory.Line())
	}
	if len(d.Marked) > 0 {
		ev = append(ev, fmt.Sprintf("marked rounds %v", d.Marked))
	}
	res.Evidence = strings.Join(ev, "; ")
	claim := "no improvement claimed"
	if len(claims) > 0 {
		claim = "improvement claimed: " + strings.Join(claims, ", ")
	}
	switch {
	case len(refused) > 0:
		res.Status = Fail
		res.Reason = "not-slower check refused: " + strings.Join(refused, "; ") + strings.Join(notes, "; ")
	case len(d.Rounds) < d.Planned:
		res.Status = Inconclusive
		res.Reason = fmt.Sprintf("incomplete: %d of %d rounds", len(d.Rounds), d.Planned)
	case len(weak) > 0:
		res.Status = Inconclusive
		res.Reason = "underpowered: " + strings.Join(weak, "; ") + "; " + claim
	default:
		res.Status = Pass
		res.Reason = "not slower on pp and tg (power >= 0.8 at twice the bar); " + claim
	}
	// Another process on the GPU during a round: the speed verdict, a pass
	// or a refusal, cannot rest on it (a neighbour's job is not the
	// lever's doing).
	if len(d.Marked) > 0 && res.Status != Inconclusive {
		first := d.Rounds[0].Marked
		for _, r := range d.Rounds {
			if r.Marked != "" {
				first = fmt.Sprintf("round %d: %s", r.I, r.Marked)
				break
			}
		}
		res.Reason = fmt.Sprintf("%d of %d rounds marked (%s), so the speed verdict cannot rest on them; without the marks: %s: %s",
			len(d.Marked), len(d.Rounds), first, res.Status, res.Reason)
		res.Status = Inconclusive
	} else if len(d.Marked) > 0 {
		res.Reason += fmt.Sprintf("; %d of %d rounds marked: another process on the GPU", len(d.Marked), len(d.Rounds))
	}
	// Memory is measured per process, a neighbour does not move it: over
	// the bar is a FAIL with its evidence whatever the speed said.
	if d.Memory.Status == MemOver {
		res.Reason = fmt.Sprintf("memory over the bar: arm B's peak device memory %s is above %s (%s at arm A's %s); speed: %s: %s",
			gpumem.GiB(d.Memory.B.PeakBytes), d.Memory.Bar.String(), gpumem.GiB(d.Memory.LimitBytes), gpumem.GiB(d.Memory.A.PeakBytes), res.Status, res.Reason)
		res.Status = Fail
	}
}

// pct renders a slowdown factor as a percentage ("3.0%", "inf").
func pct(s float64) string {
	if math.IsInf(s, 1) || math.IsNaN(s) {
		return "any (no count of these rounds can refuse)"
	}
	return fmt.Sprintf("%.1f%%", (s-1)*100)
}

package gates

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
)

// ArmRun is one arm's timed bench in one round.
type ArmRun struct {
	PP       float64             `json:"pp_tok_s"`
	TG       float64             `json:"tg_tok_s"`
	PPSamp   []float64           `json:"pp_samples_tok_s"`
	TGSamp   []float64           `json:"tg_samples_tok_s"`
	Warmup   harness.BenchWarmup `json:"warmup"`
	Backend  string              `json:"backend"`
	KVFormat string              `json:"kv_format"`
	Wall     time.Duration       `json:"wall_ns"`
}

// Round is one matched pair.
type Round struct {
	I      int             `json:"i"`
	Order  string          `json:"order"`
	Clocks *harness.Clocks `json:"clocks,omitempty"`
	Clock  string          `json:"clock"` // the reading, or why there is none
	A      ArmRun          `json:"a"`
	B      ArmRun          `json:"b"`
}

// Metric is the verdict on one metric (pp or tg).
type Metric struct {
	Name      string                `json:"name"` // pp512, tg128
	Key       string                `json:"key"`  // pp, tg
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
}

// WarmupRun is one untimed process before round 1.
type WarmupRun struct {
	Arm         string              `json:"arm"`
	Model       string              `json:"model"`
	ModelSHA256 string              `json:"model_sha256"`
	Backend     string              `json:"backend"`
	GoVersion   string              `json:"go_version"`
	Warmup      harness.BenchWarmup `json:"warmup"`
	Wall        time.Duration       `json:"wall_ns"`
}

// ABDetail is gate 3's evidence.
type ABDetail struct {
	Rounds  []Round     `json:"rounds"`
	Planned int         `json:"planned"`
	Warmup  []WarmupRun `json:"warmup"`
	Metrics []Metric    `json:"metrics"`
	PP, TG  int         `json:"-"`
	// Decode is the bandwidth view of the tg medians (issue 6: every decode
	// number states its GB/s and its share of the HBM floor).
	Decode *ABDecode `json:"decode,omitempty"`
}

// ABDecode is the weight bytes a decode step reads (from `minfer info
// --json` of the A/B model) and what the arms' median tg rates make of them.
type ABDecode struct {
	BytesPerToken int64          `json:"bytes_per_token"`
	Method        string         `json:"method,omitempty"`
	A             harness.Decode `json:"a"`
	B             harness.Decode `json:"b"`
	// Why says why there are no numbers (minfer info failed, no tg medians).
	Why string `json:"why,omitempty"`
}

// abDecode computes the decode bandwidth of both arms' median tg rates.
func abDecode(ctx context.Context, env *Env, d *ABDetail) *ABDecode {
	var ma, mb float64
	for _, m := range d.Metrics {
		if m.Key == "tg" {
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
	return &ABDecode{BytesPerToken: w.PerToken, Method: w.Method,
		A: harness.DecodeBandwidth(w.PerToken, ma), B: harness.DecodeBandwidth(w.PerToken, mb)}
}

// AB is gate 3: warmup, PAIRS interleaved rounds, paired sign tests.
func AB(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateAB, Defends: Defends(GateAB)}
	d := &ABDetail{Planned: cfg.Rounds, PP: cfg.PP, TG: cfg.TG}
	res.AB = d
	fail := func(why string) Result {
		res.Status, res.Reason = Fail, why
		finishAB(&res, cfg)
		if res.Status != Fail {
			res.Status = Fail
		}
		res.Reason = why
		return res
	}
	warm := map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(cfg.WarmupMS)}
	timed := map[string]string{"MINFER_BENCH_WARMUP_MS": strconv.Itoa(cfg.BenchWarm)}
	with := func(arm Arm, extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range arm.Env {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	// Untimed warmup: one process per arm with the full warmup budget, so the
	// first timed round is never the first run (page cache, clocks).
	for _, arm := range []Arm{cfg.A, cfg.B} {
		b, e, err := env.M.Bench(ctx, "warmup "+arm.Name, with(arm, warm), cfg.PP, cfg.TG, 1)
		env.Cmd("ab: warmup arm "+arm.Name, e)
		if err != nil {
			return fail("warmup of arm " + arm.Name + " failed: " + err.Error())
		}
		d.Warmup = append(d.Warmup, WarmupRun{Arm: arm.Name, Model: b.Model, ModelSHA256: b.ModelSHA256, Backend: b.Backend,
			GoVersion: b.GoVersion, Warmup: b.Warmup, Wall: e.Wall})
		env.step("ab warmup %s (%d in-process iterations, %.0f ms)", arm.Name, b.Warmup.Iterations, b.Warmup.ElapsedMS)
	}
	for i := 0; i < cfg.Rounds; i++ {
		if canceled(ctx) {
			return fail(fmt.Sprintf("interrupted after %d of %d rounds", len(d.Rounds), cfg.Rounds))
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
			arm := cfg.A
			dst := &r.A
			if slot == 'B' {
				arm, dst = cfg.B, &r.B
			}
			b, e, err := env.M.Bench(ctx, fmt.Sprintf("round %d %s", i+1, arm.Name), with(arm, timed), cfg.PP, cfg.TG, cfg.Reps)
			env.Cmd("ab: timed round, arm "+arm.Name, e)
			if err != nil {
				return fail(fmt.Sprintf("round %d arm %s failed: %v", i+1, arm.Name, err))
			}
			pp, ok1 := b.Test("pp")
			tg, ok2 := b.Test("tg")
			if !ok1 || !ok2 {
				return fail(fmt.Sprintf("round %d arm %s: bench JSON lacks the pp or tg test", i+1, arm.Name))
			}
			*dst = ArmRun{PP: pp.Value(), TG: tg.Value(), PPSamp: pp.TokS, TGSamp: tg.TokS, Warmup: b.Warmup,
				Backend: b.Backend, KVFormat: b.KVFormat, Wall: e.Wall}
		}
		d.Rounds = append(d.Rounds, r)
		env.step("ab round %d/%d %s: pp %.4g, tg %.4g", i+1, cfg.Rounds, r.Order, r.B.PP/r.A.PP, r.B.TG/r.A.TG)
		env.publish(res)
	}
	finishAB(&res, cfg)
	d.Decode = abDecode(ctx, env, d)
	return res
}

// finishAB computes the per-metric statistics and the verdict from the
// rounds done so far.
func finishAB(res *Result, cfg Config) {
	d := res.AB
	d.Metrics = nil
	if len(d.Rounds) == 0 {
		res.Status, res.Reason = Fail, "no rounds completed"
		return
	}
	var refused, claims, notes []string
	for _, key := range []string{"pp", "tg"} {
		m := Metric{Key: key, Name: fmt.Sprintf("pp%d", cfg.PP)}
		bar := cfg.BarPP
		if key == "tg" {
			m.Name, bar = fmt.Sprintf("tg%d", cfg.TG), cfg.BarTG
		}
		for _, r := range d.Rounds {
			a, b := r.A.PP, r.B.PP
			if key == "tg" {
				a, b = r.A.TG, r.B.TG
			}
			m.A, m.B = append(m.A, a), append(m.B, b)
		}
		ratios, err := stats.Ratios(m.A, m.B)
		if err != nil {
			notes = append(notes, m.Name+": "+err.Error())
			refused = append(refused, m.Name)
			d.Metrics = append(d.Metrics, m)
			continue
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
		if !m.NotSlower.Pass {
			refused = append(refused, fmt.Sprintf("%s (%s)", m.Name, m.NotSlower.Reason))
		}
		if m.Claim.Claim {
			claims = append(claims, fmt.Sprintf("%s %+.1f%%", m.Name, (m.Claim.Median-1)*100))
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
		ev = append(ev, fmt.Sprintf("%s B/A median %.4f [%.4f, %.4f], slower %d/%d (refuse at %d)%s",
			m.Name, float64(m.Median), float64(m.CILo), float64(m.CIHi), m.NotSlower.Slower, m.NotSlower.N, m.NotSlower.RefuseAt, sep))
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
		res.Status = Fail
		res.Reason = fmt.Sprintf("incomplete: %d of %d rounds", len(d.Rounds), d.Planned)
	default:
		res.Status = Pass
		res.Reason = "not slower on pp and tg; " + claim
	}
}

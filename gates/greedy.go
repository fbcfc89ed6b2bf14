package gates

import (
	"context"
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/harness"
)

// Divergence is the first step where A's and B's greedy ids differ, with the
// logits there (recomputed by `minfer logits` over the common prefix).
type Divergence struct {
	Step    int                `json:"step"`
	TokA    int32              `json:"tok_a"`
	TokB    int32              `json:"tok_b"`
	TopA    []harness.TopLogit `json:"top_a"`
	TopB    []harness.TopLogit `json:"top_b"`
	MarginA float64            `json:"margin_a"`
	MarginB float64            `json:"margin_b"`
	// Measured: both arms' logits at the step were recomputed (the margins
	// are known); a divergence whose margins are unknown is never allowed.
	Measured bool   `json:"measured"`
	Allowed  bool   `json:"allowed"` // A's top-2 margin at or below the declared margin bar
	Note     string `json:"note,omitempty"`
}

// GreedyPrompt is one prompt's outcome.
type GreedyPrompt struct {
	Name      string      `json:"name"`
	NPrompt   int         `json:"n_prompt"`
	IDsA      []int32     `json:"ids_a"`
	IDsB      []int32     `json:"ids_b"`
	Identical bool        `json:"identical"`
	Div       *Divergence `json:"divergence,omitempty"`
	DecodeMSA float64     `json:"decode_ms_a"`
	DecodeMSB float64     `json:"decode_ms_b"`
}

// GreedyDetail is gate 2's evidence.
type GreedyDetail struct {
	N         int            `json:"n"`
	MarginBar float64        `json:"margin_bar"`
	Prompts   []GreedyPrompt `json:"prompts"`
	Repeat    int            `json:"repeat,omitempty"` // generations per process (identical, the last kept)
	CensusA   ArmEvidence    `json:"census_a"`
	CensusB   ArmEvidence    `json:"census_b"`
}

// greedyPrompts is the prompt set of a run: the configured prompts and,
// for a lever whose path runs only in a forward of 2..8 tokens (which no
// text prompt of the set is), one prompt of that many token ids.
func greedyPrompts(cfg Config) []harness.Prompt {
	ps := cfg.Prompts
	r := cfg.Lever.Rule(cfg.Backend)
	if r == nil || r.Needs.MaxNT < 2 || r.Needs.MaxNT > 8 {
		return ps
	}
	n := min(max(5, r.Needs.MinNT), r.Needs.MaxNT)
	// Ids below 256: every vocabulary (the synthetic byte-level one too)
	// has them.
	return append(append([]harness.Prompt(nil), ps...), harness.Prompt{Name: fmt.Sprintf("ids-%d", n), IDs: harness.DeterministicIDs(n, 256, 5)})
}

// Greedy is gate 2.
func Greedy(ctx context.Context, cfg Config, env *Env) Result {
	cfg = forGate(cfg, GateGreedy) // a path routed by depth runs from the first KV cell here
	res := Result{Gate: GateGreedy, Defends: Defends(GateGreedy)}
	tol := greedyTol(cfg)
	d := &GreedyDetail{N: cfg.GenN, MarginBar: tol.MarginBar, CensusA: ArmEvidence{Arm: cfg.A}, CensusB: ArmEvidence{Arm: cfg.B}}
	res.Greedy = d
	m := correctness(cfg, env)
	m.Ctx = cfg.GenCtx // the long prompt plus the generated tokens must fit
	m.Repeat = repeats(cfg)
	d.Repeat = m.Repeat
	stop := func(why string) Result {
		res.Status, res.Reason = Fail, why
		if canceled(ctx) {
			res.Status, res.Reason = Skip, "interrupted: "+why
		}
		return res
	}
	for _, p := range greedyPrompts(cfg) {
		if canceled(ctx) {
			return stop("before prompt " + p.Name)
		}
		ga, e, err := armMinfer(m, cfg.A).Generate(ctx, "greedy A "+p.Name, armEnv(cfg.A, nil), p, cfg.GenN)
		env.Cmd("greedy: arm A", e)
		d.CensusA.Add("greedy A "+p.Name, e)
		if err != nil {
			if !canceled(ctx) && armSetup(&res, cfg, cfg.A.Name, err) {
				return res
			}
			return stop("arm A could not run: " + err.Error())
		}
		gb, e, err := armMinfer(m, cfg.B).Generate(ctx, "greedy B "+p.Name, armEnv(cfg.B, nil), p, cfg.GenN)
		env.Cmd("greedy: arm B", e)
		d.CensusB.Add("greedy B "+p.Name, e)
		if err != nil {
			if !canceled(ctx) && armSetup(&res, cfg, cfg.B.Name, err) {
				return res
			}
			return stop("arm B could not run: " + err.Error())
		}
		env.step("greedy %s (%d prompt tokens)", p.Name, ga.NPrompt)
		gp := GreedyPrompt{Name: p.Name, NPrompt: ga.NPrompt, IDsA: ga.IDs, IDsB: gb.IDs, DecodeMSA: ga.DecodeMS, DecodeMSB: gb.DecodeMS}
		step := firstDiff(ga.IDs, gb.IDs)
		gp.Identical = step < 0
		if !gp.Identical {
			gp.Div = divergence(ctx, cfg, env, ga, gb, step)
		}
		d.Prompts = append(d.Prompts, gp)
	}
	res.Status, res.Reason, res.Evidence = judgeGreedy(tol, d)
	gateLiveness(&res, cfg, d.CensusA, d.CensusB)
	return res
}

// divergenceAllowed: a greedy divergence is allowed only under a declared
// class with a margin clause ("top-2 margin > M where compared"), at a step
// whose top-2 margin (A's, as in the A-vs-B parity rows) is at or below M —
// the same M that exempts a position from the top-1 check there. Bitwise
// (no class) allows none.
func divergenceAllowed(tol harness.Tolerance, marginA float64) bool {
	return !tol.Bitwise && tol.MarginBar > 0 && marginA <= tol.MarginBar
}

// greedyTol is the class gate 2 judges by: the lever's, or bitwise for a
// lever that declares its greedy output exact (MINFER_DRAFT: speculative
// decoding emits the target's own tokens, so any divergence is a defect,
// whatever class its verify-forward logits are in).
func greedyTol(cfg Config) harness.Tolerance {
	if cfg.Lever.ExactGreedy {
		t, _ := harness.ParseTolerance("")
		return t
	}
	return cfg.Tol
}

// judgeGreedy decides gate 2 from the prompts' outcomes: it sets each
// divergence's Allowed from its measured margin and the declared class.
func judgeGreedy(tol harness.Tolerance, d *GreedyDetail) (Status, string, string) {
	var bad, allowed []string
	same := 0
	for i := range d.Prompts {
		p := &d.Prompts[i]
		if p.Identical {
			same++
			continue
		}
		div := p.Div
		if div == nil {
			bad = append(bad, p.Name+": ids differ (no divergence recorded)")
			continue
		}
		div.Allowed = div.Measured && divergenceAllowed(tol, div.MarginA)
		where := fmt.Sprintf("%s: step %d (A %d, B %d, margin %.4g)", p.Name, div.Step, div.TokA, div.TokB, div.MarginA)
		if !div.Measured {
			where = fmt.Sprintf("%s: step %d (A %d, B %d, margin unknown: %s)", p.Name, div.Step, div.TokA, div.TokB, div.Note)
		}
		if div.Allowed {
			allowed = append(allowed, where)
		} else {
			bad = append(bad, where)
		}
	}
	evidence := fmt.Sprintf("%d/%d prompts identical over %d greedy tokens", same, len(d.Prompts), d.N)
	switch {
	case len(bad) > 0:
		reason := "greedy ids diverge: " + strings.Join(bad, "; ")
		if !tol.Bitwise && tol.MarginBar > 0 {
			reason += fmt.Sprintf(" (a divergence is allowed only where the top-2 margin is at or below the declared bar %.3g of %s)", tol.MarginBar, tol.String())
		} else {
			reason += fmt.Sprintf(" (%s allows no divergence)", tol.String())
		}
		return Fail, reason, evidence
	case len(allowed) > 0:
		return Pass, fmt.Sprintf("divergences only where the top-2 margin is at or below the declared bar %.3g (%s): %s",
			tol.MarginBar, tol.String(), strings.Join(allowed, "; ")), evidence
	}
	return Pass, "token ids identical on every prompt", evidence
}

func firstDiff(a, b []int32) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// divergence recomputes both arms' logits at the common prefix (prompt ids +
// the ids generated before step) to show both tokens and the margins.
func divergence(ctx context.Context, cfg Config, env *Env, ga, gb harness.GenerateResult, step int) *Divergence {
	div := &Divergence{Step: step, TokA: -1, TokB: -1}
	if step < len(ga.IDs) {
		div.TokA = ga.IDs[step]
	}
	if step < len(gb.IDs) {
		div.TokB = gb.IDs[step]
	}
	prefix := append(append([]int32{}, ga.PromptIDs...), ga.IDs[:step]...)
	last := func(arm Arm) ([]harness.TopLogit, float64, error) {
		l, e, err := armMinfer(correctness(cfg, env), arm).Logits(ctx, "greedy divergence "+arm.Name, "", arm.Env, prefix, 5, "")
		env.Cmd("greedy: logits at the divergence", e)
		if err != nil {
			return nil, 0, err
		}
		p := l.Positions[len(l.Positions)-1]
		return p.Top, float64(p.Top2Margin), nil
	}
	var errA, errB error
	div.TopA, div.MarginA, errA = last(cfg.A)
	div.TopB, div.MarginB, errB = last(cfg.B)
	if errA != nil || errB != nil {
		div.Note = fmt.Sprintf("logits at the divergence unavailable: %v %v", errA, errB)
		return div
	}
	div.Note = "logits recomputed by one prefill of the common prefix"
	div.Measured = true
	return div
}

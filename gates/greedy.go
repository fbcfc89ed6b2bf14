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
	Allowed bool               `json:"allowed"` // below the declared margin bar
	Note    string             `json:"note,omitempty"`
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
}

// Greedy is gate 2.
func Greedy(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateGreedy, Defends: Defends(GateGreedy)}
	d := &GreedyDetail{N: cfg.GenN, MarginBar: cfg.Tol.MarginBar}
	res.Greedy = d
	var bad, allowed []string
	m := env.M
	m.Ctx = cfg.GenCtx // the long prompt plus the generated tokens must fit
	for _, p := range cfg.Prompts {
		if canceled(ctx) {
			res.Status, res.Reason = Fail, "interrupted"
			return res
		}
		ga, e, err := m.Generate(ctx, "greedy A "+p.Name, cfg.A.Env, p.Text, cfg.GenN)
		env.Cmd("greedy: arm A", e)
		if err != nil {
			res.Status, res.Reason = Fail, "arm A could not run: "+err.Error()
			return res
		}
		gb, e, err := m.Generate(ctx, "greedy B "+p.Name, cfg.B.Env, p.Text, cfg.GenN)
		env.Cmd("greedy: arm B", e)
		if err != nil {
			res.Status, res.Reason = Fail, "arm B could not run: "+err.Error()
			return res
		}
		env.step("greedy %s (%d prompt tokens)", p.Name, ga.NPrompt)
		gp := GreedyPrompt{Name: p.Name, NPrompt: ga.NPrompt, IDsA: ga.IDs, IDsB: gb.IDs, DecodeMSA: ga.DecodeMS, DecodeMSB: gb.DecodeMS}
		step := firstDiff(ga.IDs, gb.IDs)
		gp.Identical = step < 0
		if !gp.Identical {
			div := divergence(ctx, cfg, env, ga, gb, step)
			gp.Div = div
			where := fmt.Sprintf("%s: step %d (A %d, B %d, margin %.4g)", p.Name, step, div.TokA, div.TokB, div.MarginA)
			if div.Allowed {
				allowed = append(allowed, where)
			} else {
				bad = append(bad, where)
			}
		}
		d.Prompts = append(d.Prompts, gp)
	}
	same := 0
	for _, p := range d.Prompts {
		if p.Identical {
			same++
		}
	}
	res.Evidence = fmt.Sprintf("%d/%d prompts identical over %d greedy tokens", same, len(d.Prompts), cfg.GenN)
	switch {
	case len(bad) > 0:
		res.Status = Fail
		res.Reason = "greedy ids diverge: " + strings.Join(bad, "; ")
		if d.MarginBar > 0 {
			res.Reason += fmt.Sprintf(" (at or above the declared margin bar %.3g)", d.MarginBar)
		}
	case len(allowed) > 0:
		res.Status = Pass
		res.Reason = fmt.Sprintf("divergences only where the top-2 margin is below the declared bar %.3g (%s): %s",
			d.MarginBar, cfg.Tol.Class, strings.Join(allowed, "; "))
	default:
		res.Status = Pass
		res.Reason = "token ids identical on every prompt"
	}
	return res
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
		l, e, err := env.M.Logits(ctx, "greedy divergence "+arm.Name, "", arm.Env, prefix, 5, "")
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
	div.Allowed = cfg.Tol.MarginBar > 0 && div.MarginA < cfg.Tol.MarginBar
	return div
}

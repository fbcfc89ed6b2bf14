package gates

import (
	"strings"
	"testing"
)

func divergedAt(marginA float64) *GreedyDetail {
	return &GreedyDetail{N: 32, Prompts: []GreedyPrompt{
		{Name: "short", Identical: true},
		{Name: "long", Div: &Divergence{Step: 7, TokA: 3, TokB: 4, MarginA: marginA, MarginB: 0.01, Measured: true}},
	}}
}

func TestGreedy_DivergenceAllowedAtOrBelowTheClassMarginBar(t *testing.T) {
	tol := mustTol(t, actQuantTol)
	for _, tc := range []struct {
		margin float64
		want   Status
	}{{0.14, Pass}, {0.2, Pass}, {0.25, Fail}} {
		d := divergedAt(tc.margin)
		st, why, ev := judgeGreedy(tol, d)
		if st != tc.want || d.Prompts[1].Div.Allowed != (tc.want == Pass) || !strings.Contains(why, "bar 0.2") || ev != "1/2 prompts identical over 32 greedy tokens" {
			t.Errorf("margin %g under %q: %s: %s (%s)", tc.margin, actQuantTol, st, why, ev)
		}
	}
	// The greedy bar is the margin clause that exempts a flip in the A-vs-B rows.
	a, b := flipAt(3, 1024, 0.14)
	if c := CompareAvsB(a, b, 1024, tol); !c.PerPos[0].Exempt || !divergenceAllowed(tol, float64(c.PerPos[0].RefMargin)) {
		t.Errorf("A-vs-B exemption and greedy allowance disagree: %+v", c.PerPos[0])
	}
	// A divergence whose margins could not be measured is never allowed.
	d := divergedAt(0.14)
	d.Prompts[1].Div.Measured = false
	if st, why, _ := judgeGreedy(tol, d); st != Fail || !strings.Contains(why, "margin unknown") {
		t.Errorf("unmeasured divergence: %s: %s", st, why)
	}
}

func TestGreedy_NoClassBitwiseFailsAnyDivergence(t *testing.T) {
	bit := mustTol(t, "")
	for _, m := range []float64{0, 0.001, 0.14, 5} {
		d := divergedAt(m)
		if st, why, _ := judgeGreedy(bit, d); st != Fail || d.Prompts[1].Div.Allowed || !strings.Contains(why, "allows no divergence") {
			t.Errorf("margin %g with no class: %s: %s", m, st, why)
		}
	}
	// A class without a margin clause allows none either.
	tol := mustTol(t, "x: max|diff| <= 0.5, top-1 equal at every position")
	if st, why, _ := judgeGreedy(tol, divergedAt(0.001)); st != Fail {
		t.Errorf("class without a margin clause: %s: %s", st, why)
	}
	if st, why, _ := judgeGreedy(bit, &GreedyDetail{N: 32, Prompts: []GreedyPrompt{{Name: "p", Identical: true}}}); st != Pass || why != "token ids identical on every prompt" {
		t.Errorf("identical: %s: %s", st, why)
	}
}

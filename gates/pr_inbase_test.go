package gates

import (
	"strings"
	"testing"
)

// prRecord is a complete pr record whose greedy and A/B gates pass and whose
// parity gate holds the given comparisons.
func prRecord(graph, avsb []Comparison) *Record {
	status := Pass
	for _, c := range append(append([]Comparison{}, graph...), avsb...) {
		if !c.Pass {
			status = Fail
		}
	}
	return &Record{Complete: true, Gates: []Result{
		{Gate: GateParity, Status: status, Reason: "A vs CPU ref nt=64: rel L2 0.0514 > 0.05", Parity: &ParityDetail{Graph: graph, AvsB: avsb}},
		{Gate: GateGreedy, Status: Pass},
		{Gate: GateAB, Status: Pass},
	}}
}

func cmp(label string, nt int, pass bool) Comparison {
	return Comparison{Label: label, NT: nt, Pass: pass}
}

// A check both builds fail with the same outputs is the base's failure, not
// the head's regression (GATES.md: a regression is a slower workload or
// changed outputs): no regression, named in the verdict line and the
// workload's why. The head failing where the base passes, or A and B
// disagreeing, is a regression.
func TestPR_AFailureTheBaseSharesIsNamedNotARegressionOneTheHeadBringsIs(t *testing.T) {
	both := []Comparison{cmp("A vs CPU ref", 1, true), cmp("B vs CPU ref", 1, true), cmp("A vs CPU ref", 64, false), cmp("B vs CPU ref", 64, false)}
	same := []Comparison{cmp("A vs B", 1, true), cmp("A vs B", 64, true)}
	headOnly := []Comparison{cmp("A vs CPU ref", 1, true), cmp("B vs CPU ref", 1, true), cmp("A vs CPU ref", 64, true), cmp("B vs CPU ref", 64, false)}
	differ := []Comparison{cmp("A vs B", 1, true), cmp("A vs B", 64, false)}
	for _, tc := range []struct {
		name        string
		graph, avsb []Comparison
		want        string
		inBase      bool
	}{
		{"both fail, same outputs", both, same, PRNoRegression, true},
		{"only the head fails", headOnly, same, PRRegression, false},
		{"both fail, outputs differ", both, differ, PRRegression, false},
		{"a comparison missing", both[:3], same, PRRegression, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &PRRun{Complete: true, Workloads: []PRWorkload{{Workload: "qwen2-0.5b:Q4_K_M", Record: prRecord(tc.graph, tc.avsb)}}}
			p.Decide()
			w := p.Workloads[0]
			if p.Verdict != tc.want || (len(w.InBase) > 0) != tc.inBase {
				t.Fatalf("verdict %s (in base %v), want %s (%v): %s", p.Verdict, w.InBase, tc.want, tc.inBase, p.VerdictLine)
			}
			named := strings.Contains(p.VerdictLine, "failing in the base too") && strings.Contains(w.Why, "the base fails it too")
			if named != tc.inBase {
				t.Errorf("named %v: %s / %s", named, p.VerdictLine, w.Why)
			}
			if tc.inBase && p.ExitCode() != ExitPass {
				t.Errorf("exit %d", p.ExitCode())
			}
			line := p.VerdictLine
			if p.Decide(); p.VerdictLine != line || len(p.Workloads[0].InBase) != len(w.InBase) {
				t.Errorf("judged again: %s, first %s", p.VerdictLine, line)
			}
		})
	}
}

package report

import (
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/harness"
)

// LeversTable renders the registry: each lever's arms, backend, path,
// workload, A-vs-B class, liveness and bars.
func LeversTable(levers []harness.Lever) string {
	var rows [][]string
	for _, l := range levers {
		arms, gs := "-", "- (not A/B-able: instrumentation or test seam)"
		if l.Reserved != "" {
			gs = "none: reserved, " + l.Reserved
		} else if l.HasArms() {
			b := l.ArmB
			if l.NeedsB() {
				b = "(given: " + l.Name + "=B)"
			}
			arms = fmt.Sprintf("A=%s B=%s", l.ArmA, b)
			gs = "all five; liveness: "
			if l.Liveness != nil {
				gs += "on at " + l.Liveness.On + " (" + livenessBackends(l) + ")"
			} else {
				gs += "none declared, so every gate is INCONCLUSIVE"
			}
			if b := l.BarsOrDefault(); b != harness.DefaultBars {
				gs += fmt.Sprintf("; bars pp %g tg %g claim %g, at most %d rounds", b.PP, b.TG, b.Claim, b.MaxRounds)
			}
		}
		tol := l.Tolerance
		if tol == "" {
			tol = "bitwise"
		}
		wl := l.Workload
		if wl == "" {
			wl = "-"
		}
		rows = append(rows, []string{l.Name, l.KindS, l.Default, arms, l.Backend, l.Path, wl, tol, gs})
	}
	return Table([]string{"lever", "kind", "default", "arms", "backend", "path", "workload its path needs", "A-vs-B class", "gates"}, rows)
}

// livenessBackends names the backends the lever's rule covers.
func livenessBackends(l harness.Lever) string {
	var bs []string
	if l.Liveness.CUDA != nil {
		bs = append(bs, "cuda")
	}
	if l.Liveness.CPU != nil {
		bs = append(bs, "cpu")
	}
	return strings.Join(bs, ", ")
}

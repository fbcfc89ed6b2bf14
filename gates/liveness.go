package gates

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
	"github.com/minfer-go/minfer/schema"
)

// Liveness in every gate (GATES.md): every arm process of every gate runs
// with the launch census on, and each gate judges what its processes of
// arm A and arm B printed at exit ({"launch_census":...} and, on CUDA,
// {"cuda_graphs":...}) by the lever's liveness rule from the registry
// (`minfer levers --json`: liveness.cuda / liveness.cpu). A gate whose arm
// with the path on never ran it, whose arm with the path off ran it, or
// whose two arms' census is identical, fails with that evidence: a
// correctness gate that never executed the lever's kernels proves nothing.

// ArmEvidence is one arm's census over the processes of one gate.
type ArmEvidence struct {
	Arm       Arm            `json:"arm"`
	Census    profile.Census `json:"census"`
	Graphs    profile.Graphs `json:"graphs"`     // summed over the processes
	HasGraphs bool           `json:"has_graphs"` // some process printed {"cuda_graphs":...}
	Processes int            `json:"processes"`
	// NoCensus names the processes that printed no census line.
	NoCensus []string `json:"no_census,omitempty"`
	// Kernels is the kernels file the census bench loaded (its document's
	// "kernels"), which the SASS census reads when no fatbin is given.
	Kernels *schema.Kernels `json:"kernels,omitempty"`
}

// Add reads one finished process's census into the evidence; a process
// without the line (a binary that does not honour MINFER_LAUNCH_CENSUS) is
// named, never counted as "launched nothing".
func (a *ArmEvidence) Add(label string, e *harness.Exec) {
	if e == nil {
		return
	}
	a.Processes++
	c, err := profile.ParseCensus(e.StderrAll)
	if err != nil {
		a.NoCensus = append(a.NoCensus, label)
		return
	}
	if a.Census == nil {
		a.Census = profile.Census{}
	}
	for k, n := range c {
		a.Census[k] += n
	}
	if g, ok, err := profile.ParseGraphs(e.StderrAll); err == nil && ok {
		a.HasGraphs = true
		a.Graphs.Captured += g.Captured
		a.Graphs.Replayed += g.Replayed
		a.Graphs.Invalidated += g.Invalidated
		a.Graphs.Aborted += g.Aborted
		a.Graphs.Disabled = a.Graphs.Disabled || g.Disabled
		a.Graphs.PDLLaunches += g.PDLLaunches
	}
}

// armOn reports whether an arm runs the path: its value of the lever (an
// unset lever reads as its registry default) is the rule's On, or, for a
// rule with OffValues (MINFER_DRAFT: any draft path), none of those.
func armOn(lv harness.Lever, a Arm) bool {
	v := a.Value
	if v == harness.Unset {
		v = lv.Default
	}
	return lv.Liveness.RunsPath(v)
}

// Liveness judges one gate's evidence of both arms on backend ("cuda",
// "cpu") by the lever's rule: PASS, FAIL, or INCONCLUSIVE (no rule for the
// backend, both arms on the same side of it, or a process without census)
// with the reason.
func Liveness(lv harness.Lever, backend string, a, b ArmEvidence) (Status, string) {
	rule := lv.Rule(backend)
	if rule == nil {
		return Inconclusive, fmt.Sprintf("%s declares no liveness rule for the %s backend (minfer levers --json: liveness.%s): which paths it must switch is unknown, so the census is shown but not judged", lv.Name, backend, backend)
	}
	for _, x := range []ArmEvidence{a, b} {
		if len(x.NoCensus) > 0 {
			return Inconclusive, fmt.Sprintf("arm %s: %d of %d processes printed no launch census (%s)", x.Arm.Name, len(x.NoCensus), x.Processes, strings.Join(x.NoCensus, ", "))
		}
		if x.Processes == 0 {
			return Inconclusive, fmt.Sprintf("arm %s ran no process", x.Arm.Name)
		}
	}
	var on, off ArmEvidence
	switch aOn, bOn := armOn(lv, a.Arm), armOn(lv, b.Arm); {
	case aOn && !bOn:
		on, off = a, b
	case bOn && !aOn:
		on, off = b, a
	default:
		return Inconclusive, fmt.Sprintf("the rule needs one arm with %s=%s and one without; the arms are A=%s B=%s", lv.Name, lv.Liveness.On, a.Arm.Value, b.Arm.Value)
	}
	var fails, oks []string
	// needs: arm has ran pat (its path role hasRole), arm hasNot none.
	needs := func(pat string, has, hasNot ArmEvidence, hasRole, notRole string) {
		n, k := matching(has.Census, pat)
		m, mk := matching(hasNot.Census, pat)
		if n == 0 {
			fails = append(fails, fmt.Sprintf("arm %s (%s=%s, path %s) ran no %s", has.Arm.Name, lv.Name, has.Arm.Value, hasRole, pat))
		} else {
			oks = append(oks, fmt.Sprintf("arm %s ran %s %d times (%s)", has.Arm.Name, pat, n, strings.Join(k, ", ")))
		}
		if m > 0 {
			fails = append(fails, fmt.Sprintf("arm %s (%s=%s, path %s) still ran %s %d times (%s)", hasNot.Arm.Name, lv.Name, hasNot.Arm.Value, notRole, pat, m, strings.Join(mk, ", ")))
		} else {
			oks = append(oks, fmt.Sprintf("arm %s ran none", hasNot.Arm.Name))
		}
	}
	for _, pat := range rule.Census {
		needs(pat, on, off, "on", "off")
	}
	for _, pat := range rule.OffCensus {
		needs(pat, off, on, "off", "on")
	}
	graphLine := func(what string) {
		for _, x := range []ArmEvidence{on, off} {
			if !x.HasGraphs {
				fails = append(fails, fmt.Sprintf(`arm %s printed no {"cuda_graphs":{...}} line (%s)`, x.Arm.Name, what))
			}
		}
	}
	// sameKernels: the names outside the rule's own patterns (the
	// evidence of where the path went) are the same in both arms.
	sameKernels := func() {
		own := slices.Concat(rule.Census, rule.OffCensus)
		onK, offK := without(on.Census, own), without(off.Census, own)
		if only := kernelSetDiff(onK, offK); only != "" {
			fails = append(fails, "the arms ran different kernels: "+only)
		} else {
			oks = append(oks, fmt.Sprintf("same %d kernels in both arms", len(launched(onK))))
		}
	}
	if rule.SameKernels {
		sameKernels()
	}
	if rule.Graphs {
		graphLine("graphs")
		if on.HasGraphs && off.HasGraphs {
			if on.Graphs.Captured == 0 || on.Graphs.Replayed == 0 {
				fails = append(fails, fmt.Sprintf("arm %s (graphs on) captured %d and replayed %d graphs", on.Arm.Name, on.Graphs.Captured, on.Graphs.Replayed))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s captured %d graphs and replayed %d", on.Arm.Name, on.Graphs.Captured, on.Graphs.Replayed))
			}
			if off.Graphs.Captured != 0 || off.Graphs.Replayed != 0 {
				fails = append(fails, fmt.Sprintf("arm %s (graphs off) captured %d and replayed %d graphs", off.Arm.Name, off.Graphs.Captured, off.Graphs.Replayed))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s captured and replayed none", off.Arm.Name))
			}
		}
		sameKernels()
	}
	if rule.PDL {
		graphLine("pdl_launches")
		if on.HasGraphs && off.HasGraphs {
			if on.Graphs.PDLLaunches == 0 {
				fails = append(fails, fmt.Sprintf("arm %s (PDL on) issued no PDL launch", on.Arm.Name))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s issued %d PDL launches", on.Arm.Name, on.Graphs.PDLLaunches))
			}
			if off.Graphs.PDLLaunches != 0 {
				fails = append(fails, fmt.Sprintf("arm %s (PDL off) issued %d PDL launches", off.Arm.Name, off.Graphs.PDLLaunches))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s issued none", off.Arm.Name))
			}
		}
		sameKernels()
	}
	if rule.PrefillGraphs {
		graphLine("prefill graphs")
		if on.HasGraphs && off.HasGraphs {
			if on.Graphs.Captured <= off.Graphs.Captured {
				fails = append(fails, fmt.Sprintf("arm %s (prefill capture on) captured %d graphs, not more than arm %s (off) with %d",
					on.Arm.Name, on.Graphs.Captured, off.Arm.Name, off.Graphs.Captured))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s captured %d graphs, arm %s %d", on.Arm.Name, on.Graphs.Captured, off.Arm.Name, off.Graphs.Captured))
			}
			if off.Graphs.Captured == 0 || off.Graphs.Replayed == 0 {
				fails = append(fails, fmt.Sprintf("arm %s (prefill capture off) captured %d and replayed %d graphs: its decode graph is missing too",
					off.Arm.Name, off.Graphs.Captured, off.Graphs.Replayed))
			}
		}
		sameKernels()
	}
	if len(fails) == 0 && censusEqual(on, off) {
		fails = append(fails, fmt.Sprintf("the two arms' census is identical (%d names, graphs %d/%d): the lever switched nothing", len(launched(on.Census)), on.Graphs.Captured, on.Graphs.Replayed))
	}
	if len(fails) > 0 {
		return Fail, strings.Join(fails, "; ")
	}
	return Pass, strings.Join(oks, "; ")
}

// censusEqual: the same counts per name and the same graph counts.
func censusEqual(a, b ArmEvidence) bool {
	if len(profile.Diff(a.Census, b.Census)) != 0 {
		return false
	}
	return a.Graphs == b.Graphs
}

// LivenessOf is Liveness for a run configuration; when the arm with the
// path on ran none of it and the run's model or pp is not the workload the
// lever declares (harness.Lever.WorkloadMismatch), the reason says so.
func LivenessOf(cfg Config, a, b ArmEvidence) (Status, string) {
	st, why := Liveness(cfg.Lever, cfg.Backend, a, b)
	if wf := withMissing(cfg, a, b); wf != "" && st != Fail {
		return Fail, wf + "; " + why
	} else if wf != "" {
		why = wf + "; " + why
	}
	if st != Fail || !strings.Contains(why, ", path on) ran no ") {
		return st, why
	}
	if note := cfg.Lever.WorkloadMismatch(cfg.Model, cfg.PP); note != "" {
		why = note + " (by the file-name rule of harness.Workload.MatchesModel; its path may not run on this model): " + why
	}
	return st, why
}

// withMissing names the --with paths an arm did not run ("" when every
// pinned lever whose value runs a path shows its census names in both
// arms): an A/B "with the split kernels on" that never launched them is not
// one. A --with that the lever itself requires (a Requires entry, value and
// all) is asked of arm A only: arm B runs the lever's path, built on that
// one and free to replace its kernels (MINFER_ATTN_DECODE_TC at depth
// launches no minfer_attn_decode2* of the MINFER_NO_SPLITK_ATTN=0 it
// requires), and the engine refuses the lever where the requirement does
// not hold.
func withMissing(cfg Config, a, b ArmEvidence) string {
	required := map[string]bool{} // NAME=VALUE
	for _, p := range cfg.Lever.Pins(cfg.Backend) {
		if p.By == harness.PinRequires {
			required[p.Name+"="+p.Value] = true
		}
	}
	var miss []string
	for _, w := range cfg.With {
		rule := w.Lever.Rule(cfg.Backend)
		if rule == nil || w.Lever.Liveness == nil || !w.Lever.Liveness.RunsPath(w.Value) {
			continue
		}
		arms := []ArmEvidence{a, b}
		if required[w.Lever.Name+"="+w.Value] {
			arms = arms[:1]
		}
		for _, pat := range rule.Census {
			for _, x := range arms {
				if n, _ := matching(x.Census, pat); n == 0 && x.Processes > 0 {
					miss = append(miss, fmt.Sprintf("arm %s (--with %s=%s) ran no %s", x.Arm.Name, w.Lever.Name, w.Value, pat))
				}
			}
		}
	}
	return strings.Join(miss, "; ")
}

// gateLiveness folds a gate's liveness verdict into its result: a FAIL
// fails the gate; an undecided liveness makes a PASS INCONCLUSIVE; a gate
// that failed on its own stays failed (the liveness is kept as evidence).
func gateLiveness(res *Result, cfg Config, a, b ArmEvidence) {
	if cfg.Between {
		res.Liveness = "n/a: a run between two builds switches no lever path"
		return
	}
	st, why := LivenessOf(cfg, a, b)
	res.Liveness = string(st) + ": " + why
	switch {
	case res.Status == Fail || res.Status == Skip:
	case st == Fail:
		res.Status, res.Reason = Fail, "liveness: "+why+"; "+res.Reason
	case st != Pass:
		res.Status, res.Reason = Inconclusive, "liveness could not decide: "+why+"; "+res.Reason
	}
}

// without is c less the names matching any of pats.
func without(c profile.Census, pats []string) profile.Census {
	out := profile.Census{}
	for k, v := range c {
		hit := false
		for _, p := range pats {
			ok, _ := path.Match(p, k)
			hit = hit || ok
		}
		if !hit {
			out[k] = v
		}
	}
	return out
}

// matching sums the launches of the names matching pat.
func matching(c profile.Census, pat string) (int, []string) {
	n := 0
	var names []string
	for k, v := range c {
		if ok, _ := path.Match(pat, k); ok && v > 0 {
			n += v
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return n, names
}

func launched(c profile.Census) []string {
	var out []string
	for k, v := range c {
		if v > 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// kernelSetDiff describes the names run by one census and not the other
// ("" when the sets are equal).
func kernelSetDiff(x, y profile.Census) string {
	var parts []string
	for _, k := range launched(x) {
		if y[k] == 0 {
			parts = append(parts, k+" only with the path on")
		}
	}
	for _, k := range launched(y) {
		if x[k] == 0 {
			parts = append(parts, k+" only with the path off")
		}
	}
	return strings.Join(parts, ", ")
}

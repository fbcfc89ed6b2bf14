package gates

import (
	"fmt"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness/stats"
)

// A pull-request run (abtest pr): the base build as arm A and the head
// build as arm B of one interleaved run per workload, with the gates that
// make sense between two builds (parity, greedy identity, the A/B). It is
// not a lever run: its verdicts are GATES.md's for `abtest pr`.
const (
	PRNoRegression = "no regression"
	PRRegression   = "regression"
	PRInconclusive = "inconclusive"
	// PRCannotRun: the base build does not fit the machine on a workload
	// (its arm exited out of memory, oom.go): no judgement of the head.
	PRCannotRun = "could not run"
)

// PRGates are the gates of a run between two builds.
var PRGates = []string{GateParity, GateGreedy, GateAB}

// PRBuild is one side of a pull-request run.
type PRBuild struct {
	Dir          string `json:"dir"`
	Minfer       string `json:"minfer"`
	MinferSHA256 string `json:"minfer_sha256"`
	Commit       string `json:"commit"` // the binary's VCS stamp
	Kernels      string `json:"kernels,omitempty"`
	KernelSHA256 string `json:"kernels_sha256,omitempty"`
}

// PRWorkload is one workload of the matrix and its record.
type PRWorkload struct {
	Workload string  `json:"workload"` // "embedded" or SHAPE:TYPE[@ppN]
	Record   *Record `json:"record,omitempty"`
	Report   string  `json:"report,omitempty"` // the workload's detailed report, relative to the page
	Verdict  string  `json:"verdict"`
	Why      string  `json:"why"`
	// Slower names the metrics the not-slower check refused, Changed the
	// outputs that changed outside the declared class, Memory the head's
	// peak device memory above the bar over the base's.
	Slower  []string `json:"slower,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Memory  []string `json:"memory,omitempty"`
	// InBase names the checks both builds fail with outputs identical (or
	// inside the declared class) between them: a failure the base already
	// had, not one the head brought (GATES.md's regression is a slower
	// workload or changed outputs). Never hidden: the verdict line names it.
	InBase []string `json:"in_base,omitempty"`
}

// PRRun is a pull-request run.
type PRRun struct {
	Schema      int               `json:"schema"`
	Started     time.Time         `json:"started"`
	Finished    time.Time         `json:"finished"`
	CommandLine string            `json:"command_line"`
	Base        PRBuild           `json:"base"`
	Head        PRBuild           `json:"head"`
	HeadEnv     map[string]string `json:"head_env,omitempty"`
	Tolerance   string            `json:"tolerance"`
	Workloads   []PRWorkload      `json:"workloads"`
	Complete    bool              `json:"complete"`
	Verdict     string            `json:"verdict"`
	VerdictLine string            `json:"verdict_line"`
}

// JudgeWorkload sets a workload's verdict from its record: a regression
// when the not-slower check refused a metric or an output changed outside
// the declared class (parity or greedy failed), inconclusive when a gate
// could not decide or the run was cut, else no regression.
func JudgeWorkload(w *PRWorkload) {
	// From the record alone: judging a stored run again gives the same.
	w.Slower, w.Changed, w.Memory, w.InBase = nil, nil, nil, nil
	r := w.Record
	if r == nil {
		w.Verdict, w.Why = PRInconclusive, "not run"
		return
	}
	var undecided, cannotRun []string
	for _, g := range r.Gates {
		switch {
		case g.CannotRun && g.Status != Fail:
			cannotRun = append(cannotRun, g.Gate+": "+g.Reason)
		case g.Status == Fail && g.Gate == GateAB && g.AB != nil:
			if m := g.AB.Memory; m != nil && m.Status == MemOver {
				w.Memory = append(w.Memory, m.Line())
			}
			for _, m := range g.AB.Metrics {
				if !m.NotSlower.Pass {
					w.Slower = append(w.Slower, fmt.Sprintf("%s (%s, median B/A %.4f, %d of %d rounds slower than 1/%g)", m.Name, m.Basis, float64(m.Median), m.NotSlower.Slower, m.NotSlower.N, m.NotSlower.Bar))
				}
			}
			if len(w.Slower) == 0 && len(w.Memory) == 0 {
				w.Slower = append(w.Slower, g.Reason)
			}
		case g.Status == Fail && failsInBaseToo(g):
			w.InBase = append(w.InBase, g.Gate+": "+g.Reason)
		case g.Status == Fail:
			w.Changed = append(w.Changed, g.Gate+": "+g.Reason)
		case g.Status != Pass:
			undecided = append(undecided, fmt.Sprintf("%s %s: %s", g.Gate, g.Status, g.Reason))
		}
	}
	switch {
	case len(w.Slower) > 0 || len(w.Changed) > 0 || len(w.Memory) > 0:
		w.Verdict = PRRegression
		w.Why = strings.Join(append(append(append([]string{}, w.Slower...), w.Changed...), w.Memory...), "; ")
	case len(cannotRun) > 0:
		w.Verdict, w.Why = PRCannotRun, strings.Join(cannotRun, "; ")
	case !r.Complete:
		w.Verdict, w.Why = PRInconclusive, "interrupted: "+r.IncompleteReason
	case len(undecided) > 0:
		w.Verdict, w.Why = PRInconclusive, strings.Join(undecided, "; ")
	default:
		w.Verdict, w.Why = PRNoRegression, "not slower on pp and tg, outputs identical or inside the declared class, memory within the bar or not measured"
	}
	if len(w.InBase) > 0 && w.Verdict != PRRegression {
		w.Why += "; the base fails it too, with the same outputs: " + strings.Join(w.InBase, "; ")
	}
}

// failsInBaseToo: a parity FAIL where A and B agree (every A-vs-B
// comparison passes) and every whole-graph comparison the head fails
// against the CPU reference, the base fails at the same nt. A failure to
// run, a kernel parity failure or an incomplete set of comparisons is never
// one (the head is judged as usual).
func failsInBaseToo(g Result) bool {
	d := g.Parity
	if g.Gate != GateParity || d == nil || d.KernelStatus == Fail || len(d.AvsB) == 0 || strings.HasPrefix(g.Reason, "an arm could not run") {
		return false
	}
	for _, c := range d.AvsB {
		if !c.Pass {
			return false
		}
	}
	failedA := map[int]bool{}
	var nA, nB int
	for _, c := range d.Graph {
		switch {
		case strings.HasPrefix(c.Label, "A "):
			nA++
			failedA[c.NT] = failedA[c.NT] || !c.Pass
		case strings.HasPrefix(c.Label, "B "):
			nB++
		}
	}
	if nA != len(d.AvsB) || nB != len(d.AvsB) {
		return false
	}
	failed := false
	for _, c := range d.Graph {
		if c.Pass {
			continue
		}
		failed = true
		if strings.HasPrefix(c.Label, "B ") && !failedA[c.NT] {
			return false
		}
	}
	return failed
}

// Decide sets the run's verdict: a regression when any workload has one,
// inconclusive when any could not decide or the run was cut, else none.
func (p *PRRun) Decide() {
	var reg, inc, cannot, inBase []string
	for i := range p.Workloads {
		w := &p.Workloads[i]
		JudgeWorkload(w)
		if len(w.InBase) > 0 {
			inBase = append(inBase, w.Workload)
		}
		switch w.Verdict {
		case PRRegression:
			reg = append(reg, w.Workload)
		case PRInconclusive:
			inc = append(inc, w.Workload)
		case PRCannotRun:
			cannot = append(cannot, w.Workload)
		}
	}
	switch {
	case len(reg) > 0:
		p.Verdict = PRRegression
	case len(cannot) > 0:
		p.Verdict = PRCannotRun
	case !p.Complete || len(inc) > 0:
		p.Verdict = PRInconclusive
	default:
		p.Verdict = PRNoRegression
	}
	p.VerdictLine = fmt.Sprintf("%s: head %s vs base %s over %d workloads", p.Verdict, commit12(p.Head.Commit), commit12(p.Base.Commit), len(p.Workloads))
	if len(reg) > 0 {
		p.VerdictLine += " — regression in " + strings.Join(reg, ", ")
	}
	if len(cannot) > 0 {
		p.VerdictLine += " — could not run (the base does not fit): " + strings.Join(cannot, ", ")
	}
	if len(inc) > 0 {
		p.VerdictLine += " — could not decide: " + strings.Join(inc, ", ")
	}
	if !p.Complete {
		p.VerdictLine += " — interrupted"
	}
	if len(inBase) > 0 {
		p.VerdictLine += " — failing in the base too (outputs the same in both builds): " + strings.Join(inBase, ", ")
	}
}

// ExitCode: 0 no regression, 1 a regression, 2 could not run, 3
// inconclusive.
func (p *PRRun) ExitCode() int {
	switch p.Verdict {
	case PRNoRegression:
		return ExitPass
	case PRRegression:
		return ExitFail
	case PRCannotRun:
		return ExitCannotRun
	}
	return ExitUndecided
}

// MetricVerdict is a metric's summary word in a pull-request page: slower
// (the not-slower check refused it), faster (the improvement claim holds),
// else "~".
func MetricVerdict(m Metric) string {
	switch {
	case !m.NotSlower.Pass:
		return stats.VerdictSlower
	case m.Claim.Claim:
		return stats.VerdictFaster
	}
	return stats.VerdictSame
}

func commit12(c string) string {
	if c == "" {
		return "(unknown commit)"
	}
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

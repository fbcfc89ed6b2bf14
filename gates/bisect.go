package gates

import (
	"fmt"
	"math"
	"time"

	"github.com/minfer-go/minfer/harness/stats"
)

// Bisect: the first commit between a good and a bad one at which a workload
// got slower, a lever's gain vanished, or greedy output changed. The search
// is git bisect's over the first-parent line from good to bad; each probed
// commit is judged by an interleaved run against both ends, with three
// outcomes, and a commit that cannot be judged is skipped as git bisect
// skip does.

// What a bisect looks for.
const (
	BisectSpeed  = "speed"  // the workload got slower (default build, no lever set)
	BisectLever  = "lever"  // the lever's B/A gain vanished
	BisectOutput = "output" // greedy output changed
)

// Outcome of one probed commit.
type Outcome string

const (
	LikeGood Outcome = "like good"
	LikeBad  Outcome = "like bad"
	// Unknown: the rounds' confidence interval still straddles the
	// midpoint between the ends at the round cap.
	Unknown Outcome = "unknown"
	// Untestable: the commit did not build, or has no prebuilt folder, or
	// its build lacks the lever.
	Untestable Outcome = "skipped"
)

// BisectConfidence is the confidence of the interval a step is judged by.
const BisectConfidence = 0.95

// Position is the evidence of one step judged against both ends: per round
// S = how far the probe is from the midpoint of the ends, signed toward
// good (log scale), and the distribution-free interval of its median.
type Position struct {
	S        []float64 `json:"s"`
	Median   float64   `json:"median"`
	Lo       float64   `json:"lo"`
	Hi       float64   `json:"hi"`
	Coverage float64   `json:"coverage"`
}

// Judge is the outcome of a position: like good when the whole interval is
// on good's side of the midpoint, like bad when on bad's, else unknown.
func (p *Position) Judge() Outcome {
	p.Median = median(p.S)
	p.Lo, p.Hi, p.Coverage = stats.MedianCI(p.S, BisectConfidence)
	switch {
	case p.Lo > 0:
		return LikeGood
	case p.Hi < 0:
		return LikeBad
	}
	return Unknown
}

// SpeedPosition: per round, the probe's log tok/s against the midpoint of
// the ends' in the same round (drift cancels), signed so that toward good
// is positive.
func SpeedPosition(good, probe, bad []float64) Position {
	dir := 1.0
	if median(logRatios(bad, good)) > 0 { // bad faster: a speed-up is being bisected
		dir = -1
	}
	var s []float64
	for i := range probe {
		if i < len(good) && i < len(bad) && good[i] > 0 && probe[i] > 0 && bad[i] > 0 {
			s = append(s, dir*(math.Log(probe[i])-(math.Log(good[i])+math.Log(bad[i]))/2))
		}
	}
	return Position{S: s}
}

// RatioPosition: per round, the probe's log B/A ratio against the midpoint
// of the ends' median log ratios (a lever's gain).
func RatioPosition(goodLog, badLog float64, probeRatios []float64) Position {
	mid := (goodLog + badLog) / 2
	dir := 1.0
	if badLog > goodLog {
		dir = -1
	}
	var s []float64
	for _, r := range probeRatios {
		if r > 0 {
			s = append(s, dir*(math.Log(r)-mid))
		}
	}
	return Position{S: s}
}

func logRatios(num, den []float64) []float64 {
	var out []float64
	for i := range num {
		if i < len(den) && num[i] > 0 && den[i] > 0 {
			out = append(out, math.Log(num[i]/den[i]))
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Summary(xs).Median
}

// Bisection is the search state over Commits (oldest first): Commits[0]
// is the known good end, the last the known bad one.
type Bisection struct {
	Commits []string
	lo, hi  int
	skipped map[int]bool
}

// NewBisection starts a search between commits[0] (good) and the last (bad).
func NewBisection(commits []string) *Bisection {
	return &Bisection{Commits: commits, lo: 0, hi: len(commits) - 1, skipped: map[int]bool{}}
}

// Next is the commit to probe: the untried one nearest the middle of the
// open range (ties: the older); ok false when the range is closed or every
// commit in it was skipped.
func (b *Bisection) Next() (i int, ok bool) {
	mid := float64(b.lo+b.hi) / 2
	best, bestD := -1, math.Inf(1)
	for k := b.lo + 1; k < b.hi; k++ {
		if b.skipped[k] {
			continue
		}
		if d := math.Abs(float64(k) - mid); d < bestD {
			best, bestD = k, d
		}
	}
	return best, best >= 0
}

// Record narrows the range by a probe's outcome.
func (b *Bisection) Record(i int, o Outcome) {
	switch o {
	case LikeGood:
		b.lo = i
	case LikeBad:
		b.hi = i
	default:
		b.skipped[i] = true
	}
}

// Range is the last commit known good and the first known bad; between
// them are only skipped commits (none when the culprit is found).
func (b *Bisection) Range() (lastGood, firstBad int, between []int) {
	for k := b.lo + 1; k < b.hi; k++ {
		between = append(between, k)
	}
	return b.lo, b.hi, between
}

// StepsLeft estimates the probes still to run: log2 of the untried
// commits in the range, rounded up.
func (b *Bisection) StepsLeft() int {
	n := 0
	for k := b.lo + 1; k < b.hi; k++ {
		if !b.skipped[k] {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return int(math.Ceil(math.Log2(float64(n + 1))))
}

// BisectStep is one probed commit and its evidence.
type BisectStep struct {
	Commit  string    `json:"commit"`
	Index   int       `json:"index"` // in BisectRun.Commits
	Subject string    `json:"subject,omitempty"`
	Outcome Outcome   `json:"outcome"`
	Why     string    `json:"why"`
	Metric  string    `json:"metric,omitempty"`
	Rounds  int       `json:"rounds,omitempty"`
	Pos     *Position `json:"position,omitempty"`
	// Per-round values: tok/s of good, probe and bad (speed), or the
	// probe's B/A ratios (lever).
	Good    []float64     `json:"good,omitempty"`
	Probe   []float64     `json:"probe,omitempty"`
	Bad     []float64     `json:"bad,omitempty"`
	Seconds float64       `json:"seconds"`
	Wall    time.Duration `json:"-"`
}

// BisectRun is a whole bisect: the ends, the mode, the reproduction, every
// step, the culprit (or the range it is in) and the final re-run of last
// good against first bad with its per-kernel difference.
type BisectRun struct {
	Schema      int               `json:"schema"`
	Started     time.Time         `json:"started"`
	Finished    time.Time         `json:"finished"`
	CommandLine string            `json:"command_line"`
	Good        string            `json:"good"` // the revisions as given
	Bad         string            `json:"bad"`
	Commits     []string          `json:"commits"` // oldest (good) first
	Subjects    []string          `json:"subjects"`
	Mode        string            `json:"mode"`
	Lever       string            `json:"lever,omitempty"`
	Workload    string            `json:"workload"`
	Metric      string            `json:"metric,omitempty"`
	Basis       string            `json:"basis,omitempty"`
	Threshold   float64           `json:"threshold"`
	Machine     string            `json:"machine"`
	Reproduce   *BisectStep       `json:"reproduction"` // good against bad
	Steps       []BisectStep      `json:"steps"`
	LastGood    string            `json:"last_good,omitempty"`
	FirstBad    string            `json:"first_bad,omitempty"`
	Between     []string          `json:"skipped_between,omitempty"`
	Final       *BisectStep       `json:"final,omitempty"` // last good against first bad
	Profile     *Result           `json:"profile,omitempty"`
	Verdict     string            `json:"verdict"`
	Line        string            `json:"line"`
	Builds      map[string]string `json:"builds"` // commit -> build folder
}

// Bisect verdicts.
const (
	BisectFound         = "FOUND"
	BisectNotReproduced = "NOT REPRODUCED"
	BisectRange         = "RANGE"        // skipped or unknown commits left a range
	BisectIncomplete    = "INCOMPLETE"   // interrupted
	BisectFinalDiffers  = "INCONCLUSIVE" // the final re-run did not reproduce the step
)

// ExitCode: 0 a culprit named and confirmed; 3 anything short of that.
func (r *BisectRun) ExitCode() int {
	if r.Verdict == BisectFound {
		return ExitPass
	}
	return ExitUndecided
}

// Short is a commit's first 9 characters.
func Short(c string) string {
	if len(c) > 9 {
		return c[:9]
	}
	return c
}

// Decide sets the verdict and its line from the search's end.
func (r *BisectRun) Decide(complete bool) {
	switch {
	case r.Reproduce == nil || r.Reproduce.Outcome != LikeBad:
		r.Verdict = BisectNotReproduced
		why := "not run"
		if r.Reproduce != nil {
			why = r.Reproduce.Why
		}
		r.Line = fmt.Sprintf("NOT REPRODUCED: %s..%s: %s; nothing bisected", Short(r.Good), Short(r.Bad), why)
	case !complete:
		r.Verdict = BisectIncomplete
		r.Line = fmt.Sprintf("INCOMPLETE: interrupted with the culprit between %s and %s", Short(r.LastGood), Short(r.FirstBad))
	case len(r.Between) > 0:
		r.Verdict = BisectRange
		r.Line = fmt.Sprintf("RANGE: the first bad commit is one of %d (after %s, up to %s): the commits between could not be judged", len(r.Between)+1, Short(r.LastGood), Short(r.FirstBad))
	case r.Final != nil && r.Final.Outcome != LikeBad:
		r.Verdict = BisectFinalDiffers
		r.Line = fmt.Sprintf("INCONCLUSIVE: the search ended at %s, but the final re-run against %s did not reproduce the difference (%s)", Short(r.FirstBad), Short(r.LastGood), r.Final.Why)
	default:
		r.Verdict = BisectFound
		r.Line = fmt.Sprintf("FOUND: %s is the first bad commit (%s); last good %s", Short(r.FirstBad), r.subject(r.FirstBad), Short(r.LastGood))
	}
}

func (r *BisectRun) subject(c string) string {
	for i, x := range r.Commits {
		if x == c && i < len(r.Subjects) {
			return r.Subjects[i]
		}
	}
	return ""
}

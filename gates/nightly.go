package gates

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
)

// The nightly: every lever's run on one machine and commit, summarized on
// one page, and compared with the previous night.

// VerdictSkip is a nightly lever that was not run (a CUDA lever on a machine
// without a device); it is never counted as PASS.
const VerdictSkip = "SKIP"

// VerdictCannotRun is a nightly lever whose run could not be set up (its
// workload, its model's needs).
const VerdictCannotRun = "COULD NOT RUN"

// NightlyEntry is one lever's line of the nightly summary.
type NightlyEntry struct {
	// Spec is the lever as the nightly listed it (NAME or NAME=B): a
	// shard's part, and a merge's key.
	Spec    string `json:"spec,omitempty"`
	Lever   string `json:"lever"`
	A       string `json:"a"`
	B       string `json:"b"`
	Backend string `json:"backend"`
	// Workload is the lever's declared workload ("" the nightly's default);
	// Model, ModelSHA256 and PP are what the lever ran on (Model "" and
	// the sha unset when it did not run). A summary from before per-lever
	// workloads has none of them: every lever ran the summary's model.
	Workload    string        `json:"workload,omitempty"`
	Model       string        `json:"model,omitempty"`
	ModelSHA256 string        `json:"model_sha256,omitempty"`
	PP          int           `json:"pp,omitempty"`
	Verdict     string        `json:"verdict"`
	Line        string        `json:"line"`
	Report      string        `json:"report,omitempty"` // relative to the summary
	PPA         []float64     `json:"pp_a,omitempty"`
	PPB         []float64     `json:"pp_b,omitempty"`
	TGA         []float64     `json:"tg_a,omitempty"`
	TGB         []float64     `json:"tg_b,omitempty"`
	PPRatio     harness.Num   `json:"pp_ratio"` // median per-round B/A
	TGRatio     harness.Num   `json:"tg_ratio"`
	Against     []NightlyDiff `json:"against_previous,omitempty"`
	// Seconds is the lever's wall time, all gates: the next nightly's
	// shards are balanced by it.
	Seconds float64 `json:"seconds,omitempty"`
	// SuiteSeconds is the part of it the suite gate took.
	SuiteSeconds float64 `json:"suite_seconds,omitempty"`
	// From is, in a merged summary, the shard summary the entry came from
	// (its report is relative to that file's folder).
	From string `json:"from,omitempty"`
}

// NightlyDiff is arm B of one metric against the previous nightly's arm B.
type NightlyDiff struct {
	Metric  string      `json:"metric"`
	Ratio   harness.Num `json:"ratio"` // median(now) / median(previous)
	Lo      harness.Num `json:"lo"`
	Hi      harness.Num `json:"hi"`
	Verdict string      `json:"verdict"` // ~, faster, slower, ?, not comparable
	// Note says why a metric is not comparable (the lever ran another
	// model or pp the previous night).
	Note string `json:"note,omitempty"`
}

// VerdictNotComparable: the lever ran another workload (model or pp) in the
// previous nightly; its speeds are not compared, so neither a regression
// nor an improvement.
const VerdictNotComparable = "not comparable"

// NightlySummary is one night: its machine, commit and default workload,
// every lever's entry, and the comparison with the previous night.
type NightlySummary struct {
	Date        string  `json:"date"`
	Machine     string  `json:"machine"` // GPU name, else CPU model
	GPU         string  `json:"gpu_uuid,omitempty"`
	Commit      string  `json:"commit"`
	Model       string  `json:"model"` // the default workload's model
	ModelSHA256 string  `json:"model_sha256"`
	PP          int     `json:"pp,omitempty"` // the default workload's prefill (0: a summary from before it was recorded)
	TG          int     `json:"tg,omitempty"`
	Threshold   float64 `json:"threshold"`
	CommandLine string  `json:"command_line,omitempty"`
	// Verdict is the night's, by GATES.md's precedence over its levers
	// (FAIL, could not run, INCOMPLETE, INCONCLUSIVE, PARTIAL, PASS), a
	// regression counting as a FAIL; Complete false when interrupted.
	Verdict  string `json:"verdict"`
	Complete bool   `json:"complete"`
	// Suite is kept for summaries from before each lever ran its own suite
	// gate (through the suite cache); new summaries leave it empty.
	Suite       *Result        `json:"suite,omitempty"`
	Entries     []NightlyEntry `json:"entries"`
	Previous    string         `json:"previous,omitempty"` // the summary compared against
	PrevNote    string         `json:"previous_note,omitempty"`
	Regressions []string       `json:"regressions,omitempty"`
	// Shard is set on a shard's partial summary (abtest nightly --shard);
	// Merged lists the shards a merged summary was made of, and Missing
	// the shards it lacks (their levers are INCONCLUSIVE entries).
	Shard   *ShardInfo    `json:"shard,omitempty"`
	Merged  []MergedShard `json:"merged,omitempty"`
	Missing []string      `json:"missing_shards,omitempty"`
	// Control compares the control lever, run in every shard, across the
	// shards (their GPUs): it should not move.
	Control *ControlComparison `json:"control,omitempty"`
}

// MergedShard is one shard of a merged nightly: where it was read, when it
// started, and whether it finished.
type MergedShard struct {
	Name     string `json:"name"` // i/N
	Path     string `json:"path"`
	Date     string `json:"date"`
	Complete bool   `json:"complete"`
	Levers   int    `json:"levers"`
	GPU      string `json:"gpu_uuid,omitempty"`
}

// Decide sets the night's verdict by GATES.md's precedence.
func (s *NightlySummary) Decide() {
	has := map[string]bool{}
	for _, e := range s.Entries {
		has[e.Verdict] = true
	}
	switch {
	case has[VerdictFail] || has[VerdictNotCaught] || len(s.Regressions) > 0 || s.Suite != nil && s.Suite.Status == Fail:
		s.Verdict = VerdictFail
	case has[VerdictCannotRun]:
		s.Verdict = VerdictCannotRun
	case !s.Complete || has[VerdictIncomplete]:
		s.Verdict = VerdictIncomplete
	case has[VerdictInconclusive] || has[VerdictSkip]:
		s.Verdict = VerdictInconclusive
	case has[VerdictPartial]:
		s.Verdict = VerdictPartial
	default:
		s.Verdict = VerdictPass
	}
}

// ExitCode is abtest run's code for the night's verdict.
func (s *NightlySummary) ExitCode() int {
	if s.Verdict == VerdictCannotRun {
		return ExitCannotRun
	}
	return ExitCodeOf(s.Verdict)
}

// PreviousNightly is the newest readable nightly-*.json in dir that is a
// night's summary (a shard's partial one is not compared against). The newer
// files it could not read or parse come back in skipped (name: reason), so
// the summary says it compared against an older run instead of doing so
// silently.
func PreviousNightly(dir string) (path string, prev *NightlySummary, skipped []string) {
	return NightlyBefore(dir, "")
}

// NightlyBefore is PreviousNightly among the nights dated before date ("":
// any), so a night merged again does not compare with itself.
func NightlyBefore(dir, date string) (path string, prev *NightlySummary, skipped []string) {
	ms, _ := filepath.Glob(filepath.Join(dir, "nightly-*.json")) // the pattern is fixed: no ErrBadPattern
	sort.Strings(ms)
	for i := len(ms) - 1; i >= 0; i-- {
		if IsShardFile(ms[i]) || date != "" && filepath.Base(ms[i]) >= "nightly-"+date {
			continue
		}
		b, err := os.ReadFile(ms[i])
		if err == nil {
			var s NightlySummary
			if err = json.Unmarshal(b, &s); err == nil {
				return ms[i], &s, skipped
			}
		}
		skipped = append(skipped, filepath.Base(ms[i])+": "+err.Error())
	}
	return "", nil, skipped
}

// Compare sets each lever's arm-B change against the previous nightly and
// lists the significant slowdowns beyond the threshold. Like is compared
// with like: the same lever and arm B on the same workload (model sha256 and
// pp); a lever whose workload changed is "not comparable", never a
// regression or an improvement.
func (s *NightlySummary) Compare(prevPath string, prev *NightlySummary) {
	if prev == nil {
		s.PrevNote = "no previous nightly result in the output folder: nothing to compare against"
		return
	}
	s.Previous = filepath.Base(prevPath)
	if prev.Machine != s.Machine {
		s.PrevNote = fmt.Sprintf("previous nightly %s ran on %q, this one on %q: speeds not compared", prev.Date, prev.Machine, s.Machine)
		return
	}
	if prev.ModelSHA256 != s.ModelSHA256 {
		s.PrevNote = fmt.Sprintf("the default model changed (previous nightly %s: sha256 %.12s, now %.12s): the levers on it are not comparable",
			prev.Date, prev.ModelSHA256, s.ModelSHA256)
	}
	for i := range s.Entries {
		e := &s.Entries[i]
		for _, p := range prev.Entries {
			if p.Lever != e.Lever || p.B != e.B {
				continue
			}
			if len(e.PPB)+len(e.TGB) == 0 || len(p.PPB)+len(p.TGB) == 0 {
				continue // one side did not run: nothing to compare
			}
			if why := s.notComparable(prev, p, *e); why != "" {
				e.Against = append(e.Against, NightlyDiff{Metric: "pp, tg", Ratio: harness.Num(math.NaN()), Lo: harness.Num(math.NaN()), Hi: harness.Num(math.NaN()),
					Verdict: VerdictNotComparable, Note: why})
				continue
			}
			for _, m := range []struct {
				name       string
				base, head []float64
			}{{"pp", p.PPB, e.PPB}, {"tg", p.TGB, e.TGB}} {
				if len(m.base) == 0 || len(m.head) == 0 {
					continue
				}
				d := stats.CompareMedians(m.base, m.head, s.Threshold)
				e.Against = append(e.Against, NightlyDiff{Metric: m.name, Ratio: harness.Num(d.Ratio), Lo: harness.Num(d.Lo), Hi: harness.Num(d.Hi), Verdict: d.Verdict})
				if d.Verdict == stats.VerdictSlower {
					s.Regressions = append(s.Regressions, fmt.Sprintf("%s=%s %s: arm B %.4fx of %s [%.4f, %.4f]", e.Lever, e.B, m.name, d.Ratio, prev.Date, d.Lo, d.Hi))
				}
			}
		}
	}
}

// entryWorkload is the model sha256 and pp a lever ran on; known is false
// for an entry of a summary from before they were recorded (it ran the
// summary's model at an unrecorded pp).
func entryWorkload(sum *NightlySummary, e NightlyEntry) (sha string, pp int, known bool) {
	sha, pp = e.ModelSHA256, e.PP
	if sha == "" {
		sha = sum.ModelSHA256
	}
	if pp == 0 {
		pp = sum.PP
	}
	return sha, pp, pp > 0
}

// notComparable says why arm B now (e) and then (p, of prev) ran different
// workloads ("" when they ran the same). An entry of a summary from before
// workloads were recorded is taken as the default workload: before them
// every lever ran it, so it compares with a lever that still runs the
// default model and pp, and with no lever that declares its own.
func (s *NightlySummary) notComparable(prev *NightlySummary, p, e NightlyEntry) string {
	desc := func(model, sha string, pp int) string {
		name := "?"
		if model != "" {
			name = filepath.Base(model)
		}
		ps := "pp not recorded"
		if pp > 0 {
			ps = fmt.Sprintf("pp%d", pp)
		}
		return fmt.Sprintf("%s (sha256 %.12s) %s", name, sha, ps)
	}
	pm := p.Model
	if pm == "" {
		pm = prev.Model
	}
	em := e.Model
	if em == "" {
		em = s.Model
	}
	psha, ppp, pknown := entryWorkload(prev, p)
	esha, epp, _ := entryWorkload(s, e)
	if !pknown {
		if e.Workload == "" && psha == esha && epp == s.PP {
			return ""
		}
		return fmt.Sprintf("workload changed: then %s (before per-lever workloads), now %s", desc(pm, psha, ppp), desc(em, esha, epp))
	}
	if psha != esha || ppp != epp {
		return fmt.Sprintf("workload changed: then %s, now %s", desc(pm, psha, ppp), desc(em, esha, epp))
	}
	return ""
}

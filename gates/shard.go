package gates

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/stats"
)

// A nightly split over N machines: each shard runs a deterministic part of
// the levers and writes a self-describing partial summary; MergeShards makes
// the summary one unsharded run would have written.

// ShardEnv is the variable `--shard auto/N` reads: Kubernetes' index of an
// Indexed Job's pod (0..N-1).
const ShardEnv = "JOB_COMPLETION_INDEX"

// ShardInfo says which part of a nightly a summary holds, and how the levers
// were split, so a merge can check that every shard split them alike and
// name the levers of a shard that never reported.
type ShardInfo struct {
	Index int `json:"index"`
	Count int `json:"count"`
	// All is every lever spec of the nightly, in its order; Partition is
	// every shard's specs (Partition[Index] are this shard's).
	All       []string   `json:"all"`
	Partition [][]string `json:"partition"`
	// Balance says what the split was balanced by: the lever times of a
	// previous nightly (named with its sha256), or the count of levers.
	Balance string `json:"balance"`
	// SuiteEveryShard: each shard ran the suite gate of its own levers;
	// otherwise shard 0 ran it for every lever (Suites) and the other
	// shards' lever reports carry it as deferred until the merge.
	SuiteEveryShard bool         `json:"suite_every_shard"`
	Suites          []LeverSuite `json:"suites,omitempty"`
	// Control is a lever spec every shard runs besides its part (not in
	// the partition): the same lever on each shard's GPU, so the merge can
	// say whether the machines agree.
	Control string `json:"control,omitempty"`
}

// LeverSuite is gate 4 of one lever (its arm B's settings), run by shard 0
// for a lever of another shard.
type LeverSuite struct {
	Lever  string `json:"lever"`
	B      string `json:"b"`
	Result Result `json:"result"`
}

// Levers is this shard's lever specs.
func (s *ShardInfo) Levers() []string {
	if s.Index < 0 || s.Index >= len(s.Partition) {
		return nil
	}
	return s.Partition[s.Index]
}

// Name is "i/N".
func (s *ShardInfo) Name() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// ShardFileBase is a shard summary's file name, less .json/.md: a merge
// finds it by the pattern, and the previous-nightly lookup skips it.
func ShardFileBase(date string, index, count int) string {
	return fmt.Sprintf("nightly-%s-shard-%dof%d", date, index, count)
}

// IsShardFile reports whether a nightly file name is a shard's partial
// summary, not a night's.
func IsShardFile(name string) bool { return strings.Contains(filepath.Base(name), "-shard-") }

// ParseShard reads --shard: "i/N" with 0 <= i < N, or "auto/N", which takes
// i from $JOB_COMPLETION_INDEX (getenv).
func ParseShard(s string, getenv func(string) string) (index, count int, err error) {
	is, ns, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want i/N (i from 0) or auto/N", s)
	}
	count, err = strconv.Atoi(ns)
	if err != nil || count < 1 {
		return 0, 0, fmt.Errorf("%q: N must be a whole number >= 1", s)
	}
	if is == "auto" {
		v := getenv(ShardEnv)
		if v == "" {
			return 0, 0, fmt.Errorf("%q: $%s is not set (auto reads a Kubernetes Indexed Job's pod index)", s, ShardEnv)
		}
		is = v
	}
	index, err = strconv.Atoi(is)
	if err != nil || index < 0 || index >= count {
		return 0, 0, fmt.Errorf("%q: index %q must be a whole number from 0 to %d", s, is, count-1)
	}
	return index, count, nil
}

// Partition splits specs over n shards so their run times are even:
// longest first, each to the least loaded shard (ties: the lower index),
// each shard's specs then in the nightly's order. seconds gives each
// spec's time (from the last nightly); a spec without one counts as the
// median of the known times, and with no known time at all every spec
// counts 1 (a split by count). The same inputs give the same split on
// every machine.
//
// preload0 is work shard 0 has besides its levers (the other shards'
// suite gates), so it gets fewer levers.
func Partition(specs []string, seconds map[string]float64, n int, preload0 float64) [][]string {
	var known []float64
	for _, sp := range specs {
		if t, ok := seconds[sp]; ok && t > 0 {
			known = append(known, t)
		}
	}
	fill := 1.0
	if len(known) > 0 {
		sort.Float64s(known)
		fill = known[len(known)/2]
	}
	weight := make([]float64, len(specs))
	order := make([]int, len(specs))
	for i, sp := range specs {
		weight[i], order[i] = fill, i
		if t, ok := seconds[sp]; ok && t > 0 {
			weight[i] = t
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return weight[order[a]] > weight[order[b]] })
	load := make([]float64, n)
	load[0] = preload0
	owner := make([]int, len(specs))
	for _, i := range order {
		best := 0
		for k := 1; k < n; k++ {
			if load[k] < load[best] {
				best = k
			}
		}
		owner[i] = best
		load[best] += weight[i]
	}
	out := make([][]string, n)
	for i, sp := range specs {
		out[owner[i]] = append(out[owner[i]], sp)
	}
	for k := range out {
		if out[k] == nil {
			out[k] = []string{}
		}
	}
	return out
}

// SuiteSecondsOf is the suite gates' share of a nightly's lever times: the
// work shard 0 does for the other shards, (n-1)/n of it, when it runs
// every lever's suite.
func SuiteSecondsOf(s *NightlySummary, n int) float64 {
	if s == nil || n < 2 {
		return 0
	}
	t := 0.0
	for _, e := range s.Entries {
		t += e.SuiteSeconds
	}
	return t * float64(n-1) / float64(n)
}

// SecondsByLever is each lever's time in a nightly, keyed by both its name
// and NAME=B, so a spec of either form finds it.
func SecondsByLever(s *NightlySummary) map[string]float64 {
	m := map[string]float64{}
	if s == nil {
		return m
	}
	for _, e := range s.Entries {
		if e.Seconds > 0 {
			m[e.Lever] = e.Seconds
			m[e.Lever+"="+e.B] = e.Seconds
		}
	}
	return m
}

// ShardResult is one shard's partial summary and the file it was read from.
type ShardResult struct {
	Path string
	Sum  *NightlySummary
}

// IncompatibleShards refuses a merge of shards that are not parts of one
// nightly; Field names what differs.
type IncompatibleShards struct {
	Field, Detail string
}

func (e *IncompatibleShards) Error() string {
	return fmt.Sprintf("shards differ in %s: %s", e.Field, e.Detail)
}

// MergeShards makes the summary one unsharded run would have written:
// every lever of the nightly once, in its order. A lever of a shard that
// is missing is an INCONCLUSIVE entry naming the shard; a lever a shard
// did not reach (interrupted, timed out) is INCOMPLETE; a shard's FAIL
// stays a FAIL. Shards of different commits, machines, lever sets, shard
// counts, default workloads, thresholds or splits are refused. The merged
// summary is not yet compared with a previous night nor decided: the
// caller does both.
func MergeShards(shards []ShardResult) (*NightlySummary, error) {
	if len(shards) == 0 {
		return nil, &IncompatibleShards{"shards", "no shard summary (nightly-*-shard-*.json) found"}
	}
	for _, r := range shards {
		if r.Sum.Shard == nil {
			return nil, &IncompatibleShards{"shard", r.Path + " is a whole night's summary, not a shard's"}
		}
	}
	ref := shards[0]
	same := []struct {
		field string
		get   func(*NightlySummary) string
	}{
		{"shard count", func(s *NightlySummary) string { return strconv.Itoa(s.Shard.Count) }},
		{"commit", func(s *NightlySummary) string { return s.Commit }},
		{"machine (GPU model)", func(s *NightlySummary) string { return s.Machine }},
		{"levers", func(s *NightlySummary) string { return strings.Join(s.Shard.All, ",") }},
		{"model_sha256 (the default workload)", func(s *NightlySummary) string { return s.ModelSHA256 }},
		{"pp", func(s *NightlySummary) string { return strconv.Itoa(s.PP) }},
		{"tg", func(s *NightlySummary) string { return strconv.Itoa(s.TG) }},
		{"threshold", func(s *NightlySummary) string { return strconv.FormatFloat(s.Threshold, 'g', -1, 64) }},
		{"suite_every_shard", func(s *NightlySummary) string { return strconv.FormatBool(s.Shard.SuiteEveryShard) }},
		{"partition", func(s *NightlySummary) string { return fmt.Sprint(s.Shard.Partition) }},
		{"control", func(s *NightlySummary) string { return s.Shard.Control }},
	}
	for _, r := range shards[1:] {
		for _, f := range same {
			if a, b := f.get(ref.Sum), f.get(r.Sum); a != b {
				if f.field == "partition" { // say why they split differently
					a, b = a+" balanced "+ref.Sum.Shard.Balance, b+" balanced "+r.Sum.Shard.Balance
				}
				return nil, &IncompatibleShards{f.field, fmt.Sprintf("%s has %q, %s has %q", ref.Path, a, r.Path, b)}
			}
		}
	}
	n := ref.Sum.Shard.Count
	byIndex := make([]*ShardResult, n)
	for i := range shards {
		r := &shards[i]
		k := r.Sum.Shard.Index
		if byIndex[k] != nil {
			return nil, &IncompatibleShards{"shard index", fmt.Sprintf("shard %s given twice: %s and %s", r.Sum.Shard.Name(), byIndex[k].Path, r.Path)}
		}
		byIndex[k] = r
	}
	owner := map[string]int{}
	for k, part := range ref.Sum.Shard.Partition {
		for _, sp := range part {
			owner[sp] = k
		}
	}
	m := &NightlySummary{Machine: ref.Sum.Machine, Commit: ref.Sum.Commit, Model: ref.Sum.Model, ModelSHA256: ref.Sum.ModelSHA256,
		PP: ref.Sum.PP, TG: ref.Sum.TG, Threshold: ref.Sum.Threshold, Complete: true}
	for k, r := range byIndex {
		name := fmt.Sprintf("%d/%d", k, n)
		if r == nil {
			m.Missing = append(m.Missing, name)
			continue
		}
		if m.Date == "" || r.Sum.Date < m.Date {
			m.Date = r.Sum.Date
		}
		m.Complete = m.Complete && r.Sum.Complete
		m.Merged = append(m.Merged, MergedShard{Name: name, Path: r.Path, Date: r.Sum.Date, Complete: r.Sum.Complete, Levers: len(r.Sum.Shard.Levers()), GPU: r.Sum.GPU})
	}
	if ctl := ref.Sum.Shard.Control; ctl != "" {
		m.Control = compareControl(ctl, byIndex, m.Threshold)
	}
	for _, sp := range ref.Sum.Shard.All {
		if sp == ref.Sum.Shard.Control {
			m.Entries = append(m.Entries, m.Control.Entry)
			continue
		}
		k := owner[sp]
		name, _, _ := strings.Cut(sp, "=")
		r := byIndex[k]
		if r == nil {
			m.Entries = append(m.Entries, NightlyEntry{Spec: sp, Lever: name, Verdict: VerdictInconclusive,
				Line: fmt.Sprintf("shard %d/%d is missing: no summary of it among the merged folders (not run, crashed, or killed before it wrote one)", k, n)})
			continue
		}
		found := false
		for _, e := range r.Sum.Entries {
			if e.Spec == sp {
				e.From = r.Path
				m.Entries, found = append(m.Entries, e), true
				break
			}
		}
		switch {
		case found:
		case r.Sum.Complete:
			m.Entries = append(m.Entries, NightlyEntry{Spec: sp, Lever: name, Verdict: VerdictInconclusive,
				Line: fmt.Sprintf("shard %d/%d finished without an entry for this lever (%s)", k, n, r.Path)})
		default:
			m.Entries = append(m.Entries, NightlyEntry{Spec: sp, Lever: name, Verdict: VerdictIncomplete,
				Line: fmt.Sprintf("shard %d/%d stopped before this lever (interrupted or timed out; its summary is marked incomplete)", k, n)})
		}
	}
	return m, nil
}

// ControlComparison is the control lever of a sharded nightly on each
// shard's machine: its per-round B/A ratios from each shard against shard
// 0's (or the first present), by abtest compare's unpaired test.
type ControlComparison struct {
	Spec   string         `json:"spec"`
	Shards []ControlShard `json:"shards"`
	// Agree: no shard's ratio differs significantly from the first's.
	Agree bool `json:"agree"`
	// Entry is the control's line in the night's table: the worst of its
	// shard verdicts (a FAIL on any machine stays a FAIL).
	Entry NightlyEntry `json:"entry"`
}

// ControlShard is the control lever on one shard.
type ControlShard struct {
	Shard   string            `json:"shard"`
	GPU     string            `json:"gpu_uuid,omitempty"`
	Verdict string            `json:"verdict"`
	PP, TG  stats.RatioChange `json:"-"`
	Metrics []ControlMetric   `json:"metrics"`
}

// ControlMetric is one metric's B/A on a shard against the first shard's.
type ControlMetric struct {
	Metric  string      `json:"metric"`
	Median  harness.Num `json:"median_ratio"`
	Against harness.Num `json:"against_first"` // this median / the first shard's
	P       harness.Num `json:"p"`
	Verdict string      `json:"verdict"` // ~, faster, slower, ?
}

var verdictRank = map[string]int{VerdictFail: 0, VerdictNotCaught: 0, VerdictCannotRun: 1, VerdictIncomplete: 2, VerdictInconclusive: 3, VerdictSkip: 3, VerdictPartial: 4, VerdictPass: 5}

func compareControl(spec string, byIndex []*ShardResult, threshold float64) *ControlComparison {
	c := &ControlComparison{Spec: spec, Agree: true}
	name, _, _ := strings.Cut(spec, "=")
	var first map[string][]float64
	for k, r := range byIndex {
		if r == nil {
			continue
		}
		var e *NightlyEntry
		for i := range r.Sum.Entries {
			if r.Sum.Entries[i].Spec == spec {
				e = &r.Sum.Entries[i]
			}
		}
		sh := ControlShard{Shard: fmt.Sprintf("%d/%d", k, len(byIndex)), GPU: r.Sum.GPU, Verdict: "not run"}
		if e == nil {
			c.Shards = append(c.Shards, sh)
			c.Agree = false
			continue
		}
		sh.Verdict = e.Verdict
		if c.Entry.Verdict == "" || verdictRank[e.Verdict] < verdictRank[c.Entry.Verdict] {
			c.Entry = *e
			c.Entry.From = r.Path
		}
		ratios := map[string][]float64{}
		ratios["pp"], _ = stats.Ratios(e.PPA, e.PPB)
		ratios["tg"], _ = stats.Ratios(e.TGA, e.TGB)
		if first == nil {
			first = ratios
		}
		for _, m := range []string{"pp", "tg"} {
			if len(ratios[m]) == 0 {
				continue
			}
			d := stats.CompareRatios(first[m], ratios[m], threshold)
			cm := ControlMetric{Metric: m, Median: harness.Num(d.New), Against: harness.Num(d.Change), P: harness.Num(d.P), Verdict: d.Verdict}
			if d.Verdict != stats.VerdictSame {
				c.Agree = false
			}
			sh.Metrics = append(sh.Metrics, cm)
		}
		c.Shards = append(c.Shards, sh)
	}
	if c.Entry.Verdict == "" {
		c.Entry = NightlyEntry{Spec: spec, Lever: name, Verdict: VerdictInconclusive, Line: "the control lever ran on no shard present"}
	} else {
		c.Entry.Line += fmt.Sprintf(" (control: ran on every shard, worst verdict kept; machines agree: %v)", c.Agree)
	}
	return c
}

package harness

import (
	"math"

	"github.com/minfer-go/minfer/harness/gpumem"
)

// BaseNotSlower is the not-slower bar of ours against the base build
// (`abtest perf --base-minfer`): ours median >= base median / 1.015, the
// 1.5% bar of GATES.md gate 3's not-slower check for whole prefill and
// decode ("Default bar for the not-slower check: ... 1.015 for whole
// prefill and decode").
const BaseNotSlower = 1.015

// Engine names of a perf run's rounds: ours and the base build (the peer
// is named by its own name, llama-bench).
const (
	EngineOurs = "minfer"
	EngineBase = "base"
)

// PerfBase is the base build of a perf run: another minfer binary run
// beside ours with the same arguments and environment.
type PerfBase struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	// Commit is the base binary's VCS build stamp ("unknown" without one,
	// CommitNote saying so); Modified its vcs.modified.
	Commit     string `json:"commit"`
	Modified   bool   `json:"modified,omitempty"`
	CommitFrom string `json:"commit_from"`
	CommitNote string `json:"commit_note,omitempty"`
	// ArgsNote says how the base's bench arguments differ from ours (an
	// older CLI's spelling of the same run; "": identical).
	ArgsNote  string  `json:"args_note,omitempty"`
	Rounds    int     `json:"rounds"`     // rounds per row: one process of each engine each
	NotSlower float64 `json:"not_slower"` // BaseNotSlower
}

// NewPerfBase describes the base binary at path (its sha256 given): the
// commit is read from its build stamp, never assumed.
func NewPerfBase(path, sum string, rounds int) *PerfBase {
	b := &PerfBase{Path: path, SHA256: sum, Rounds: rounds, NotSlower: BaseNotSlower, Commit: "unknown"}
	if st, ok := readStamp(path); ok {
		b.Commit, b.Modified, b.CommitFrom = st.Revision, st.Modified, "the base minfer binary's build stamp"
	} else {
		b.CommitNote = "the base minfer binary carries no VCS build stamp: build it with -buildvcs=true inside a work tree of its commit"
	}
	return b
}

// CommitLine is the report's line of the base's commit.
func (b *PerfBase) CommitLine() string {
	if b.CommitFrom == "" {
		return b.Commit + " (" + b.CommitNote + ")"
	}
	m := ""
	if b.Modified {
		m = "; **modified**: built from a tree with uncommitted changes"
	}
	return b.Commit + " (from " + b.CommitFrom + m + ")"
}

// PerfRound is one round of a row with several engines: the order the
// engines' timed processes ran in.
type PerfRound struct {
	Round int      `json:"round"`
	Order []string `json:"order"` // minfer, base, llama-bench in the order they ran
}

// RoundOrder is the engines' order in round i (from 1): the engines as
// given (ours first) rotated left by i-1, so each engine goes first in
// turn; with two engines the order alternates (odd rounds ours first).
func RoundOrder(engines []string, i int) []string {
	n := len(engines)
	out := make([]string, n)
	for k := range engines {
		out[k] = engines[(k+i-1)%n]
	}
	return out
}

// BaseVs is ours against the base build on one test of one row.
type BaseVs struct {
	Test     string  `json:"test"`
	Ours     Num     `json:"ours"`                // our median tok/s
	Base     Num     `json:"base"`                // the base's median tok/s
	Ratio    Num     `json:"ratio"`               // Ours / Base
	Met      bool    `json:"met"`                 // Ours >= Base / BaseNotSlower
	SlowerBy float64 `json:"slower_by,omitempty"` // 1 - Ratio when missed
}

// NewBaseVs judges ours (median tok/s) against the base's: no slower than
// the base by more than GATES.md gate 3's 1.5%.
func NewBaseVs(test string, ours, base float64) BaseVs {
	v := BaseVs{Test: test, Ours: Num(ours), Base: Num(base), Ratio: Num(ours / base)}
	v.Met = ours >= base/BaseNotSlower && !math.IsNaN(ours)
	if !v.Met {
		v.SlowerBy = 1 - ours/base
	}
	return v
}

// BaseRow is the base build's measurement of one row (the same bench
// arguments and environment as ours, its processes interleaved with ours)
// and ours against it.
type BaseRow struct {
	Command string      `json:"command"` // one timed process's command line
	Rounds  []PerfRound `json:"rounds"`
	PP      *PerfMetric `json:"pp,omitempty"` // the base's, pooled over its rounds
	TG      *PerfMetric `json:"tg,omitempty"`
	VsPP    *BaseVs     `json:"vs_pp,omitempty"`
	VsTG    *BaseVs     `json:"vs_tg,omitempty"`
	// DeviceMemory is the peak over the base's timed processes.
	DeviceMemory *gpumem.Usage `json:"device_memory,omitempty"`
}

// judged: the base measured the row and ours was compared with it.
func (b *BaseRow) judged() bool { return b != nil && (b.VsPP != nil || b.VsTG != nil) }

// slower: ours was slower than the base by more than the bar on a test.
func (b *BaseRow) slower() bool {
	if b == nil {
		return false
	}
	for _, v := range []*BaseVs{b.VsPP, b.VsTG} {
		if v != nil && !v.Met {
			return true
		}
	}
	return false
}

// Slower reports whether ours was slower than the base build on the row.
func (b *BaseRow) Slower() bool { return b.slower() }

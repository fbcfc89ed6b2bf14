// Package runs holds the runs abtest makes, behind its commands: a lever
// run (its setup, workload, correctness model, needs and pre-registered
// rounds, then the gates), an A/A calibration, the nightly (whole or one
// shard) and the merge of its shards, the history of the nights, a bisect,
// the speed table, the pull-request run, and the ncu and SASS summaries. The
// commands parse flags into Options and call these; the markdown is the
// report package's.
package runs

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/minfer-go/minfer/gates"
)

// Error is a run that ended before a verdict, with abtest's exit code
// (gates.ExitCannotRun, ExitFail, ExitUndecided).
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// CannotRun is the error of a run that could not run (exit 2): bad flags,
// no model, a lever whose path does not exist on the run's backend.
func CannotRun(format string, a ...any) error {
	return &Error{gates.ExitCannotRun, fmt.Errorf(format, a...)}
}

// ExitCode is err's exit code: an Error's own, 2 for any other error, 0
// for nil.
func ExitCode(err error) int {
	var e *Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return gates.ExitCannotRun
}

// Options are the settings of `abtest run`, and the per-lever part of
// `abtest nightly`, `calibrate` and `pr`.
type Options struct {
	Lever, Baseline            string // NAME[=B], and arm A's value ("" the registry's)
	Model, Shape, Type, Device string
	// CorrectnessModels are the trained models parity and greedy may run
	// on (--correctness-model, repeatable: one per architecture); each run
	// takes the one of its model's architecture (correctnessFor).
	CorrectnessModels    []string
	Rounds, PP, TG, Reps int
	// Depth is the KV cache filled before each bench test of gates 3 and
	// 5 (--depth; a workload's dN sets it unless --depth is given).
	Depth                            int
	WarmupMS, BenchWarm, GenN        int
	Prompts, Gates, Out, Mutate      string
	Minfer, SynthDir, BenchOut       string
	Kernels, Calibration, SuiteCache string
	Seed                             uint64
	SuiteBins                        []string
	// With are MINFER_X=V settings pinned in both arms (--with): the
	// lever's A/B with another path on (an opt-in kernel family's two
	// builds, MINFER_KERNELS with MINFER_MMVQ_SPLIT=1); each is a deviation.
	With                             []string
	OnWorkload                       bool
	Timeout                          time.Duration
	BarPP, BarTG, ClaimBar, GraphTol float64
	// Given names the flags the user set (without the dashes): a given
	// flag that changes a value the lever's registry entry pre-registers
	// is a deviation the report prints first, and it decides whether the
	// declared workload applies.
	Given map[string]bool
}

func (f *Options) changed(name string) bool { return f.Given[name] }

// Check refuses values with no meaning. gates.Config.Defaults replaces a
// zero with the default, so a zero is refused here rather than silently
// run as something else; a negative or NaN bar would make a gate that
// cannot pass (or cannot fail).
func (f *Options) Check() error {
	if f.Rounds < 1 || f.PP < 1 || f.TG < 1 || f.Reps < 1 {
		return CannotRun("--rounds, --pp, --tg and --reps must be positive")
	}
	if f.Depth < 0 {
		return CannotRun("--depth %d: want a KV depth >= 0", f.Depth)
	}
	if f.GenN < 1 {
		return CannotRun("--gen-n %d: want a positive token count", f.GenN)
	}
	if f.WarmupMS < 1 || f.BenchWarm < 1 {
		return CannotRun("--warmup-ms %d / --bench-warmup-ms %d: want a positive budget in ms", f.WarmupMS, f.BenchWarm)
	}
	for _, b := range []struct {
		name string
		v    float64
	}{{"--bar-pp", f.BarPP}, {"--bar-tg", f.BarTG}} {
		if !(b.v >= 1) || math.IsInf(b.v, 0) {
			return CannotRun("%s %v: want a finite slowdown factor >= 1 (e.g. 1.015, 1.25)", b.name, b.v)
		}
	}
	if !(f.ClaimBar > 0) || math.IsInf(f.ClaimBar, 0) {
		return CannotRun("--claim-bar %v: want a finite positive fraction (e.g. 0.015)", f.ClaimBar)
	}
	if !(f.GraphTol > 0) || math.IsInf(f.GraphTol, 0) {
		return CannotRun("--graph-tol %v: want a finite positive max|diff| bar", f.GraphTol)
	}
	if f.Timeout < 0 {
		return CannotRun("--arm-timeout %v: want a positive duration (0: no limit)", f.Timeout)
	}
	for _, g := range f.SuiteBins {
		if _, err := filepath.Glob(g); err != nil {
			return CannotRun("--suite-bin %q: %v", g, err)
		}
	}
	return nil
}

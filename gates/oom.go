package gates

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/schema"
)

// Out of memory in an arm (GATES.md, issue 19): minfer exits with
// schema.ExitOutOfMemory when the model does not fit the machine (its
// memory plan refused before allocating, or an allocation failed later).
// The baseline (arm A) or the CPU reference not fitting says nothing of
// the lever: the gate could not run (Result.CannotRun), and a run with
// such a gate is COULD NOT RUN (exit 2), never a FAIL. Arm B out of memory
// where arm A fits is the lever's own cost: a FAIL with that evidence.

// armOutOfMemory reports whether err is an arm process that exited with
// schema.ExitOutOfMemory (not one killed at its time limit).
func armOutOfMemory(err error) bool {
	var ae *harness.ArmError
	return errors.As(err, &ae) && ae.Exec != nil && !ae.Exec.TimedOut && ae.Exec.Exit == schema.ExitOutOfMemory
}

// outOfMemory sets res for an out-of-memory of the named arm ("A", "B",
// or "the CPU reference") and reports whether err was one; res is left
// alone otherwise.
func outOfMemory(res *Result, cfg Config, arm string, err error) bool {
	if !armOutOfMemory(err) {
		return false
	}
	if arm == cfg.B.Name {
		res.Status = Fail
		res.Reason = fmt.Sprintf("arm %s (%s=%s) ran out of memory where arm %s fits: %v", arm, cfg.Lever.Name, cfg.B.Value, cfg.A.Name, err)
		return true
	}
	res.Status, res.CannotRun = Skip, true
	what := "arm " + arm + " (the baseline, " + cfg.Lever.Name + "=" + cfg.A.Value + ")"
	if arm != cfg.A.Name {
		what = arm
	}
	res.Reason = fmt.Sprintf("could not run: %s ran out of memory: the workload does not fit this machine, which says nothing of the lever: %v", what, err)
	return true
}

// armFailure is an arm process's failure with the arm it was.
type armFailure struct {
	Arm string
	Err error
}

func (e *armFailure) Error() string { return e.Err.Error() }
func (e *armFailure) Unwrap() error { return e.Err }

// failedArm is the arm an error of abRounds names ("" when none does).
func failedArm(err error) string {
	var af *armFailure
	if errors.As(err, &af) {
		return af.Arm
	}
	return ""
}

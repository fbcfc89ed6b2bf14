package gates

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/schema"
)

// A kernels file not built from its minfer's sources (issue 25): minfer
// refuses it before any launch and exits with schema.ExitStaleKernels. In
// any arm that is the set-up, not the lever: the gate could not run and
// the run is COULD NOT RUN (exit 2). `abtest pr` meets it per build folder
// at the first process of that build.

// staleKernels sets res for an arm whose minfer refused its kernels file
// and reports whether err was one; res is left alone otherwise.
func staleKernels(res *Result, arm string, err error) bool {
	var ae *harness.ArmError
	if !errors.As(err, &ae) || ae.Exec == nil || ae.Exec.TimedOut || ae.Exec.Exit != schema.ExitStaleKernels {
		return false
	}
	res.Status, res.CannotRun = Skip, true
	res.Reason = fmt.Sprintf("could not run: arm %s's kernels file was not built from its minfer's sources (rebuild it; nothing of the lever was measured): %v", arm, err)
	return true
}

// armSetup is what a gate asks of an arm process's failure before calling
// it the lever's: a stale kernels file (any arm), or an out-of-memory
// (oom.go: the baseline's is could-not-run, arm B's alone a FAIL).
func armSetup(res *Result, cfg Config, arm string, err error) bool {
	return staleKernels(res, arm, err) || outOfMemory(res, cfg, arm, err)
}

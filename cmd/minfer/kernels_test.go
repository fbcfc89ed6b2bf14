package main

import (
	"fmt"
	"testing"

	"github.com/minfer-go/minfer/cuda"
	"github.com/minfer-go/minfer/schema"
)

// A kernels file of other sources is a set-up error with its own exit code
// (abtest: could not run), not a failure of the path under test.
func TestExitCode_StaleKernelsFileIsExitStaleKernels(t *testing.T) {
	err := fmt.Errorf("model: --device cuda: %w", fmt.Errorf("cuda: kernels file k built from x: %w", cuda.ErrStaleKernels))
	if got := exitCode(err); got != schema.ExitStaleKernels {
		t.Errorf("exit %d, want %d", got, schema.ExitStaleKernels)
	}
}

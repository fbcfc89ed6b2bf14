package main

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/schema"
)

// A model whose plan does not fit is refused in one line naming the
// classes, the free memory, the context that fits and what lowers it, and
// minfer exits with schema.ExitOutOfMemory (not 1: no defect of a path).
func TestBench_PlanThatDoesNotFitIsOneLineExitOutOfMemory(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-c", "1000000000", "-p", "8", "-n", "2", "-r", "1")
	wantOneLineFailure(t, stdout, stderr, code, schema.ExitOutOfMemory, "at -c 1000000000 needs ")
	for _, want := range []string{"KV f32 ", "GiB free on cpu", "the largest context that fits is about", "-c N or MINFER_CACHE_TYPE=q8_0 lowers it"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal %q lacks %q", stderr, want)
		}
	}
}

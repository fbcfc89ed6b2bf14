package runs

import (
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
)

// A pr whose base build knows MINFER_CPU_EXACT computes gate 1's exact
// reference with it (the reference's own binary); a base that predates the
// lever hands it to the head's minfer.
func TestExactBin_TheHeadComputesTheExactReferenceForABaseWithoutTheLever(t *testing.T) {
	var with, without []harness.Lever
	for _, l := range levers.All() {
		with = append(with, harness.Lever{Lever: l})
		if l.Name != "MINFER_CPU_EXACT" {
			without = append(without, harness.Lever{Lever: l})
		}
	}
	if got := exactBin(with, "/head/minfer"); got != "" {
		t.Errorf("base with the lever: %q, want the reference's own", got)
	}
	if got := exactBin(without, "/head/minfer"); got != "/head/minfer" {
		t.Errorf("base without the lever: %q, want the head's", got)
	}
}

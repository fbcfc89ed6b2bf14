package runs

import (
	"errors"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
)

// A kill switch named with its baseline value (--lever MINFER_NO_X=1, arm A
// already 1) cannot run, and the message says which spelling measures the
// path; an explicit --baseline equal to the candidate gets no such hint.
func TestRun_KillSwitchAtItsBaselineValueSaysHowToNameIt(t *testing.T) {
	s := &setup{levers: []harness.Lever{{Lever: levers.Lever{Name: "MINFER_NO_KQ_MMVQ", Values: []string{"0", "1"}, ArmA: "1", ArmB: "0"}}}}
	_, err := s.config(&Options{}, "MINFER_NO_KQ_MMVQ=1", "")
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(err.Error(), "arms A and B are both MINFER_NO_KQ_MMVQ=1") ||
		!strings.Contains(err.Error(), "run --lever MINFER_NO_KQ_MMVQ to measure") {
		t.Fatalf("err %v", err)
	}
	_, err = s.config(&Options{}, "MINFER_NO_KQ_MMVQ=0", "0")
	if err == nil || strings.Contains(err.Error(), "to measure") {
		t.Fatalf("explicit baseline: err %v", err)
	}
}

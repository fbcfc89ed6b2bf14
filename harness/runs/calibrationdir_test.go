package runs

import (
	"os"
	"path/filepath"
	"testing"
)

// abtest pr writes under reports/pr/<run>/: on the H200 (2026-12-01) its
// runs found no calibration beside reports/calibration and took their power
// from their own rounds. The lookup walks up to the nearest calibration/.
func TestCalibrationDir_PRRunsFindTheReportsCalibration(t *testing.T) {
	root := t.TempDir()
	reports := filepath.Join(root, "reports")
	if err := os.MkdirAll(filepath.Join(reports, "calibration", "NVIDIA-H200"), 0o755); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(reports, "pr", "2026-12-01T222954-a-b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{reports, filepath.Join(reports, "pr"), deep} {
		if got := calibrationDir(out); got != reports {
			t.Errorf("calibrationDir(%s) = %s, want %s", out, got, reports)
		}
	}
	lone := filepath.Join(root, "elsewhere")
	if got := calibrationDir(lone); got != lone {
		t.Errorf("no calibration anywhere above: got %s, want --out itself (%s)", got, lone)
	}
}

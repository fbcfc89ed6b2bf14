package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/minfer-go/minfer/engine/model"
)

// The engine reaches the backend's device clock through model.DeviceClock
// (it never imports cuda): the backend must keep implementing it, or the
// slow_* seams would silently fall back to host sleeps on the device.
var _ model.DeviceClock = (*Backend)(nil)

// TestDeviceTimer_WithoutAnOpenSplitRecordsNothing: Synchronize outside a
// split (the instrumented runs synchronize after every node) and a second
// done add no time; the timer needs no device for that.
func TestDeviceTimer_WithoutAnOpenSplitRecordsNothing(t *testing.T) {
	var tm deviceTimer
	if err := tm.mark(nil); err != nil {
		t.Fatal(err)
	}
	if err := tm.done(); err != nil {
		t.Fatal(err)
	}
	if tm.total != 0 || tm.splits != 0 || tm.open {
		t.Fatalf("timer %+v: want nothing recorded", tm)
	}
	if err := tm.close(); err != nil {
		t.Fatal(err)
	}
}

// TestTestSpinKernel_SourceTakesTheNanosecondsTheLauncherPasses: the
// launcher passes one uint64 (8 bytes); a kernel that took a 32-bit count
// would read half of it, and one that read another clock than the global
// nanosecond timer would not wait in nanoseconds.
func TestTestSpinKernel_SourceTakesTheNanosecondsTheLauncherPasses(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("kernels", "testseam.cu"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	sig := regexp.MustCompile(`extern "C" __global__ void ` + testSpinKernel + `\(unsigned long long \w+\)`)
	if !sig.MatchString(src) {
		t.Errorf("kernels/testseam.cu: no %s(unsigned long long ns)", testSpinKernel)
	}
	if !regexp.MustCompile(`%%globaltimer`).MatchString(src) {
		t.Error("kernels/testseam.cu does not read the global nanosecond timer")
	}
}

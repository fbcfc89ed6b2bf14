package cuda

import (
	"fmt"
	"testing"
	"time"
)

// pinWatchdog panics (the test binary's stacks show where every goroutine
// waits) if stop is not called within d: a deadlocked pinned step then costs
// d of device time, not the suite's whole limit.
func pinWatchdog(what string, d time.Duration) (stop func()) {
	timer := time.AfterFunc(d, func() { panic(fmt.Sprintf("%s: still running after %v: a deadlock in the pinned step?", what, d)) })
	return func() { timer.Stop() }
}

// TestPinStep_DeviceOneHandoffPerDecodeStepAndBitwiseLogits: with
// MINFER_PIN_STEP=1 a decode step of qwen2-0.5b Q8_0 crosses to the device
// thread once (the step's Pin), without it several times (one per input
// write, graph run and logits read), and the logits of prefill and every
// step are bitwise the same; the census counts the pinned forwards.
func TestPinStep_DeviceOneHandoffPerDecodeStepAndBitwiseLogits(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	const steps = 12
	run := func(pin string) ([][]float32, float64, *Backend) {
		e := dsEngine(t, path, "cuda", 128, pin)
		b := dsDeviceBackend(t, e)
		var h0 int64
		out := cwdSteps(t, e, steps, func(i int) {
			if i == 4 { // past the decode graph's capture
				h0 = b.dev.Handoffs()
			}
		})
		return out, float64(b.dev.Handoffs()-h0) / float64(steps-4), b
	}
	plain, hPlain, _ := run("MINFER_PIN_STEP=0")
	stop := pinWatchdog("TestPinStep_DeviceOneHandoffPerDecodeStepAndBitwiseLogits", 2*time.Minute)
	pinned, hPinned, b := run("MINFER_PIN_STEP=1")
	stop()
	t.Logf("handoffs per decode step: %.2f plain, %.2f pinned", hPlain, hPinned)
	if hPinned != 1 || hPlain <= 1 {
		t.Errorf("handoffs per decode step: pinned %.2f (want 1), plain %.2f (want more)", hPinned, hPlain)
	}
	if got := b.PinnedSteps(); got != steps+1 {
		t.Errorf("pinned_steps %d, want %d (prefill and %d decode steps)", got, steps+1, steps)
	}
	for i := range plain {
		for j := range plain[i] {
			if plain[i][j] != pinned[i][j] {
				t.Fatalf("forward %d logit %d: plain %v, pinned %v", i, j, plain[i][j], pinned[i][j])
			}
		}
	}
}

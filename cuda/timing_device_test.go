package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
)

// dsDecodeTimes runs a prefill and n decode steps and returns, for each of
// the last keep steps, its wall time and the device time it added.
func dsDecodeTimes(t *testing.T, e *model.Engine, n, keep int) (wall, dev []time.Duration) {
	t.Helper()
	b := dsDeviceBackend(t, e)
	if _, err := e.Forward(dsPrompt, false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		d0 := b.DeviceTime()
		t0 := time.Now()
		if _, err := e.Forward([]int32{int32(100 + 7*i)}, false); err != nil {
			t.Fatal(err)
		}
		w := time.Since(t0)
		if i >= n-keep {
			wall = append(wall, w)
			dev = append(dev, b.DeviceTime()-d0)
		}
	}
	return wall, dev
}

func dsMedian(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestDeviceTime_DecodePositiveBelowWallAndReplayNearDirect: every decode
// step's device time (events at its split boundaries) is positive and at
// most its wall time, with graph replay (steps 4 on) and with direct
// launches; and the two agree within a factor of 3 (direct launches add
// the gaps in which the stream waits for the host, a replay has none).
func TestDeviceTime_DecodePositiveBelowWallAndReplayNearDirect(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-0.5b", "Q8_0")
	med := map[string]time.Duration{}
	for _, arm := range []struct {
		name string
		env  []string
	}{{"replay", nil}, {"direct", []string{"MINFER_NO_CUDA_GRAPH=1"}}} {
		e := dsEngine(t, path, "cuda", 256, arm.env...)
		wall, dev := dsDecodeTimes(t, e, 24, 16)
		for i := range dev {
			if dev[i] <= 0 || dev[i] > wall[i] {
				t.Errorf("%s step %d: device time %v, wall %v: want 0 < device <= wall", arm.name, i, dev[i], wall[i])
			}
		}
		st := dsDeviceBackend(t, e).CaptureStats()
		if arm.name == "replay" && st.Replays < 16 || arm.name == "direct" && st.Replays != 0 {
			t.Errorf("%s: capture stats %+v", arm.name, st)
		}
		med[arm.name] = dsMedian(dev)
		t.Logf("%s: median decode device time %v, wall %v (%d splits timed)", arm.name, dsMedian(dev), dsMedian(wall), dsDeviceBackend(t, e).TimedSplits())
	}
	if r := float64(med["direct"]) / float64(med["replay"]); r < 1.0/3 || r > 3 {
		t.Errorf("decode device time: direct %v, replay %v (ratio %.2f): want within a factor of 3", med["direct"], med["replay"], r)
	}
}

// TestDelay_GrowsDeviceTimeAndWallTimeByTheAskedTime: a Delay of d adds d
// to the device time (within 10% + 50 us) and takes at least d of wall
// time; zero is a no-op.
func TestDelay_GrowsDeviceTimeAndWallTimeByTheAskedTime(t *testing.T) {
	b := dsBackend(t, dsLevers(t))
	if err := b.Delay(0); err != nil || b.DeviceTime() != 0 {
		t.Fatalf("Delay(0): %v, device time %v", err, b.DeviceTime())
	}
	for _, d := range []time.Duration{200 * time.Microsecond, 3 * time.Millisecond} {
		d0 := b.DeviceTime()
		t0 := time.Now()
		if err := b.Delay(d); err != nil {
			t.Fatal(err)
		}
		wall, dev := time.Since(t0), b.DeviceTime()-d0
		t.Logf("Delay(%v): device %v, wall %v", d, dev, wall)
		if dev < d || dev > d+d/10+50*time.Microsecond || wall < d {
			t.Errorf("Delay(%v): device time +%v (want [%v, %v]), wall %v (want >= %v)", d, dev, d, d+d/10+50*time.Microsecond, wall, d)
		}
	}
}

// TestMutateSlowDecode_OnCUDAGrowsDecodeDeviceAndWallTimeByF: with
// slow_decode=1 every replayed decode step's device time is about twice
// the unmutated engine's (the spin is F x the step's own device time) and
// its wall time grows by at least 0.8 x the unmutated device time;
// slow_decode leaves the prefill alone.
func TestMutateSlowDecode_OnCUDAGrowsDecodeDeviceAndWallTimeByF(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-0.5b", "Q8_0")
	wall0, dev0 := dsDecodeTimes(t, dsEngine(t, path, "cuda", 256), 24, 16)
	mut := dsEngine(t, path, "cuda", 256, "MINFER_TEST_MUTATE=slow_decode")
	b := dsDeviceBackend(t, mut)
	wall1, dev1 := dsDecodeTimes(t, mut, 24, 16)
	r := float64(dsMedian(dev1)) / float64(dsMedian(dev0))
	t.Logf("decode median device %v -> %v (x%.3f), wall %v -> %v", dsMedian(dev0), dsMedian(dev1), r, dsMedian(wall0), dsMedian(wall1))
	if r < 1.7 || r > 2.3 {
		t.Errorf("slow_decode=1: decode device time x%.3f, want about 2 (1.7..2.3)", r)
	}
	if grow := dsMedian(wall1) - dsMedian(wall0); grow < dsMedian(dev0)*8/10 {
		t.Errorf("slow_decode=1: decode wall time grew by %v, want at least 0.8 x %v", grow, dsMedian(dev0))
	}
	// A prefill adds its own device time only: no spin.
	mut.Reset()
	splits := b.TimedSplits()
	if _, err := mut.Forward(dsPrompt, false); err != nil {
		t.Fatal(err)
	}
	pl, err := mut.Plan(len(dsPrompt), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.TimedSplits()-splits, int64(len(pl.Splits)); got != want {
		t.Errorf("slow_decode: a prefill timed %d intervals, want its %d splits (no spin)", got, want)
	}
}

// TestPlantedFailure_FailsOnlyUnderFailDeviceTestMutation is gate 4's
// mutation evidence on the device: with MINFER_TEST_MUTATE=fail_device_test
// the device suite has exactly one failure, this test; without it the test
// runs a real device check (an rms_norm against the CPU) and passes. Like
// every device test it skips without a device.
func TestPlantedFailure_FailsOnlyUnderFailDeviceTestMutation(t *testing.T) {
	dsNeedDevice(t)
	cfg, err := levers.FromEnv()
	if err != nil {
		t.Fatalf("levers: %v", err)
	}
	if cfg.Mutated(levers.MutateFailDeviceTest) {
		t.Fatal("planted failure: MINFER_TEST_MUTATE=fail_device_test")
	}
	r := rand.New(rand.NewPCG(41, 42))
	c := dsCase{name: "planted", nt: 2, tol: 1e-5}
	x := dsOperand(&c, "x", dsRand(r, 2*64, 1), 64)
	c.weights = append(c.weights, dsF32Weight("nw", dsRand(r, 64, 1), 64))
	c.build = func(b *graph.Builder, ids, pos, kvw int) int {
		return b.RmsNorm("norm", x(b, ids), "nw", 1e-6)
	}
	if d := dsCompare(t, c); d > c.tol {
		t.Errorf("rms_norm on the device: relative diff %.3g > %g", d, c.tol)
	}
}

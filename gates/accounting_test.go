package gates

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minfer-go/minfer/harness"
)

func TestOverhead_ProfilersAndDeviceTestsAreArmWorkNotHarness(t *testing.T) {
	r := &harness.Runner{}
	r.Account(harness.WorkMinfer, 5*time.Second) // before the run: excluded by MarkStart
	rec := &Record{}
	rec.MarkStart(time.Now().Add(-100*time.Second), r.Work())
	r.Account(harness.WorkMinfer, 60*time.Second)
	r.Account(harness.WorkProfilers, 20*time.Second) // ncu, nsys, importer, cuobjdump
	r.Account(harness.WorkProfilers, 10*time.Second)
	r.Account(harness.WorkDeviceTests, 6*time.Second)
	rec.UpdateOverhead(r)
	o := rec.Overhead
	if o.InArms != 60*time.Second || o.Execs != 1 || o.Profilers != 30*time.Second || o.ProfilerExecs != 2 || o.DeviceTests != 6*time.Second {
		t.Fatalf("%+v", o)
	}
	if h := o.Harness.Seconds(); h < 3.9 || h > 4.5 || o.Fraction < 0.039 || o.Fraction > 0.045 {
		t.Errorf("harness %.2f s (%.3f), want ~4 s of ~100", h, o.Fraction)
	}
}

// TestAB_ClockReadBeforeEveryRound: with a GPU, every round carries its own
// nvidia-smi reading (the header's reading is the one before the run).
func TestAB_ClockReadBeforeEveryRound(t *testing.T) {
	var n atomic.Int32
	probe := harness.Probe{
		LookPath: func(s string) (string, error) { return "/usr/bin/" + s, nil },
		Command: func(_ context.Context, name string, _ ...string) (string, error) {
			i := n.Add(1)
			return fmt.Sprintf("name, driver_version, a, b, c, d, e, f\nNVIDIA H200, 580.159.04, %d MHz, 3201 MHz, 1980 MHz, 0x0, 40, 200 W\n", 1900+i), nil
		},
	}
	cfg := leverCfg(t, "MINFER_NO_FUSE_FFN")
	cfg.Rounds, cfg.WarmupMS, cfg.BenchWarm = 3, 1, 1
	r := AB(context.Background(), cfg, &Env{M: fake(t), Probe: probe, HasGPU: true})
	if r.AB == nil || len(r.AB.Rounds) != 3 {
		t.Fatalf("%s: %s", r.Status, r.Reason)
	}
	seen := map[string]bool{}
	for _, rd := range r.AB.Rounds {
		if rd.Clocks == nil || !strings.HasPrefix(rd.Clock, "SM 19") || seen[rd.Clock] {
			t.Errorf("round %d clock %q", rd.I, rd.Clock)
		}
		seen[rd.Clock] = true
	}
}

func TestProfile_CudaGraphEvidenceShowsCapturedReplayedPerArm(t *testing.T) {
	r := profileWithFake(t, "MINFER_NO_CUDA_GRAPH")
	want := "CUDA graphs A captured 0, replayed 0; B captured 2, replayed 126"
	if !strings.HasPrefix(r.Liveness, "PASS") || !strings.HasPrefix(r.Evidence, want) {
		t.Fatalf("%s: %s — %s", r.Status, r.Reason, r.Evidence)
	}
	if got := GraphsLine(&ProfileDetail{}); got != `A no {"cuda_graphs"} line; B no {"cuda_graphs"} line` {
		t.Errorf("absent lines: %q", got)
	}
}

// TestAB_DecodeBandwidthFromTheModelsBytesAndTheMedians: the A/B gate states
// each arm's decode GB/s and its share of the HBM floor from `minfer info`'s
// weight bytes per token and the arm's median tg (issue 6); a failing info
// leaves the reason, never zeros.
func TestAB_DecodeBandwidthFromTheModelsBytesAndTheMedians(t *testing.T) {
	cfg := leverCfg(t, "MINFER_NO_FUSE_FFN")
	cfg.Rounds, cfg.WarmupMS, cfg.BenchWarm = 3, 1, 1
	r := AB(context.Background(), cfg, &Env{M: fake(t)})
	d := r.AB
	if d == nil || d.Decode == nil || d.Decode.Why != "" {
		t.Fatalf("%s: %s; decode %+v", r.Status, r.Reason, d.Decode)
	}
	var ma, mb float64
	for _, m := range append(append([]Metric{}, d.Metrics...), d.Wall...) {
		if m.Key == "tg" && m.Basis == BasisWall {
			ma, mb = m.SummaryA.Median, m.SummaryB.Median
		}
	}
	dd := d.Decode
	if dd.BytesPerToken != 1000 || math.Abs(float64(dd.A.GBs)-1000*ma/1e9) > 1e-12 || math.Abs(float64(dd.B.GBs)-1000*mb/1e9) > 1e-12 {
		t.Errorf("bytes %d, GB/s A %v (median %v), B %v (median %v)", dd.BytesPerToken, dd.A.GBs, ma, dd.B.GBs, mb)
	}
	if math.Abs(float64(dd.A.HBMShare)-float64(dd.A.GBs)/harness.HBMCopyGBs) > 1e-15 {
		t.Errorf("share %v of %v GB/s", dd.A.HBMShare, dd.A.GBs)
	}
	m := fake(t)
	m.R = &harness.Runner{Bin: "/nonexistent/minfer"}
	env := &Env{M: m}
	if got := abDecode(context.Background(), Config{}, env, d); got.Why == "" || got.BytesPerToken != 0 {
		t.Errorf("minfer info failing: %+v, want a reason and no numbers", got)
	}
}

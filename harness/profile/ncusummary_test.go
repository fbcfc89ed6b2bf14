package profile

import (
	"math"
	"strings"
	"testing"
)

func launchesFixture(t *testing.T) NCUWindow {
	t.Helper()
	ms, err := ParseNCUCSV(fixture(t, "ncu-launches.csv"))
	if err != nil {
		t.Fatal(err)
	}
	win, err := SummarizeNCU(ms, 4300)
	if err != nil {
		t.Fatal(err)
	}
	return win
}

func TestParseNCUCSV_PerLaunchGeometryAndCommaKernelNames(t *testing.T) {
	ms, err := ParseNCUCSV(fixture(t, "ncu-launches.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var gemm, mmvq *NCUMetric
	for i := range ms {
		switch {
		case ms[i].Kernel == "void gemm<int, 2>(const float *, float *, int)" && ms[i].Metric == NCUDuration:
			gemm = &ms[i]
		case ms[i].Kernel == "minfer_mmvq_q8_0" && ms[i].Metric == NCUDuration:
			mmvq = &ms[i]
		}
	}
	if gemm == nil || mmvq == nil {
		t.Fatalf("kernel names with commas and parentheses not kept whole: %+v", ms)
	}
	if gemm.Geometry[NCUGeometry{Grid: "(28, 4, 1)", Block: "(256, 1, 1)"}] != 1 {
		t.Errorf("gemm geometry %v", gemm.Geometry)
	}
	if len(mmvq.Geometry) != 2 || mmvq.Launches() != 2 {
		t.Errorf("mmvq: %d launches, geometry %v; want 2 launches of 2 grids", mmvq.Launches(), mmvq.Geometry)
	}
}

func TestSummarizeNCU_SortedByTotalDurationNotLaunchesOrName(t *testing.T) {
	win := launchesFixture(t)
	var got []string
	for _, k := range win.Kernels {
		got = append(got, k.Kernel)
	}
	// gemm: 1 launch of 30 us; mmvq: 2 launches of 10 us; rms_norm: 2 us.
	want := []string{"void gemm<int, 2>(const float *, float *, int)", "minfer_mmvq_q8_0", "minfer_rms_norm_f32"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("order %q, want %q", got, want)
	}
	if win.Launches != 4 || win.TotalNS != 52048 {
		t.Errorf("window %d launches %v ns, want 4 and 52048", win.Launches, win.TotalNS)
	}
	if s := win.Kernels[0].Share; math.Abs(s-30000.0/52048) > 1e-12 {
		t.Errorf("gemm share %v", s)
	}
}

func TestSummarizeNCU_GBsIsBytesPerLaunchOverMeanDuration(t *testing.T) {
	win := launchesFixture(t)
	m := win.Kernels[1]
	if m.Kernel != "minfer_mmvq_q8_0" || m.Launches != 2 || m.MeanNS != 10000 || m.TotalNS != 20000 {
		t.Fatalf("mmvq %+v", m)
	}
	// (32,000,000 read + 1,000 written) bytes / 10,000 ns = 3200.1 GB/s.
	if m.BytesPerLaunch != 32001000 || math.Abs(m.GBs-3200.1) > 1e-9 || math.Abs(m.OfFloor-3200.1/4300) > 1e-12 {
		t.Errorf("bytes %v GB/s %v of floor %v", m.BytesPerLaunch, m.GBs, m.OfFloor)
	}
	if m.Occupancy != 60 {
		t.Errorf("occupancy %v: the n/a launch must be left out, not read as 0", m.Occupancy)
	}
	if g := win.Kernels[0].GBs; math.Abs(g-50) > 1e-9 {
		t.Errorf("gemm GB/s %v, want 1.5 MB / 30 us = 50", g)
	}
}

func TestWriteNCUTable_AbsentMetricIsDashNeverZero(t *testing.T) {
	win := launchesFixture(t)
	var b strings.Builder
	if err := WriteNCUTable(&b, "qwen2-7b Q8_0 decode", win); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var rms string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| `minfer_rms_norm_f32`") {
			rms = l
		}
	}
	cells := strings.Split(rms, " | ")
	// kernel, launches, share, mean, bytes, GB/s, floor, SM, issue, tensor, DRAM, regs, occ, bank, smem, geom, bound
	if len(cells) != 17 {
		t.Fatalf("rms row has %d cells: %q\n%s", len(cells), rms, out)
	}
	if cells[9] != "-" {
		t.Errorf("tensor pipe (absent for rms_norm) shows %q, want -", cells[9])
	}
	if cells[13] != "-" || cells[14] != "-" {
		t.Errorf("bank conflicts / dyn smem (absent from the CSV) show %q %q, want -", cells[13], cells[14])
	}
	if cells[8] != "10.0" || cells[4] != "28.67 kB" || cells[15] != "1 × 1024" {
		t.Errorf("issue %q bytes %q geometry %q", cells[8], cells[4], cells[15])
	}
	if !strings.Contains(out, "| `void gemm<int, 2>(const float *, float *, int)` | 1 | 57.6% |") {
		t.Errorf("gemm row missing or wrong:\n%s", out)
	}
	if !strings.Contains(out, "Biggest share: `void gemm<int, 2>(const float *, float *, int)` (57.6% of the window): **compute/issue bound** (tensor pipe 66% >= 50%)") {
		t.Errorf("verdict line:\n%s", out)
	}
	if !strings.Contains(out, "3584 × 128 (1); 896 × 128 (1)") {
		t.Errorf("mmvq geometries:\n%s", out)
	}
}

// The rule's direction: a kernel at the floor is memory bound, one far
// below it with a busy tensor pipe is compute bound, and the thresholds sit
// where NCUBoundRule says. An inverted comparison fails here.
func TestClassifyBound_RuleDirectionAndThresholds(t *testing.T) {
	win := launchesFixture(t)
	want := map[string]string{
		"minfer_mmvq_q8_0": "memory bound",
		"void gemm<int, 2>(const float *, float *, int)": "compute/issue bound",
		"minfer_rms_norm_f32":                            "latency/occupancy bound",
	}
	for _, k := range win.Kernels {
		if k.Bound.Class != want[k.Kernel] {
			t.Errorf("%s: %q (%s), want %q", k.Kernel, k.Bound.Class, k.Bound.Why, want[k.Kernel])
		}
	}
	base := NCUKernelSummary{GBs: 100, OfFloor: 0.1, TensorPct: 5, IssuePct: 20, SMPct: 20, Occupancy: 50}
	cases := []struct {
		name string
		edit func(*NCUKernelSummary)
		want string
	}{
		{"nothing near a peak", func(*NCUKernelSummary) {}, "latency bound"},
		{"59% of floor", func(k *NCUKernelSummary) { k.OfFloor = 0.59 }, "latency bound"},
		{"60% of floor", func(k *NCUKernelSummary) { k.OfFloor = 0.60 }, "memory bound"},
		{"memory wins over tensor", func(k *NCUKernelSummary) { k.OfFloor, k.TensorPct = 0.9, 90 }, "memory bound"},
		{"tensor 49.9", func(k *NCUKernelSummary) { k.TensorPct = 49.9 }, "latency bound"},
		{"tensor 50", func(k *NCUKernelSummary) { k.TensorPct = 50 }, "compute/issue bound"},
		{"issue 70", func(k *NCUKernelSummary) { k.IssuePct = 70 }, "compute/issue bound"},
		{"SM 60", func(k *NCUKernelSummary) { k.SMPct = 60 }, "SM-unit bound"},
		{"occupancy 24", func(k *NCUKernelSummary) { k.Occupancy = 24 }, "latency/occupancy bound"},
		{"occupancy 25", func(k *NCUKernelSummary) { k.Occupancy = 25 }, "latency bound"},
		{"no GB/s, nothing else holds", func(k *NCUKernelSummary) { k.OfFloor = math.NaN() }, "undetermined"},
		{"no tensor, issue holds", func(k *NCUKernelSummary) { k.TensorPct, k.IssuePct = math.NaN(), 80 }, "compute/issue bound"},
	}
	for _, c := range cases {
		k := base
		c.edit(&k)
		if got := ClassifyBound(k); got.Class != c.want {
			t.Errorf("%s: %q (%s), want %q", c.name, got.Class, got.Why, c.want)
		}
	}
}

func TestSummarizeNCU_RejectsEmptyAndFlagsLoadTimeKernels(t *testing.T) {
	if _, err := SummarizeNCU(nil, 4300); err == nil {
		t.Error("an empty CSV summarized")
	}
	if _, err := SummarizeNCU([]NCUMetric{{Kernel: "k", Metric: NCUDuration, Unit: "nsecond", Values: []float64{1}}}, 0); err == nil {
		t.Error("floor 0 accepted")
	}
	win, err := SummarizeNCU([]NCUMetric{
		{Kernel: "minfer_repack_q8_0", Metric: NCUDuration, Unit: "usecond", Values: []float64{2}},
		{Kernel: "k", Metric: NCUDuration, Unit: "fortnight", Values: []float64{1}},
	}, 4300)
	if err != nil {
		t.Fatal(err)
	}
	if win.Kernels[0].TotalNS != 2000 || !math.IsNaN(win.Kernels[1].TotalNS) {
		t.Errorf("usecond not scaled or unknown unit read: %+v", win.Kernels)
	}
	notes := strings.Join(win.Notes, "\n")
	if !strings.Contains(notes, "load-time kernel minfer_repack_q8_0") || !strings.Contains(notes, `"fortnight"`) {
		t.Errorf("notes %q", notes)
	}
}

func TestNCUTitle_ReadsTheScriptsFileNames(t *testing.T) {
	for in, want := range map[string]string{
		"/out/ncu-qwen2-7b-Q4_K_M-decode.csv": "qwen2-7b Q4_K_M decode",
		"ncu-qwen3-0.6b-Q8_0-prefill.csv":     "qwen3-0.6b Q8_0 prefill",
		"other.csv":                           "other.csv",
		"ncu-x.csv":                           "ncu-x.csv",
	} {
		if got := NCUTitle(in); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}

// TestSummarizeNCU_ReadsTheH200sBaseUnits: one launch as ncu 2025.3 wrote it
// on the H200 with --print-units base ("ns", "byte/block"); before the fix the
// durations, GB/s and shares of every table were "-".
func TestSummarizeNCU_ReadsTheH200sBaseUnits(t *testing.T) {
	ms, err := ParseNCUCSV(fixture(t, "ncu-h200-2025.3-one-launch.csv"))
	if err != nil {
		t.Fatal(err)
	}
	win, err := SummarizeNCU(ms, 4300)
	if err != nil {
		t.Fatal(err)
	}
	if len(win.Kernels) != 1 || len(win.Notes) != 0 {
		t.Fatalf("kernels %+v notes %q", win.Kernels, win.Notes)
	}
	k := win.Kernels[0]
	// 144,299,520 read + 2,479,360 written bytes in 39,680 ns.
	if k.MeanNS != 39680 || k.BytesPerLaunch != 146778880 || math.Abs(k.GBs-146778880.0/39680) > 1e-9 {
		t.Errorf("mean %v ns, bytes %v, GB/s %v", k.MeanNS, k.BytesPerLaunch, k.GBs)
	}
}

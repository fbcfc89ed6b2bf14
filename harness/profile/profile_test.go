package profile

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseNCUCSV_StripsSeparatorsAndKeepsNAAsMissing(t *testing.T) {
	ms, err := ParseNCUCSV(fixture(t, "ncu.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("got %d metrics, want 3: %+v", len(ms), ms)
	}
	byName := map[string]NCUMetric{}
	for _, m := range ms {
		if m.Kernel != "mmq_q4k" {
			t.Errorf("kernel %q", m.Kernel)
		}
		byName[m.Metric] = m
	}
	if d := byName["dram__bytes_read.sum"]; d.Mean() != 12582913 || d.Unit != "byte" {
		t.Errorf("dram bytes mean %v unit %q, want 12582913 byte", d.Mean(), d.Unit)
	}
	if d := byName["gpu__time_duration.sum"]; d.Mean() != 4100 {
		t.Errorf("duration mean %v, want 4100", d.Mean())
	}
	occ := byName["sm__warps_active.avg.pct_of_peak_sustained_active"]
	if occ.Missing != 1 || len(occ.Values) != 1 || occ.Values[0] != 61.25 {
		t.Errorf("occupancy %+v: want one n/a kept missing and 61.25", occ)
	}
}

func TestParseNumber_NAIsMissingNotZero(t *testing.T) {
	if _, ok := ParseNumber("n/a"); ok {
		t.Error("n/a parsed as a number")
	}
	if v, ok := ParseNumber("1,234,567.5"); !ok || v != 1234567.5 {
		t.Errorf("got %v %v", v, ok)
	}
}

func TestParseNsysKernSum_ReadsRowsAfterChatter(t *testing.T) {
	ks, err := ParseNsysKernSum(fixture(t, "nsys.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 2 || ks[0].Name != "mmq_q4k" || ks[0].TotalNS != 1234567 || ks[0].Instances != 300 {
		t.Fatalf("got %+v", ks)
	}
	if ks[1].Name != "rms_norm_f32(const float *, float *, int)" || ks[1].MedNS != 2560 {
		t.Errorf("row 2: %+v", ks[1])
	}
	if _, err := ParseNsysKernSum("does not contain CUDA kernel data"); err == nil {
		t.Error("want an error for an empty report")
	}
}

func TestParseSASS_CountsBaseOpcodesPerFunction(t *testing.T) {
	fs, err := ParseSASS(fixture(t, "sass.txt"))
	if err != nil || len(fs) != 2 {
		t.Fatalf("got %d functions (%v), want 2", len(fs), err)
	}
	m := fs[0]
	if m.Name != "mmq_q4k" || m.Arch != "sm_90a" {
		t.Errorf("function %q arch %q", m.Name, m.Arch)
	}
	want := map[string]int{"LDC": 1, "S2R": 1, "LDGSTS": 1, "IMMA": 2, "EXIT": 1, "BRA": 1}
	for op, n := range want {
		if m.Opcodes[op] != n {
			t.Errorf("%s: %d, want %d", op, m.Opcodes[op], n)
		}
	}
	if m.Total != 7 || !m.Has("IMMA") || fs[1].Has("IMMA") || fs[1].Opcodes["FFMA"] != 1 {
		t.Errorf("census %+v / %+v", m, fs[1])
	}
}

func TestParseCensus_AcceptsTheBackendLineAmongOtherStderr(t *testing.T) {
	in := "minfer: model: cuda backend on NVIDIA H200\n" +
		`{"launch_census":{"minfer_mmv_q8_0":123,"minfer_rms_norm_f32":57}}` + "\n" +
		`{"cuda_graphs":{"captured":2,"replayed":40}}` + "\n" +
		`{"op_timing":{"direct_launches_only":true,"kernels":[{"kernel":"x","count":1,"total_ns":5}]}}` + "\n"
	c, err := ParseCensus(in)
	if err != nil || len(c) != 2 || c["minfer_mmv_q8_0"] != 123 || c["minfer_rms_norm_f32"] != 57 {
		t.Fatalf("%v %v", c, err)
	}
	if c, err := ParseCensus(`{"launch_census":{}}`); err != nil || c == nil || len(c) != 0 {
		t.Errorf("empty census (CPU run): %v %v", c, err)
	}
	for _, bad := range []string{"no json here", `{"minfer_mmv_q8_0":123}`, `{"cuda_graphs":{"captured":1,"replayed":2}}`, `{"launch_census":{"k":"many"}}`} {
		if _, err := ParseCensus(bad); err == nil {
			t.Errorf("%q accepted as a census", bad)
		}
	}
	d := Diff(Census{"a": 1, "b": 2}, Census{"b": 2, "c": 3})
	if len(d) != 2 || d[0].Kernel != "a" || d[1].B != 3 {
		t.Errorf("diff %+v", d)
	}
}

func TestParseGraphs_CapturedReplayedLine(t *testing.T) {
	g, ok, err := ParseGraphs("log line\n{\"cuda_graphs\":{\"captured\":2,\"replayed\":40}}\n{\"launch_census\":{}}")
	if err != nil || !ok || g.Captured != 2 || g.Replayed != 40 {
		t.Fatalf("%+v %v %v", g, ok, err)
	}
	if _, ok, err := ParseGraphs(`{"launch_census":{}}`); ok || err != nil {
		t.Errorf("absent line: ok %v err %v", ok, err)
	}
	if _, _, err := ParseGraphs(`{"cuda_graphs":{"captured":2}}`); err == nil {
		t.Error("a line without replayed accepted")
	}
}

func TestParseOpTiming_KernelsSortedByTotal(t *testing.T) {
	in := "warn: something\n" + `{"op_timing":{"direct_launches_only":true,"note":"n","kernels":[{"kernel":"minfer_rms_norm_f32","count":57,"total_ns":57000},{"kernel":"minfer_mmv_q8_0","count":196,"total_ns":392000}]}}`
	ot, err := ParseOpTiming(in)
	if err != nil || !ot.DirectLaunchesOnly || len(ot.Kernels) != 2 || ot.Kernels[0].Kernel != "minfer_mmv_q8_0" || ot.Kernels[0].AvgNS() != 2000 {
		t.Fatalf("%+v %v", ot, err)
	}
	if _, err := ParseOpTiming(`{"launch_census":{}}`); err == nil {
		t.Error("want an error without an op_timing line")
	}
}

func TestParseGoTestV_CountsPassFailSkipWithNames(t *testing.T) {
	r := ParseGoTestV(fixture(t, "gotest_v.txt"))
	if r.Passed != 2 || r.Failed != 1 || r.Skipped != 1 {
		t.Fatalf("got %+v", r)
	}
	if r.Failures[0] != "TestCaptureReplay_Bitwise" || r.Skips[0] != "TestPinnedReadback" {
		t.Errorf("names %+v", r)
	}
	if got := r.FailureLogs["TestCaptureReplay_Bitwise"]; len(got) != 1 || got[0] != "capture_test.go:41: replay differs at 17: 0.5 vs 0.25" {
		t.Errorf("the failed test's log: %q", got)
	}
	if len(r.FailureLogs) != 1 {
		t.Errorf("logs kept for passing or skipped tests: %v", r.FailureLogs)
	}
	p := ParseGoTestV("=== RUN   TestX\n    x_test.go:3: before\npanic: boom\n")
	if p.Failed != 1 || p.Failures[0] != "TestX (panic)" {
		t.Errorf("panic: %+v", p)
	}
	if got := p.FailureLogs["TestX (panic)"]; len(got) != 2 || got[1] != "panic: boom" {
		t.Errorf("the panicking test's log: %q", got)
	}
	_ = math.NaN
}

// A subtest's error lines are its own: go test -v prints a parent's "---
// FAIL" lines for its subtests after the last subtest ran, and interleaves
// parallel tests under "=== NAME" (session 26: the suite gate kept the next
// subtest's log lines for the failing one, and none of its errors).
func TestParseGoTestV_ASubtestKeepsItsOwnLines(t *testing.T) {
	r := ParseGoTestV(`=== RUN   TestMMQ
    mmq_test.go:10: parent line
=== RUN   TestMMQ/q4_k
    mmq_test.go:20: default arm: 0 plain launches
=== RUN   TestMMQ/q5_k
    kernels.go:89: kernels: from the cache
=== RUN   TestPar
=== PAUSE TestPar
=== CONT  TestPar
    par_test.go:5: par before
=== NAME  TestMMQ/q5_k
    mmq_test.go:30: q5 line
=== NAME  TestPar
    par_test.go:6: par failed here
--- FAIL: TestMMQ (2.00s)
    --- FAIL: TestMMQ/q4_k (1.00s)
    --- PASS: TestMMQ/q5_k (1.00s)
--- FAIL: TestPar (0.10s)
FAIL
`)
	if r.Failed != 3 || r.Passed != 1 {
		t.Fatalf("counts %+v", r)
	}
	for name, want := range map[string][]string{
		"TestMMQ/q4_k": {"mmq_test.go:20: default arm: 0 plain launches"},
		"TestMMQ":      {"mmq_test.go:10: parent line"},
		"TestPar":      {"par_test.go:5: par before", "par_test.go:6: par failed here"},
	} {
		if got := r.FailureLogs[name]; !slices.Equal(got, want) {
			t.Errorf("%s: kept %q, want %q", name, got, want)
		}
	}
}

// The backend's real line carries more than captured/replayed (cmd/minfer
// deviceReport): the extra fields are read, not rejected.
func TestParseGraphs_BackendLineWithInvalidationsAndAborts(t *testing.T) {
	g, ok, err := ParseGraphs(`{"cuda_graphs":{"captured":3,"replayed":120,"invalidated":1,"aborted":0,"disabled":false}}`)
	if err != nil || !ok || g.Captured != 3 || g.Replayed != 120 || g.Invalidated != 1 || g.Disabled {
		t.Fatalf("%+v %v %v", g, ok, err)
	}
}

// Two listings compare function by function on their instruction text:
// addresses and encodings are not compared, a changed operand or branch
// target is a change, and functions only in one listing are added/removed.
func TestDiffSASS_InstructionTextPerFunction(t *testing.T) {
	b := fixture(t, "sass.txt")
	listing := func(s string) SASSListing {
		t.Helper()
		l, err := ParseSASSListing(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	old := listing(b)
	if ins := old["sm_90a mmq_q4k"]; len(ins) != 7 || ins[3] != "IMMA.16832.S8.S8 R8, R12, R16, R8" || ins[4] != "@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20" {
		t.Fatalf("mmq_q4k: %q", ins)
	}
	if len(old["sm_90a rms_norm_f32"]) != 3 {
		t.Fatalf("rms_norm_f32: %q (listing keys %v)", old["sm_90a rms_norm_f32"], len(old))
	}
	// Moved addresses and encodings only: the same.
	moved := strings.ReplaceAll(strings.ReplaceAll(b, "/*0010*/", "/*0110*/"), "0x0000000000007919", "0x1111111111117919")
	if d := DiffSASS(old, listing(moved)); len(d.Changed)+len(d.Added)+len(d.Removed) != 0 || len(d.Same) != len(old) {
		t.Errorf("addresses/encodings moved: %+v", d)
	}
	// One operand changed in rms_norm_f32, mmq_q4k renamed.
	edited := strings.Replace(b, "FFMA R2, R3, R4, R2", "FFMA R2, R3, R5, R2", 1)
	edited = strings.Replace(edited, "Function : mmq_q4k", "Function : mmq_q4k_v2", 1)
	d := DiffSASS(old, listing(edited))
	if strings.Join(d.Changed, ",") != "sm_90a rms_norm_f32" || strings.Join(d.Added, ",") != "sm_90a mmq_q4k_v2" || strings.Join(d.Removed, ",") != "sm_90a mmq_q4k" {
		t.Errorf("edited: %+v", d)
	}
}

// The parser used to drop pdl_launches, so MINFER_PDL's liveness rule
// (pdl_launches > 0 with PDL on) could never pass.
func TestParseGraphs_KeepsPDLLaunches(t *testing.T) {
	g, ok, err := ParseGraphs(`{"cuda_graphs":{"captured":2,"replayed":126,"pdl_launches":338}}`)
	if err != nil || !ok || g.PDLLaunches != 338 || g.Captured != 2 {
		t.Fatalf("%+v %v %v", g, ok, err)
	}
}

// A listing the scanner cannot read to its end (a line past its 1 MiB
// buffer: a wrong file given as a saved listing) is an error, not the
// functions before the break: a census or a diff of part of a build would
// read as one of the whole.
func TestParseSASS_AnUnreadableListingIsAnError(t *testing.T) {
	b := fixture(t, "sass.txt")
	cut := strings.Index(b, "Function : rms_norm_f32")
	bad := b[:cut] + strings.Repeat("x", 2<<20) + "\n" + b[cut:]
	if fs, err := ParseSASS(bad); err == nil {
		t.Errorf("ParseSASS read %d functions and no error", len(fs))
	}
	if l, err := ParseSASSListing(bad); err == nil {
		t.Errorf("ParseSASSListing read %d functions and no error", len(l))
	}
}

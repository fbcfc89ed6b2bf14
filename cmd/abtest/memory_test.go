package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
	"github.com/minfer-go/minfer/report"
)

// fakeGPUMem is fakeGPU plus the memory sampler's test seam: the fake
// minfer's CUDA processes hold mib MiB on a fake GPU whose compute
// processes the harness reads from the returned file, and the rates are
// exact (speed verdicts do not depend on noise).
func fakeGPUMem(t *testing.T, mib int) string {
	t.Helper()
	fakeGPU(t)
	file := filepath.Join(t.TempDir(), "gpu-processes")
	t.Setenv(gpumem.FakeEnv, file)
	t.Setenv("FAKEMINFER_DEVICE_MIB", fmt.Sprint(mib))
	t.Setenv("FAKEMINFER_RATES", "4000,400")
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_FFN=")
	return file
}

// runMem runs `abtest run --gates ab` of MINFER_NO_FUSE_FFN and returns the
// exit code, the record, gate 3 and the report's lines before its title.
func runMem(t *testing.T, extra ...string) (int, *gates.Record, gates.Result, string) {
	t.Helper()
	bin := fakeMinfer(t)
	out := t.TempDir()
	args := append([]string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5",
		"--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"}, extra...)
	code := run(args)
	js, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
	if len(js) != 1 {
		t.Fatalf("abtest %v: exit %d, %d results", args, code, len(js))
	}
	rec, err := report.ReadJSON(js[0])
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(strings.TrimSuffix(js[0], ".json") + ".md")
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(md), "\n# abtest:")
	return code, rec, rec.Gates[0], head
}

// (a, b) Arm B holding twice arm A's memory, with the default bar: gate 3
// FAILs naming the memory evidence, and the report's first lines state
// both arms.
func TestMemory_BOverTheDefaultBarIsAFailWithTheMemoryEvidence(t *testing.T) {
	fakeGPUMem(t, 500)
	t.Setenv("FAKEMINFER_DEVICE_MIB_WHEN", "MINFER_NO_FUSE_FFN=0:1000") // arm B (the fusion on) holds 1000 MiB
	code, rec, g, head := runMem(t)
	if code != 1 || rec.Verdict != gates.VerdictFail || g.Status != gates.Fail || !strings.Contains(g.Reason, "memory over the bar: arm B's peak device memory 0.977 GiB") {
		t.Fatalf("exit %d %s: %s: %s", code, rec.Verdict, g.Status, g.Reason)
	}
	for _, want := range []string{"memory: A 0.488 GiB, B 0.977 GiB (+100%)", "over the bar, FAIL", "B <= A + 1% + 64 MiB"} {
		if !strings.Contains(head, want) {
			t.Errorf("first lines lack %q:\n%s", want, head)
		}
	}
	m := g.AB.Memory
	if m.A.Measured != 6 || m.A.Processes != 6 || m.B.Measured != 6 || m.A.Method != "pid" || len(g.AB.Marked) != 0 {
		t.Errorf("memory %+v, marked %v: want the warmup and 5 rounds of each arm measured by pid, no marks", m, g.AB.Marked)
	}
	if !strings.Contains(m.CrossCheck, "no device_memory field") {
		t.Errorf("cross-check %q", m.CrossCheck)
	}
}

// (b) The same lever declaring the cost its memory buys passes the memory
// check and prints the bound next to the measured figure; the engine's
// own JSON figure is shown beside it as the cross-check.
func TestMemory_DeclaredCostPassesAndPrintsTheBound(t *testing.T) {
	fakeGPUMem(t, 500)
	t.Setenv("FAKEMINFER_DEVICE_MIB_WHEN", "MINFER_NO_FUSE_FFN=0:1000")
	t.Setenv("FAKEMINFER_MEMORY", `MINFER_NO_FUSE_FFN={"frac":1,"mib":64,"cost":"a second copy of the weights"}`)
	t.Setenv("FAKEMINFER_ENGINE_MEMORY", "1")
	code, rec, g, head := runMem(t)
	if code != 3 || rec.Verdict != gates.VerdictPartial || g.Status != gates.Pass {
		t.Fatalf("exit %d %s: %s: %s", code, rec.Verdict, g.Status, g.Reason)
	}
	for _, want := range []string{"memory: A 0.488 GiB, B 0.977 GiB (+100%) — within the bar: declared cost \"a second copy of the weights\": B <= A + 100% + 64 MiB (1.04 GiB at this A)",
		`the engine's own device_memory, last round: A {"peak_bytes":524288000}, B {"peak_bytes":1048576000}`} {
		if !strings.Contains(head, want) {
			t.Errorf("first lines lack %q:\n%s", want, head)
		}
	}
}

// The mutation: arm B allocating a second copy of the weights is
// caught by gate 3 (its memory evidence), and only with the mutation.
func TestMutation_DoubleWeightsTurnsABRedOnMemory(t *testing.T) {
	fakeGPUMem(t, 500)
	code, rec, g, _ := runMem(t, "--mutate", "double_weights")
	if code != 1 || g.Status != gates.Fail || g.Control != gates.Pass || strings.Join(rec.CaughtBy, ",") != "ab" || !strings.Contains(g.Reason, "memory over the bar") {
		t.Fatalf("exit %d caught %v: %s (control %s): %s", code, rec.CaughtBy, g.Status, g.Control, g.Reason)
	}
}

// (c) Another process on the GPU during the rounds (here: a line for this
// test's own process, alive all along) marks them; gate 3 says so and is
// INCONCLUSIVE where its speed and memory would pass.
func TestMemory_AnotherProcessOnTheGPUMarksTheRoundsAndTheVerdictIsNotPass(t *testing.T) {
	file := fakeGPUMem(t, 500)
	if err := os.WriteFile(file, []byte(fmt.Sprintf("%d 2048\n", os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	code, rec, g, head := runMem(t)
	if code != 3 || rec.Verdict != gates.VerdictInconclusive || g.Status != gates.Inconclusive || len(g.AB.Marked) != 5 ||
		!strings.Contains(g.Reason, "5 of 5 rounds marked (round 1: another process on the GPU: pid "+fmt.Sprint(os.Getpid())+" (2 GiB))") ||
		!strings.Contains(g.Reason, "without the marks: PASS") {
		t.Fatalf("exit %d %s: %s marked %v: %s", code, rec.Verdict, g.Status, g.AB.Marked, g.Reason)
	}
	if g.AB.Memory.Status != gates.MemWithin || !strings.Contains(head, "5 of 5 rounds marked: another process used the GPU") {
		t.Errorf("memory %s; first lines:\n%s", g.AB.Memory.Status, head)
	}
}

// (e) Without NVML (this machine; the seam unset) the report says why the
// memory was not measured and nothing else changes: the lever whose arm B
// would be over the bar passes gate 3 as before, and the round table has
// no memory column.
func TestMemory_WithoutNVMLTheReportSaysNotMeasuredAndNothingElseChanges(t *testing.T) {
	fakeGPUMem(t, 500)
	t.Setenv(gpumem.FakeEnv, "")
	if s, err := gpumem.Open(); err == nil {
		t.Skipf("this machine has a sampler (%s)", s.Name())
	}
	t.Setenv("FAKEMINFER_DEVICE_MIB_WHEN", "MINFER_NO_FUSE_FFN=0:1000")
	code, rec, g, head := runMem(t)
	if code != 3 || rec.Verdict != gates.VerdictPartial || g.Status != gates.Pass || strings.Contains(g.Evidence, "memory") {
		t.Fatalf("exit %d %s: %s: %s — %s", code, rec.Verdict, g.Status, g.Reason, g.Evidence)
	}
	// Why NVML is missing varies by machine: no libnvidia-ml, or the library
	// without a loaded driver (NVML_ERROR_DRIVER_NOT_LOADED).
	if !strings.Contains(head, "memory: not measured (arm A: no sampler: NVML: ") {
		t.Errorf("first lines:\n%s", head)
	}
}

// (d) `abtest perf` has a peak device memory column per row (the bench
// process's, sampled from outside it); without a sampler it says why.
func TestMemory_PerfRowsHaveAMemoryColumn(t *testing.T) {
	bin := fakeMinfer(t)
	fakeGPUMem(t, 700)
	code, rec, md := runPerfCmd(t, bin, t.TempDir(), "--rows", "qwen2-tiny:Q8_0", "--device", "cuda")
	u := rec.Rows[0].DeviceMemory
	if code != 0 || u == nil || !u.Measured || u.PeakBytes != 700<<20 {
		t.Fatalf("exit %d: %s; memory %+v", code, rec.VerdictLine, u)
	}
	for _, want := range []string{"| floor tg tok/s | peak device memory |", "| 0.684 GiB |", "Peak device memory: each row's timed bench process, sampled from outside it by test seam"} {
		if !strings.Contains(md, want) {
			t.Errorf("perf page lacks %q:\n%s", want, md)
		}
	}
	t.Setenv(gpumem.FakeEnv, "")
	if _, err := gpumem.Open(); err == nil {
		return // a machine with NVML
	}
	_, _, md = runPerfCmd(t, bin, t.TempDir(), "--rows", "qwen2-tiny:Q8_0", "--device", "cuda")
	if !strings.Contains(md, "| not measured |") || !strings.Contains(md, "Peak device memory: not measured (no sampler: NVML: ") {
		t.Errorf("perf page without a sampler:\n%s", md)
	}
}

// (d) The pull-request page has a memory column per row (base / head),
// and a head over the bar is a regression named by its memory.
func TestMemory_PRPageHasAMemoryColumnAndAHeadOverTheBarIsARegression(t *testing.T) {
	fakeGPUMem(t, 500)
	code, p, md := runPR(t, "--device", "cuda")
	if code != 0 || p.Verdict != gates.PRNoRegression || !strings.Contains(flat(md), "| peak device memory base / head | verdict |") ||
		!strings.Contains(flat(md), "| 0.488 GiB / 0.488 GiB (+0.0%) | ~ |") {
		t.Fatalf("exit %d: %s\n%s", code, p.VerdictLine, md)
	}
	code, p, md = runPR(t, "--device", "cuda", "--head-env", "MINFER_TEST_MUTATE=double_weights")
	if code != 1 || p.Verdict != gates.PRRegression || len(p.Workloads[0].Memory) != 1 || len(p.Workloads[0].Slower) != 0 ||
		!strings.Contains(flat(md), "| **0.488 GiB / 0.977 GiB (+100%), over the bar** |") {
		t.Fatalf("exit %d: %s (%+v)\n%s", code, p.VerdictLine, p.Workloads, md)
	}
}

// A workload whose baseline does not fit (minfer exits with
// schema.ExitOutOfMemory in arm A and the CPU reference) could not run:
// exit 2 and COULD NOT RUN, never a FAIL of the lever, in every gate that
// runs arm processes.
func TestOutOfMemory_BaselineThatDoesNotFitCouldNotRunExit2(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_OOM_WHEN", "always")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,greedy,ab", "--rounds", "3", "--device", "cpu")
	if code != gates.ExitCannotRun || rec.Verdict != gates.VerdictCannotRun {
		t.Fatalf("exit %d, verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Status == gates.Fail || !g.CannotRun || !strings.Contains(g.Reason, "ran out of memory") {
			t.Errorf("gate %s: %s, cannot run %v: %s", g.Gate, g.Status, g.CannotRun, g.Reason)
		}
	}
	if !strings.Contains(rec.VerdictLine, "could not run: ") {
		t.Errorf("verdict line does not say what could not run: %s", rec.VerdictLine)
	}
}

// Arm B out of memory where arm A fits is the lever's own cost: a FAIL
// (exit 1) whose reason says so.
func TestOutOfMemory_ArmBAloneOutOfMemoryIsAFail(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_OOM_WHEN", "MINFER_CACHE_TYPE=f16")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "greedy,ab", "--rounds", "3", "--device", "cpu")
	if code != gates.ExitFail || rec.Verdict != gates.VerdictFail {
		t.Fatalf("exit %d, verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Status != gates.Fail || g.CannotRun || !strings.Contains(g.Reason, "ran out of memory where arm A fits") {
			t.Errorf("gate %s: %s, cannot run %v: %s", g.Gate, g.Status, g.CannotRun, g.Reason)
		}
	}
}

// A perf row whose bench is out of memory could not run (exit 2): it is
// listed as such, never a zero and never a FAILED engine.
func TestOutOfMemory_PerfRowThatDoesNotFitCouldNotRunExit2(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_OOM_WHEN", "always")
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0")
	if code != 2 || rec.Verdict != harness.PerfCannotRun || !rec.Rows[0].OutOfMemory || rec.Rows[0].Stage != "bench (out of memory)" {
		t.Fatalf("exit %d, verdict %s: %+v", code, rec.Verdict, rec.Rows[0])
	}
	if !strings.Contains(rec.VerdictLine, "could not run (out of memory: does not fit this machine): qwen2-0.5b:Q8_0") || strings.Contains(md, "| 0 |") ||
		!strings.Contains(md, "| qwen2-0.5b:Q8_0 | COULD NOT RUN (out of memory) |") || !strings.Contains(md, "### qwen2-0.5b:Q8_0: COULD NOT RUN (does not fit this machine) at bench") {
		t.Errorf("verdict line %q; report:\n%s", rec.VerdictLine, md)
	}
}

// MINFER_DRAFT's bar allows the draft model's own planned memory (minfer
// info --device --json, arm B's settings): arm B holding 300 MiB more than
// A passes where the draft plans 350 MiB and fails where it plans 100,
// and the report names the plan beside the bound.
func TestMemory_DraftBarAllowsTheDraftsPlanAndNoMore(t *testing.T) {
	for _, tc := range []struct {
		plan string
		pass bool
	}{{"350", true}, {"100", false}} {
		t.Run("plan "+tc.plan+" MiB", func(t *testing.T) {
			fakeGPUMem(t, 500)
			draft := filepath.Join(t.TempDir(), "qwen2-0.5b-draft.gguf")
			if err := os.WriteFile(draft, []byte("GGUF"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("FAKEMINFER_DEVICE_MIB_WHEN", "MINFER_DRAFT="+draft+":800")
			t.Setenv("FAKEMINFER_PLAN_MIB", tc.plan)
			bin := fakeMinfer(t)
			out := t.TempDir()
			code := run([]string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_DRAFT=" + draft, "--gates", "ab", "--rounds", "5",
				"--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"})
			js, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
			if len(js) != 1 {
				t.Fatalf("exit %d, %d results", code, len(js))
			}
			rec, err := report.ReadJSON(js[0])
			if err != nil {
				t.Fatal(err)
			}
			m := rec.Gates[0].AB.Memory
			if m == nil || !m.Bar.Paired || !strings.Contains(m.PairedWhat, "qwen2-0.5b-draft.gguf planned "+tc.plan+" MiB") {
				t.Fatalf("memory check %+v", m)
			}
			if got := m.Status == gates.MemWithin; got != tc.pass {
				t.Errorf("B 800 MiB over A 500 MiB with the draft planning %s MiB: %s (limit %d MiB): %s", tc.plan, m.Status, m.LimitBytes>>20, m.Line())
			}
			if !strings.Contains(m.Line(), "the paired model's planned device memory") {
				t.Errorf("line %q", m.Line())
			}
		})
	}
}

// Without the draft's plan the bar cannot be applied: could not run (exit
// 2), naming the plan, never a verdict on another bar.
func TestMemory_DraftWithoutAPlanCouldNotRun(t *testing.T) {
	fakeGPUMem(t, 500)
	draft := filepath.Join(t.TempDir(), "qwen2-0.5b-draft.gguf")
	if err := os.WriteFile(draft, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKEMINFER_PLAN_MIB", "none")
	code := run([]string{"run", "--minfer", fakeMinfer(t), "--out", t.TempDir(), "--lever", "MINFER_DRAFT=" + draft, "--gates", "ab",
		"--rounds", "5", "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"})
	if code != 2 {
		t.Fatalf("exit %d, want 2 (could not run: no memory plan of the draft)", code)
	}
}

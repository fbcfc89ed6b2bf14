package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/internal/gobuild"
	"github.com/minfer-go/minfer/report"
)

func TestMain(m *testing.M) {
	code := m.Run()
	gobuild.Cleanup()
	for _, d := range []string{testBinsDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// fakeMinfer builds the CLI test double once per test binary.
func fakeMinfer(t *testing.T) string {
	t.Helper()
	bin, err := gobuild.Once("github.com/minfer-go/minfer/harness/internal/fakeminfer", "minfer")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runAbtest runs `abtest run` in-process and returns its exit code and record.
func runAbtest(t *testing.T, bin string, extra ...string) (int, *gates.Record) {
	t.Helper()
	out := t.TempDir()
	args := append([]string{"run", "--minfer", bin, "--out", out, "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10", "--gen-n", "8"}, extra...)
	code := run(args)
	ms, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
	if len(ms) != 1 {
		t.Fatalf("abtest %v: exit %d, %d result files", args, code, len(ms))
	}
	rec, err := report.ReadJSON(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(strings.TrimSuffix(ms[0], ".json") + ".md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(md), "**Verdict: "+rec.Verdict) {
		t.Errorf("report does not open with the verdict line:\n%.200s", md)
	}
	return code, rec
}

func status(rec *gates.Record, gate string) gates.Status { return gateOf(rec, gate).Status }

// gateOf is one gate's result (the zero Result when it did not run).
func gateOf(rec *gates.Record, gate string) gates.Result {
	for _, g := range rec.Gates {
		if g.Gate == gate {
			return g
		}
	}
	return gates.Result{}
}

// Without the project's test binaries, kernel parity and the suite cannot
// run: the verdict is INCONCLUSIVE (exit 3) and its first line says which
// gates could not decide, never PASS.
func TestRun_CPULeverWithoutTestBinariesIsInconclusiveNamingTheGates(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--rounds", "5", "--device", "cpu")
	if code != 3 || rec.Verdict != gates.VerdictInconclusive {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, want := range []string{"could not decide: parity INCONCLUSIVE: kernel parity did not run", "suite SKIP"} {
		if !strings.Contains(rec.VerdictLine, want) {
			t.Errorf("verdict line lacks %q: %s", want, rec.VerdictLine)
		}
	}
	for _, g := range []string{"greedy", "ab", "profile"} {
		if status(rec, g) != gates.Pass {
			t.Errorf("%s: %s", g, status(rec, g))
		}
	}
	for _, g := range rec.Gates {
		if g.Gate != gates.GateSuite && !strings.HasPrefix(g.Liveness, "PASS") {
			t.Errorf("%s liveness %q", g.Gate, g.Liveness)
		}
	}
}

// testBins builds the project's test binaries of pkgs once per test binary
// (the README's set-up builds them into bin/tests).
var (
	testBinsOnce sync.Once
	testBinsDir  string
	testBinsErr  error
)

func projectTestBins(t *testing.T) string {
	t.Helper()
	testBinsOnce.Do(func() {
		if testBinsDir, testBinsErr = os.MkdirTemp("", "abtest-testbins-"); testBinsErr != nil {
			return
		}
		out, err := exec.Command("go", "test", "-c", "-o", testBinsDir+"/", "github.com/minfer-go/minfer/engine/kv", "github.com/minfer-go/minfer/engine/cpu",
			"github.com/minfer-go/minfer/cuda").CombinedOutput()
		if err != nil {
			testBinsErr = fmt.Errorf("go test -c: %v\n%s", err, out)
		}
	})
	if testBinsErr != nil {
		t.Fatal(testBinsErr)
	}
	return testBinsDir
}

// GATES.md: a CPU lever can PASS on a 2-core machine. With the project's
// test binaries of the packages the lever touches, all five gates run on
// the CPU backend: kernel parity (the packages' oracle tests with each
// arm's setting), greedy, A/B, the packages' suite with arm B's setting,
// and the census plus a pprof profile per arm.
func TestRun_CPULeverWithTheProjectsTestBinariesRunsAllFiveGates(t *testing.T) {
	bin := fakeMinfer(t)
	dir := projectTestBins(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--rounds", "5", "--device", "cpu", "--suite-bin", filepath.Join(dir, "*.test"))
	if code != 0 || rec.Verdict != gates.VerdictPass {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		switch {
		case g.Parity != nil && g.Parity.KernelStatus != gates.Pass:
			t.Errorf("kernel parity %s: %s", g.Parity.KernelStatus, g.Parity.Kernel)
		case g.Suite != nil && (g.Suite.Passed == 0 || g.Suite.Env["MINFER_CACHE_TYPE"] != "f16"):
			t.Errorf("suite %+v", g.Suite)
		case g.Profile != nil && (g.Profile.CPU == nil || g.Profile.CPU.Arms[1].InFuncs == 0 || g.Profile.CPU.Arms[0].InFuncs != 0):
			t.Errorf("pprof evidence %+v", g.Profile.CPU)
		}
	}
}

func TestMutation_PerturbLogitTurnsGreedyAndParityRed(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_QKV=")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "parity,greedy", "--mutate", "perturb_logit")
	if code != 1 || status(rec, "greedy") != gates.Fail || status(rec, "parity") != gates.Fail {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
	if !strings.Contains(rec.VerdictLine, "caught by parity, greedy") {
		t.Errorf("verdict line does not say who caught it: %s", rec.VerdictLine)
	}
}

func TestMutation_SkipBiasTurnsParityRed(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity", "--mutate", "skip_bias")
	if code != 1 || status(rec, "parity") != gates.Fail || len(rec.CaughtBy) != 1 {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
}

func TestMutation_SlowDecodeTurnsABRed(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5", "--mutate", "slow_decode")
	if code != 1 || status(rec, "ab") != gates.Fail || !strings.Contains(rec.Gates[0].Reason, "tg4") || rec.Gates[0].Control != gates.Pass {
		t.Fatalf("exit %d: %s / %s", code, rec.VerdictLine, rec.Gates[0].Reason)
	}
	code, rec = runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5")
	if code != 3 || status(rec, "ab") != gates.Pass || rec.Verdict != gates.VerdictPartial {
		t.Fatalf("control without mutation: exit %d: %s", code, rec.VerdictLine)
	}
}

// A mutation that no gate chosen can catch (a decode slowdown under the
// correctness gates) makes abtest exit 1: the harness failed to catch it.
func TestMutation_NotCaughtByAnyGateExits1(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,greedy", "--mutate", "slow_decode=0.03")
	if code != 1 || rec.Verdict != gates.VerdictNotCaught || !strings.Contains(rec.VerdictLine, "NOT CAUGHT") {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
}

// caught by names only the gates whose evidence the mutation moved: a
// phantom path fails every gate's liveness, and each failure disappears
// without the mutation.
func TestMutation_PhantomPathCaughtByLivenessInEveryGate(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,greedy,ab,profile", "--rounds", "5", "--device", "cpu", "--mutate", "phantom",
		"--suite-bin", filepath.Join(projectTestBins(t), "*.test"))
	if code != 1 || strings.Join(rec.CaughtBy, ",") != "parity,greedy,ab,profile" || rec.Mutate != "phantom=MINFER_CACHE_TYPE" {
		t.Fatalf("exit %d caught %v: %s", code, rec.CaughtBy, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if !strings.HasPrefix(g.Liveness, "FAIL") || g.Control != gates.Pass {
			t.Errorf("%s: liveness %q control %s", g.Gate, g.Liveness, g.Control)
		}
	}
}

// Gate 4's mutation: a planted test failure (fail_device_test) turns the
// suite red, and only with the mutation.
func TestMutation_PlantedTestFailureCaughtBySuite(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "suite", "--device", "cpu", "--mutate", "fail_device_test",
		"--suite-bin", filepath.Join(projectTestBins(t), "*.test"))
	g := rec.Gates[0]
	if code != 1 || g.Status != gates.Fail || g.Control != gates.Pass || !strings.Contains(g.Reason, "TestPlantedFailure") || strings.Join(rec.CaughtBy, ",") != "suite" {
		t.Fatalf("exit %d: %s: %s (control %s)", code, g.Status, g.Reason, g.Control)
	}
}

// Hole 1, the suite half: the device suite on a machine whose GPU does not
// answer its test binaries (here: a fake nvidia-smi, no driver) ran no
// device test; it used to say "every device test passed".
func TestSuite_DeviceSuiteWithoutADeviceTestThatRanIsInconclusive(t *testing.T) {
	bin := fakeMinfer(t)
	smi := t.TempDir()
	if err := os.WriteFile(filepath.Join(smi, "nvidia-smi"), []byte("#!/bin/sh\necho 'name, driver_version, a, b, c, d, e, f'\necho 'NVIDIA H200, 580, 1980 MHz, 3201 MHz, 1980 MHz, 0x0, 40, 200 W'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", smi+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKEMINFER_GPU", "1")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_MMQ", "--gates", "suite", "--suite-bin", filepath.Join(projectTestBins(t), "*.test"), "--workload=false")
	g := rec.Gates[0]
	if code != 3 || g.Status != gates.Inconclusive || !strings.Contains(g.Reason, "no CUDA device answered") || g.Suite.Passed == 0 {
		t.Fatalf("exit %d: %s: %s", code, g.Status, g.Reason)
	}
}

// Hole 9: a flag that changes a pre-registered bar is a deviation the
// report's first lines print.
func TestRun_BarFlagIsADeviationInTheFirstLines(t *testing.T) {
	bin := fakeMinfer(t)
	out := t.TempDir()
	code := run([]string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_CACHE_TYPE=f16", "--device", "cpu", "--gates", "ab",
		"--rounds", "5", "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10", "--bar-tg", "1.03"})
	ms, _ := filepath.Glob(filepath.Join(out, "*", "*.md"))
	if code != 3 || len(ms) != 1 {
		t.Fatalf("exit %d, reports %v", code, ms)
	}
	b, _ := os.ReadFile(ms[0])
	head := strings.Join(strings.SplitN(string(b), "\n", 4)[:3], "\n")
	if !strings.Contains(head, "--bar-tg 1.03 (registry: 1.015)") || !strings.Contains(head, "deviations from the registry") {
		t.Fatalf("first lines:\n%s", head)
	}
}

// Hole 1: --gates parity,greedy used to say PASS and exit 0.
func TestRun_SubsetOfGatesIsPartialExit3(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,greedy", "--device", "cpu", "--suite-bin", filepath.Join(projectTestBins(t), "*.test"))
	if code != 3 || rec.Verdict != gates.VerdictPartial || !strings.HasPrefix(rec.VerdictLine, "PARTIAL:") || !strings.Contains(rec.VerdictLine, "not run: ab, suite, profile") {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
}

// Hole 2: a lever whose path exists only on CUDA switched nothing on the
// CPU and passed gates 1-3; it is refused (exit 2) with one line.
func TestRun_CUDALeverOnTheCPUIsRefusedExit2(t *testing.T) {
	bin := fakeMinfer(t)
	out := t.TempDir()
	if code := run([]string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_MMQ", "--device", "cpu", "--gates", "parity,greedy"}); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if ms, _ := filepath.Glob(filepath.Join(out, "*", "*")); len(ms) != 0 {
		t.Errorf("a refused run wrote %v", ms)
	}
}

// Hole 6: the suite accepts only the project's test binaries of the run's
// backend and lever, by their build stamp; any other Go test binary used to
// pass "every device test passed".
func TestSuite_ForeignOrOffPackageTestBinariesAreRefusedByTheirStamp(t *testing.T) {
	bin := fakeMinfer(t)
	mod := t.TempDir()
	for name, body := range map[string]string{"go.mod": "module example.com/other\n\ngo 1.21\n", "x_test.go": "package other\nimport \"testing\"\nfunc TestX(t *testing.T) {}\n"} {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-c", "-o", filepath.Join(mod, "other.test"), ".")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "suite", "--device", "cpu",
		"--suite-bin", filepath.Join(mod, "other.test"), "--suite-bin", filepath.Join(projectTestBins(t), "kv.test"))
	g := rec.Gates[0]
	if code != 3 || g.Status != gates.Skip || !strings.Contains(g.Reason, "other.test: built from module \"example.com/other\"") ||
		!strings.Contains(g.Reason, "kv.test: package engine/kv is not one MINFER_NO_FUSE_FFN touches") {
		t.Fatalf("exit %d: %s: %s", code, g.Status, g.Reason)
	}
}

// Hole 7: an interrupted run (SIGINT) records no gate as FAIL and exits 3
// with INCOMPLETE.
func TestRun_SIGINTIsIncompleteExit3(t *testing.T) {
	bin := fakeMinfer(t)
	abtest := filepath.Join(t.TempDir(), "abtest")
	if out, err := exec.Command("go", "build", "-o", abtest, ".").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out := t.TempDir()
	cmd := exec.Command(abtest, "run", "--minfer", bin, "--out", out, "--lever", "MINFER_CACHE_TYPE=f16", "--device", "cpu", "--gates", "greedy,ab")
	cmd.Env = append(os.Environ(), "FAKEMINFER_MODE=hang")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // inside the first (hanging) arm process
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit %v, want 3", err)
	}
	ms, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
	if len(ms) != 1 {
		t.Fatalf("reports %v", ms)
	}
	rec, err := report.ReadJSON(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	if rec.Verdict != gates.VerdictIncomplete || !strings.HasPrefix(rec.VerdictLine, "INCOMPLETE:") {
		t.Fatalf("%s", rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Status == gates.Fail {
			t.Errorf("gate %s recorded as FAIL by the interrupt: %s", g.Gate, g.Reason)
		}
	}
}

func TestRun_CrashingArmIsAFailWithStderrTail(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_MODE", "crash")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,ab", "--rounds", "3", "--device", "cpu")
	if code != 1 || status(rec, "parity") != gates.Fail || !strings.Contains(rec.Gates[0].Reason, "index out of range") {
		t.Fatalf("exit %d: %+v", code, rec.Gates)
	}
}

func TestRun_HangingArmTimesOutAsFail(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_MODE", "hang")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "greedy", "--arm-timeout", "300ms", "--device", "cpu")
	if code != 1 || !strings.Contains(rec.Gates[0].Reason, "timed out") {
		t.Fatalf("exit %d: %+v", code, rec.Gates)
	}
}

func TestRun_UnknownLeverOrValueIsUsageExit2(t *testing.T) {
	bin := fakeMinfer(t)
	if code := run([]string{"run", "--minfer", bin, "--lever", "MINFER_NOPE", "--out", t.TempDir()}); code != 2 {
		t.Errorf("unknown lever: exit %d", code)
	}
	if code := run([]string{"run", "--minfer", bin, "--lever", "MINFER_CACHE_TYPE=f8", "--out", t.TempDir()}); code != 2 {
		t.Errorf("unknown value: exit %d", code)
	}
	if code := run([]string{"run", "--minfer", "/nonexistent/minfer", "--lever", "MINFER_MMQ"}); code != 2 {
		t.Errorf("missing binary: exit %d", code)
	}
}

func TestBenchOut_WritesGoBenchmarkFormat(t *testing.T) {
	bin := fakeMinfer(t)
	bo := filepath.Join(t.TempDir(), "bench.txt")
	runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "3", "--bench-out", bo)
	b, err := os.ReadFile(bo)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "BenchmarkPrefill/lever=MINFER_NO_FUSE_FFN/arm=B 1 ") || !strings.Contains(string(b), " tok/s\n") {
		t.Fatalf("bench-out:\n%s", b)
	}
}

func TestRun_EmbeddedDefaultModelLineCarriesRealFileSize(t *testing.T) {
	bin := fakeMinfer(t)
	_, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "greedy", "--prompts", "testdata/short_prompts.txt")
	st, err := os.Stat(bin) // the fake's "embedded default" is its own executable
	if err != nil {
		t.Fatal(err)
	}
	if rec.Env.ModelSize != st.Size() || !strings.Contains(rec.Env.Model, "(embedded default) "+bin) || len(rec.Env.ModelSHA256) != 64 {
		t.Fatalf("model %q size %d sha %q, want %s of %d bytes", rec.Env.Model, rec.Env.ModelSize, rec.Env.ModelSHA256, bin, st.Size())
	}
}

func TestShapeType_SynthesizesOnceWithSeedAndReusesTheCachedFile(t *testing.T) {
	bin := fakeMinfer(t)
	cache := t.TempDir()
	log := filepath.Join(t.TempDir(), "synth.log")
	t.Setenv("FAKEMINFER_SYNTH_LOG", log)
	for i := 0; i < 2; i++ {
		code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "greedy", "--prompts", "testdata/short_prompts.txt",
			"--shape", "qwen2-tiny", "--type", "Q8_0", "--seed", "7", "--synth-dir", cache)
		want := filepath.Join(cache, "qwen2-tiny-Q8_0-seed7.gguf")
		if code != 3 || rec.Config.Model != want || rec.Env.ModelSize == 0 {
			t.Fatalf("run %d: exit %d, model %q (%d bytes), want %s", i, code, rec.Config.Model, rec.Env.ModelSize, want)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil || string(b) != "qwen2-tiny Q8_0 7\n" {
		t.Fatalf("synth calls %q (%v), want exactly one", b, err)
	}
	if code := run([]string{"run", "--minfer", bin, "--lever", "MINFER_NO_FUSE_FFN", "--shape", "qwen2-tiny", "--type", "Q9_9", "--synth-dir", cache, "--out", t.TempDir()}); code != 2 {
		t.Errorf("failing synth: exit %d, want 2", code)
	}
	if ms, _ := filepath.Glob(filepath.Join(cache, "*Q9_9*")); len(ms) != 0 {
		t.Errorf("a failed synth left %v in the cache", ms)
	}
}

// A zero used to become the default (gates.Config.Defaults) and a negative
// bar was run as given; each is refused with one line and exit 2 now.
func TestRun_MeaninglessFlagValuesAreUsageExit2(t *testing.T) {
	bin := fakeMinfer(t)
	for _, flag := range [][]string{
		{"--gen-n", "0"},
		{"--warmup-ms", "-1"},
		{"--bench-warmup-ms", "0"},
		{"--bar-pp", "0"},
		{"--bar-tg", "0.5"},
		{"--bar-pp", "NaN"},
		{"--claim-bar", "-1"},
		{"--graph-tol", "-1"},
		{"--arm-timeout", "-1s"},
		{"--suite-bin", "bin/[x.test"},
	} {
		out := t.TempDir()
		args := append([]string{"run", "--minfer", bin, "--lever", "MINFER_CACHE_TYPE=f16", "--out", out}, flag...)
		if code := run(args); code != 2 {
			t.Errorf("abtest %v: exit %d, want 2", flag, code)
		}
		if ms, _ := filepath.Glob(filepath.Join(out, "*", "*")); len(ms) != 0 {
			t.Errorf("abtest %v: wrote %v before refusing", flag, ms)
		}
	}
}

// abtest compare refuses results of different experiments with exit 2 and
// one line naming the field; a result against itself is "~", exit 0.
func TestCompare_IncomparableIsExit2NamingTheFieldSameIsExit0(t *testing.T) {
	bin := fakeMinfer(t)
	_, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "ab", "--rounds", "5", "--device", "cpu")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	if err := report.WriteJSON(a, rec); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"compare", a, a}); code != 0 {
		t.Errorf("a result against itself: exit %d", code)
	}
	rec.Config.PP = 64
	if err := report.WriteJSON(b, rec); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"compare", a, b}); code != 2 {
		t.Errorf("pp512 against pp64: exit %d, want 2", code)
	}
	if code := run([]string{"compare", "--threshold", "2", a, a}); code != 2 {
		t.Errorf("a threshold without its %% sign: exit %d, want 2", code)
	}
}

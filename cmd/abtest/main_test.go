package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/report"
)

var (
	fakeOnce sync.Once
	fakeDir  string
	fakeBin  string
	fakeErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}

// fakeMinfer builds the CLI test double once per test binary.
func fakeMinfer(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		if fakeDir, fakeErr = os.MkdirTemp("", "abtest-fake-"); fakeErr != nil {
			return
		}
		fakeBin = filepath.Join(fakeDir, "minfer")
		if out, err := exec.Command("go", "build", "-o", fakeBin, "github.com/minfer-go/minfer/harness/internal/fakeminfer").CombinedOutput(); err != nil {
			fakeErr = fmt.Errorf("building fakeminfer: %v\n%s", err, out)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return fakeBin
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

func status(rec *gates.Record, gate string) gates.Status {
	for _, g := range rec.Gates {
		if g.Gate == gate {
			return g.Status
		}
	}
	return ""
}

func TestRun_CleanLeverPassesAndSkipsDeviceGatesWithReason(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--rounds", "5")
	if code != 0 || rec.Verdict != gates.VerdictInconclusive {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range []string{"parity", "greedy", "ab"} {
		if status(rec, g) != gates.Pass {
			t.Errorf("%s: %s", g, status(rec, g))
		}
	}
	for _, g := range rec.Gates {
		if g.Status == gates.Skip && g.Reason == "" {
			t.Errorf("%s skipped without a reason", g.Gate)
		}
	}
	if !strings.Contains(rec.VerdictLine, "not counted as PASS") {
		t.Errorf("verdict line hides the skips: %s", rec.VerdictLine)
	}
}

func TestMutation_PerturbLogitTurnsGreedyAndParityRed(t *testing.T) {
	bin := fakeMinfer(t)
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
	if code != 1 || status(rec, "parity") != gates.Fail {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
}

func TestMutation_SlowDecodeTurnsABRed(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5", "--mutate", "slow_decode")
	if code != 1 || status(rec, "ab") != gates.Fail || !strings.Contains(rec.Gates[0].Reason, "tg4") {
		t.Fatalf("exit %d: %s / %s", code, rec.VerdictLine, rec.Gates[0].Reason)
	}
	code, rec = runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5")
	if code != 0 || status(rec, "ab") != gates.Pass {
		t.Fatalf("control without mutation: exit %d: %s", code, rec.Gates[0].Reason)
	}
}

func TestRun_CrashingArmIsAFailWithStderrTail(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_MODE", "crash")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,ab", "--rounds", "3")
	if code != 1 || status(rec, "parity") != gates.Fail || !strings.Contains(rec.Gates[0].Reason, "index out of range") {
		t.Fatalf("exit %d: %+v", code, rec.Gates)
	}
}

func TestRun_HangingArmTimesOutAsFail(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_MODE", "hang")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "greedy", "--arm-timeout", "300ms")
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
		if code != 0 || rec.Config.Model != want || rec.Env.ModelSize == 0 {
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

// A kill switch named with its baseline value (--lever MINFER_NO_X=1, arm A
// already 1) cannot run, and the message says which spelling measures the
// path; an explicit --baseline equal to the candidate gets no such hint.
func TestRun_KillSwitchAtItsBaselineValueSaysHowToNameIt(t *testing.T) {
	s := &setup{levers: []harness.Lever{{Name: "MINFER_NO_KQ_MMVQ", Values: []string{"0", "1"}, ArmA: "1", ArmB: "0"}}}
	_, err := s.config(&runFlags{}, "MINFER_NO_KQ_MMVQ=1", "")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "arms A and B are both MINFER_NO_KQ_MMVQ=1") ||
		!strings.Contains(err.Error(), "run --lever MINFER_NO_KQ_MMVQ to measure") {
		t.Fatalf("err %v", err)
	}
	_, err = s.config(&runFlags{}, "MINFER_NO_KQ_MMVQ=0", "0")
	if err == nil || strings.Contains(err.Error(), "to measure") {
		t.Fatalf("explicit baseline: err %v", err)
	}
}

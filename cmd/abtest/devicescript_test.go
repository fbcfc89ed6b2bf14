package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The device recipes (scripts/abtest-device.sh, scripts/nightly.sh), run
// here with fake minfer, abtest and build-kernels.sh (they log their
// arguments): which model and correctness model each lever spec gets.
func runDeviceScript(t *testing.T, env ...string) (abtestCalls, minferCalls []string) {
	return runScript(t, "abtest-device.sh", true, env...)
}

// runScript runs scripts/NAME in a scratch tree; withCM puts a trained
// correctness model at tiny-Q8_0.gguf and names it in CORRECTNESS_MODEL.
func runScript(t *testing.T, name string, withCM bool, env ...string) (abtestCalls, minferCalls []string) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("scripts/"+name, string(src))
	write("scripts/build-kernels.sh", "#!/usr/bin/env bash\necho fatbin >\"$1\"\necho \"build-kernels: wrote $1\"\n")
	// minfer: synth and quantize write their -o / OUT file; info reports the
	// file type from the name (tiny-Q8_0.gguf: Q8_0).
	write("bin/minfer", `#!/usr/bin/env bash
echo "$*" >>"$FAKE_LOG.minfer"
case "$1" in
synth) [[ -n "${FAKE_SYNTH_CUT:-}" && "$*" == *"$FAKE_SYNTH_CUT"* ]] && exit 124
	while [[ $# -gt 0 ]]; do [[ "$1" == -o ]] && echo model >"$2"; shift; done ;;
quantize) echo model >"$3" ;;
info) t="$(basename "$2" .gguf)"; echo "file type      ${t##*-}" ;;
levers) [[ -f levers.txt ]] && cat levers.txt ;;
esac
`)
	write("bin/abtest", "#!/usr/bin/env bash\necho \"$*\" >>\"$FAKE_LOG.abtest\"\n")
	cmd := exec.Command("bash", "scripts/"+name)
	cmd.Dir = dir
	log := filepath.Join(dir, "calls")
	cmd.Env = append(os.Environ(), "OUT="+filepath.Join(dir, "out"), "WORK="+filepath.Join(dir, "work"),
		"MODEL_DIR="+filepath.Join(dir, "models"), "NIGHTLY_OUT="+filepath.Join(dir, "nightly"), "FAKE_LOG="+log)
	if withCM {
		write("tiny-Q8_0.gguf", "trained")
		cmd.Env = append(cmd.Env, "CORRECTNESS_MODEL=tiny-Q8_0.gguf")
	}
	cmd.Env = append(cmd.Env, env...)
	for _, kv := range env { // files the case asks for: FILE:path=content
		if f, ok := strings.CutPrefix(kv, "FILE:"); ok {
			p, body, _ := strings.Cut(f, "=")
			write(p, body)
		}
	}
	wantExit := 0
	for _, kv := range env { // the exit status the case expects: EXIT:N
		if n, ok := strings.CutPrefix(kv, "EXIT:"); ok {
			wantExit, _ = strconv.Atoi(n)
		}
	}
	out, err := cmd.CombinedOutput()
	if got := cmd.ProcessState.ExitCode(); got != wantExit {
		t.Fatalf("%s: exit %d (%v), want %d\n%s", name, got, err, wantExit, out)
	}
	read := func(p string) []string {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the fake was never called
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return read(log + ".abtest"), read(log + ".minfer")
}

func argAfter(call, flag string) string {
	f := strings.Fields(call)
	for i := range f[:len(f)-1] {
		if f[i] == flag {
			return filepath.Base(f[i+1])
		}
	}
	return ""
}

// Each spec's model, correctness model and workload flags: the script passes
// CORRECTNESS_MODEL as given (abtest run fits it to the run's model), none
// for @own, and --workload only for a bare spec (the registry decides).
func TestDeviceScript_EachSpecGetsItsModelCorrectnessModelAndWorkload(t *testing.T) {
	calls, _ := runDeviceScript(t, "LEVERS=MINFER_NO_KQ_MMVQ@qwen2-0.5b:Q4_K_M MINFER_FUSE_QKNORM@qwen3-0.6b:Q8_0@own MINFER_NO_PREFILL_CAPTURE MINFER_MMQ@mutate=slow_decode=0.03",
		"CALIBRATE=qwen2-0.5b:Q8_0;default")
	var ab, cal []string
	for _, c := range calls {
		if strings.HasPrefix(c, "calibrate ") {
			cal = append(cal, c)
		} else {
			ab = append(ab, c)
		}
	}
	if len(ab) != 4 || len(cal) != 2 || argAfter(cal[0], "--workload") != "qwen2-0.5b:Q8_0" || argAfter(cal[1], "--workload") != "default" {
		t.Fatalf("abtest calls: %q", calls)
	}
	// Every lever runs all five gates, the suite through one cache, and no
	// --rounds (the calibration pre-registers them).
	for _, c := range ab {
		if argAfter(c, "--gates") != "parity,greedy,ab,suite,profile" || argAfter(c, "--suite-cache") != "suite-cache" || strings.Contains(c, "--rounds") {
			t.Errorf("%q", c)
		}
	}
	if argAfter(ab[3], "--mutate") != "slow_decode=0.03" || !strings.Contains(ab[3], " --workload ") {
		t.Errorf("mutation spec: %q", ab[3])
	}
	want := []struct {
		lever, model, cm string
		bare             bool
	}{
		{"MINFER_NO_KQ_MMVQ", "qwen2-0.5b-Q4_K_M-seed1.gguf", "tiny-Q8_0.gguf", false},
		{"MINFER_FUSE_QKNORM", "qwen3-0.6b-Q8_0-seed1.gguf", "", false},
		{"MINFER_NO_PREFILL_CAPTURE", "qwen2-0.5b-Q8_0-seed1.gguf", "tiny-Q8_0.gguf", true},
	}
	for i, w := range want {
		if argAfter(ab[i], "--lever") != w.lever || argAfter(ab[i], "--model") != w.model || argAfter(ab[i], "--correctness-model") != w.cm ||
			strings.Contains(ab[i], " --workload ") != w.bare || argAfter(ab[i], "--synth-dir") != "models" {
			t.Errorf("call %d: %q, want lever %s model %s correctness model %q, --workload %v, --synth-dir models", i, ab[i], w.lever, w.model, w.cm, w.bare)
		}
	}
}

// A bare spec runs on the workload the registry declares, so its limit is
// sized for that workload (7B at depth: DEEP_TIMEOUT), not for the default
// model; on 2026-12-02 a lever's 7B run at depth 32128 got the 0.5B limit.
// An @SHAPE:TYPE spec keeps the limit of the model it names.
func TestDeviceScript_ABareSpecGetsTheLimitOfItsDeclaredWorkload(t *testing.T) {
	levers := "LEVER                 KIND    DEFAULT  VALUES  BACKEND  WORKLOAD              WHAT IT SWITCHES\n" +
		"MINFER_FA_PREFILL_TC  opt-out 1        0|1     cuda     qwen2-7b:Q4_K_M d4096 tc\n" +
		"MINFER_MMQ            opt-in  1        0|1     cuda     qwen2-0.5b:Q8_0       mmq\n"
	out := t.TempDir()
	runDeviceScript(t, "LEVERS=MINFER_FA_PREFILL_TC=0 MINFER_FA_PREFILL_TC=0@qwen2-0.5b:Q8_0 MINFER_MMQ", "CALIBRATE=",
		"FILE:levers.txt="+strings.ReplaceAll(levers, `\n`, "\n"), "OUT="+out)
	b, err := os.ReadFile(filepath.Join(out, "abtest-device.log"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "=== abtest run") {
			runs = append(runs, l)
		}
	}
	want := []string{"on the registry's workload qwen2-7b:Q4_K_M d4096 (", "on qwen2-0.5b-Q8_0-seed1.gguf (", "on the registry's workload qwen2-0.5b:Q8_0 ("}
	limits := []string{"limit 1800 s", "limit 500 s", "limit 500 s"}
	if len(runs) != 3 {
		t.Fatalf("runs: %q", runs)
	}
	for i := range runs {
		if !strings.Contains(runs[i], want[i]) || !strings.Contains(runs[i], limits[i]) {
			t.Errorf("run %d: %q, want %q and %q", i, runs[i], want[i], limits[i])
		}
	}
}

// A synth cut by its limit says so and names the limit, which is larger
// for a 7B shape (113 s for qwen2-7b Q4_K_M on the H200 on 2026-12-02,
// when every shape had 60 s); the lever that needed it could not run.
func TestDeviceScript_ASynthCutAtItsLimitSaysWhichLimit(t *testing.T) {
	out := t.TempDir()
	calls, _ := runDeviceScript(t, "LEVERS=MINFER_MMQ@qwen2-7b:Q4_K_M MINFER_MMQ@qwen2-0.5b:Q4_K_M", "CALIBRATE=",
		"FAKE_SYNTH_CUT=Q4_K_M", "OUT="+out, "SYNTH_TIMEOUT=60", "EXIT:1")
	b, err := os.ReadFile(filepath.Join(out, "abtest-device.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"minfer synth qwen2-7b Q4_K_M failed: exit 124, cut at its limit of 300 s",
		"minfer synth qwen2-0.5b Q4_K_M failed: exit 124, cut at its limit of 60 s"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log lacks %q:\n%s", want, b)
		}
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "run ") {
			t.Errorf("a lever without its model ran: %q", c)
		}
	}
}

// nightly.sh names a trained correctness model when it has one: the
// CORRECTNESS_MODEL given, else the one a device bundle carries in bin/;
// without either it passes none.
func TestNightlyScript_PassesTheBundlesTrainedCorrectnessModel(t *testing.T) {
	ab, _ := runScript(t, "nightly.sh", false, "FILE:bin/tiny-code-Q8_0.gguf=trained")
	if len(ab) != 1 || !strings.HasPrefix(ab[0], "nightly ") || argAfter(ab[0], "--correctness-model") != "tiny-code-Q8_0.gguf" {
		t.Errorf("bundle's model: %q", ab)
	}
	ab, _ = runScript(t, "nightly.sh", true, "FILE:bin/tiny-code-Q8_0.gguf=trained")
	if argAfter(ab[0], "--correctness-model") != "tiny-Q8_0.gguf" {
		t.Errorf("CORRECTNESS_MODEL given: %q", ab)
	}
	ab, _ = runScript(t, "nightly.sh", false)
	if strings.Contains(ab[0], "--correctness-model") {
		t.Errorf("no trained model, yet: %q", ab)
	}
}

// The pull-request and bisect stages: each planted defect gets its page of
// this build against itself; the bisect's builds are unpacked, the bad
// end's kernel sources built once and linked into every build folder.
func TestDeviceScript_PullRequestPagesAndBisectStages(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	// bin/bisect.tgz as scripts/bisect-builds.sh packs it.
	src := t.TempDir()
	for rel, body := range map[string]string{
		"aaaaaaaaaa/minfer": "#!/bin/sh\n", "bbbbbbbbbb/minfer": "#!/bin/sh\n", "commits.txt": "aaaaaaaaaa\tgood\nbbbbbbbbbb\tbad\n",
		"k/scripts/build-kernels.sh": "#!/usr/bin/env bash\necho fatbin >\"$1\"\n", "k/cuda/kernels/x.cu": "",
	} {
		p := filepath.Join(src, rel)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pack := filepath.Join(t.TempDir(), "bisect.tgz")
	for _, c := range [][]string{{"tar", "-C", filepath.Join(src, "k"), "-czf", filepath.Join(src, "kernels-src.tgz"), "."}, {"rm", "-r", filepath.Join(src, "k")},
		{"tar", "-C", src, "-czf", pack, "."}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", c, err, out)
		}
	}
	calls, _ := runDeviceScript(t, "LEVERS=", "CALIBRATE=", "PR=slow_decode=0.03;perturb_logit", "BISECT=aaaaaaaaaa bbbbbbbbbb qwen3-0.6b:Q8_0",
		"BISECT_PACK="+pack)
	if len(calls) != 3 {
		t.Fatalf("abtest calls: %q", calls)
	}
	for i, m := range []string{"slow_decode=0.03", "perturb_logit"} {
		c := calls[i]
		if !strings.HasPrefix(c, "pr ") || argAfter(c, "--base") != "bin" || argAfter(c, "--head") != "bin" || !strings.Contains(c, "--head-env MINFER_TEST_MUTATE="+m) {
			t.Errorf("pr call %d: %q", i, c)
		}
	}
	// abtest itself accepts every flag the script passes.
	for i, c := range calls {
		f := strings.Fields(c)
		cmd := map[string]func() *cobra.Command{"pr": newPRCmd, "bisect": newBisectCmd}[f[0]]
		if cmd == nil {
			t.Fatalf("call %d: %q", i, c)
		}
		if err := cmd().ParseFlags(f[1:]); err != nil {
			t.Errorf("abtest %s refuses the script's flags: %v", f[0], err)
		}
	}
	c := calls[2]
	if !strings.HasPrefix(c, "bisect ") || argAfter(c, "--good") != "aaaaaaaaaa" || argAfter(c, "--bad") != "bbbbbbbbbb" || argAfter(c, "--workload") != "qwen3-0.6b:Q8_0" ||
		argAfter(c, "--builds") != "bisect" || argAfter(c, "--device") != "cuda" {
		t.Errorf("bisect call: %q", c)
	}
}

// nightly.sh SHARDS=N runs the shards one after another, each balanced from
// the nights folder (with the control lever when given), then merges them
// there; abtest accepts every flag it passes.
func TestNightlyScript_ShardsThenMerge(t *testing.T) {
	ab, _ := runScript(t, "nightly.sh", true, "SHARDS=2", "CONTROL=MINFER_NO_CUDA_GRAPH", "LEVERS=MINFER_MMQ,MINFER_NO_FUSE_QKV")
	if len(ab) != 3 || !strings.HasPrefix(ab[2], "merge ") {
		t.Fatalf("calls: %q", ab)
	}
	for i, c := range ab[:2] {
		if !strings.Contains(c, " --shard "+string(rune('0'+i))+"/2 ") || argAfter(c, "--control") != "MINFER_NO_CUDA_GRAPH" || argAfter(c, "--balance-from") != "nightly" ||
			strings.Contains(c, "--rounds") {
			t.Errorf("shard %d: %q", i, c)
		}
	}
	for _, c := range ab {
		f := strings.Fields(c)
		cmd := map[string]func() *cobra.Command{"nightly": newNightlyCmd, "merge": newMergeCmd}[f[0]]
		if err := cmd().ParseFlags(f[1:]); err != nil {
			t.Errorf("abtest %s refuses the script's flags: %v", f[0], err)
		}
	}
}

// MINFER_KERNELS (issue 25): a path with '/' and '=' reaches abtest whole,
// and @baseline=FILE becomes --baseline (arm A the file, arm B nvrtc)
// without losing the registry's --workload.
func TestDeviceScript_KernelsLeverTakesAPathAndABaseline(t *testing.T) {
	calls, _ := runDeviceScript(t, "LEVERS=MINFER_KERNELS=nvrtc@baseline=/w/bin/minfer-kernels.fatbin MINFER_KERNELS=/w/a=b/split.fatbin", "CALIBRATE=")
	if len(calls) != 2 {
		t.Fatalf("abtest calls: %q", calls)
	}
	if !strings.Contains(calls[0], " --lever MINFER_KERNELS=nvrtc ") || !strings.Contains(calls[0], " --baseline /w/bin/minfer-kernels.fatbin ") || !strings.Contains(calls[0], " --workload ") {
		t.Errorf("baseline spec: %q", calls[0])
	}
	if !strings.Contains(calls[1], " --lever MINFER_KERNELS=/w/a=b/split.fatbin ") || strings.Contains(calls[1], "--baseline") {
		t.Errorf("file spec: %q", calls[1])
	}
}

// KERNELS=nvrtc skips the nvcc build and names no kernels file to abtest
// (the arms and the SASS census use the NVRTC build); a kernels file beside
// minfer would make every arm load it instead, so the script refuses.
func TestDeviceScript_KernelsNVRTCSkipsTheNvccBuildAndRefusesAFileBesideMinfer(t *testing.T) {
	runs := func(calls []string) (r []string) {
		for _, c := range calls {
			if strings.HasPrefix(c, "run ") {
				r = append(r, c)
			}
		}
		return r
	}
	calls, _ := runDeviceScript(t, "LEVERS=MINFER_MMQ", "KERNELS=nvrtc")
	if calls = runs(calls); len(calls) != 1 || strings.Contains(calls[0], "--kernels") {
		t.Fatalf("KERNELS=nvrtc: abtest calls %q", calls)
	}
	calls, _ = runDeviceScript(t, "LEVERS=MINFER_MMQ")
	if calls = runs(calls); len(calls) != 1 || argAfter(calls[0], "--kernels") != "minfer-kernels.fatbin" {
		t.Fatalf("default: abtest calls %q", calls)
	}
	calls, _ = runDeviceScript(t, "LEVERS=MINFER_MMQ", "KERNELS=nvrtc", "FILE:bin/minfer-kernels.fatbin=old", "EXIT:2")
	if len(calls) != 0 {
		t.Fatalf("a kernels file beside minfer under KERNELS=nvrtc: abtest calls %q", calls)
	}
	calls, _ = runDeviceScript(t, "LEVERS=MINFER_MMQ", "KERNELS=nvrtc", "MINFER_KERNELS=/x.fatbin", "EXIT:2")
	if len(calls) != 0 {
		t.Fatalf("MINFER_KERNELS under KERNELS=nvrtc: abtest calls %q", calls)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scripts/device-drive.sh runs a session's STEPS on the GPU machine and
// scripts/device-poll.sh waits for it there. Neither can run here (no GPU),
// so these tests hold what can go wrong before the drive starts: a missing
// or misspelt step must be refused at once, before anything is written or
// run, and every step the usage offers must be one the script handles.

func driveScriptPath(name string) string { return filepath.Join("..", "..", "scripts", name) }

// runWithoutCommands runs scripts/NAME with only builtins to hand: PATH is a
// folder of fakes for the commands the scripts use, each logging its call
// and failing, and any other command is not found. It returns the combined
// output, the exit status and the fakes' calls.
func runWithoutCommands(t *testing.T, name string, env []string, args ...string) (string, int, string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	fakes := filepath.Join(dir, "fakes")
	if err := os.Mkdir(fakes, 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	for _, c := range strings.Fields("awk basename cat cp cuobjdump cut date dirname env grep ls mkdir mv ncu nohup nvidia-smi rm sed seq setsid sleep sort tail tar timeout touch tr") {
		body := "#!/bin/sh\necho \"$0 $*\" >>\"$FAKE_CALLS\"\nexit 1\n"
		if err := os.WriteFile(filepath.Join(fakes, c), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, append([]string{driveScriptPath(name)}, args...)...)
	// Not os.Environ(): a STEPS or OUT in the caller's environment must not leak in.
	cmd.Env = append([]string{"PATH=" + fakes, "HOME=" + dir, "TMPDIR=" + dir, "FAKE_CALLS=" + calls}, env...)
	out, _ := cmd.CombinedOutput()
	logged, err := os.ReadFile(calls)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode(), string(logged)
}

// driveStepNames is the script's STEP_NAMES list, the steps its usage offers.
func driveStepNames(t *testing.T, src string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^STEP_NAMES="([^"]*)"`).FindStringSubmatch(src)
	if m == nil || len(strings.Fields(m[1])) == 0 {
		t.Fatal("scripts/device-drive.sh: no STEP_NAMES=\"...\" line")
	}
	return strings.Fields(m[1])
}

func TestDeviceDriveScripts_ParseWithBashN(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, name := range []string{"device-drive.sh", "device-poll.sh"} {
		if out, err := exec.Command("bash", "-n", driveScriptPath(name)).CombinedOutput(); err != nil {
			t.Errorf("bash -n scripts/%s: %v\n%s", name, err, out)
		}
	}
}

func TestDeviceDrive_RefusesMissingOrUnknownStepsWithExit2BeforeRunningAnything(t *testing.T) {
	src, err := os.ReadFile(driveScriptPath("device-drive.sh"))
	if err != nil {
		t.Fatal(err)
	}
	names := driveStepNames(t, string(src))
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string // in the message
	}{
		{"unset", nil, nil, "STEPS is required"},
		{"blank", []string{"STEPS= \n "}, nil, "STEPS is required"},
		{"unknown", []string{"STEPS=kq nosuch ncug"}, nil, "unknown step(s): nosuch"},
		{"glob", []string{"STEPS=f*"}, nil, "unknown step(s): f*"},
		{"unknown with --check", []string{"STEPS=r11"}, []string{"--check"}, "unknown step(s): r11"},
		{"stray argument", []string{"STEPS=kq"}, []string{"kq"}, "unknown arguments: kq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, calls := runWithoutCommands(t, "device-drive.sh", tc.env, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2\n%s", code, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("the message does not say %q:\n%s", tc.want, out)
			}
			if !strings.Contains(out, "\nsteps: "+strings.Join(names, " ")+"\n") {
				t.Errorf("the message does not list the steps (%s):\n%s", strings.Join(names, " "), out)
			}
			if calls != "" || strings.Contains(out, "command not found") {
				t.Errorf("a refused start ran commands (it must refuse before any work):\n%s%s", calls, out)
			}
		})
	}
	// --check with known steps (newlines between them too) passes, still without running anything.
	out, code, calls := runWithoutCommands(t, "device-drive.sh", []string{"STEPS=kq r3\nncut"}, "--check")
	if code != 0 || !strings.Contains(out, "steps ok: kq r3 ncut") || calls != "" || strings.Contains(out, "command not found") {
		t.Errorf("--check of known steps: exit %d, want 0 with \"steps ok: kq r3 ncut\" and no command run\n%s%s", code, calls, out)
	}
}

func TestDeviceDrive_EveryListedStepHasACaseBranchAndADescription(t *testing.T) {
	b, err := os.ReadFile(driveScriptPath("device-drive.sh"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	names := driveStepNames(t, src)
	// The step loop's case statement: its branch heads are lines "a | b) ...".
	start := strings.Index(src, "\n    case $step in\n")
	if start < 0 {
		t.Fatal("scripts/device-drive.sh: no `case $step in` in the step loop")
	}
	end := strings.Index(src[start:], "\n    esac\n")
	if end < 0 {
		t.Fatal("scripts/device-drive.sh: the step loop's case has no esac")
	}
	head := regexp.MustCompile(`^([a-z0-9]+(?:\s*\|\s*[a-z0-9]+)*)\)`)
	var handled []string
	for _, line := range strings.Split(src[start:start+end], "\n") {
		if m := head.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			for _, p := range strings.Split(m[1], "|") {
				handled = append(handled, strings.TrimSpace(p))
			}
		}
	}
	for _, n := range names {
		if !slices.Contains(handled, n) {
			t.Errorf("step %q is listed in STEP_NAMES but has no branch in the step loop's case (branches: %v)", n, handled)
		}
	}
	for _, h := range handled {
		if !slices.Contains(names, h) {
			t.Errorf("the case handles %q, which STEP_NAMES does not list (validation refuses it)", h)
		}
	}
	// The usage describes each step: a step missing from the tables the
	// descriptions are built from (LEVER, RSPEC, NCU_RUNS, ...) shows blank.
	out, _, _ := runWithoutCommands(t, "device-drive.sh", nil)
	for _, n := range names {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(n) + ` +\S`).MatchString(out) {
			t.Errorf("the usage has no description of step %q:\n%s", n, out)
		}
	}
}

func TestDevicePoll_RefusesBadArgumentsWithExit2BeforeRunningAnything(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"none", []string{"OUT=/nonexistent"}, nil},
		{"one", []string{"OUT=/nonexistent"}, []string{"60"}},
		{"three", []string{"OUT=/nonexistent"}, []string{"60", "2", "3"}},
		{"not a number", []string{"OUT=/nonexistent"}, []string{"60s", "2"}},
		{"negative", []string{"OUT=/nonexistent"}, []string{"60", "-1"}},
		{"no OUT", nil, []string{"60", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, calls := runWithoutCommands(t, "device-poll.sh", tc.env, tc.args...)
			if code != 2 || !strings.Contains(out, "usage: OUT=DIR scripts/device-poll.sh SECONDS N") {
				t.Errorf("exit %d, want 2 with the usage line\n%s", code, out)
			}
			if calls != "" || strings.Contains(out, "command not found") {
				t.Errorf("a refused poll ran commands:\n%s%s", calls, out)
			}
		})
	}
}

// --skip stops the running A/B step once (abtest, then minfer) and returns
// when the step's exit line is in drive.log; it refuses when no A/B step
// runs, and says so when the step does not end.
func TestDeviceDrive_SkipStopsTheRunningABStepOnceAndWaitsForItsExitLine(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	run := func(t *testing.T, step string, pkillEnds bool) (string, int, string) {
		dir := t.TempDir()
		fakes := filepath.Join(dir, "fakes")
		if err := os.Mkdir(fakes, 0o755); err != nil {
			t.Fatal(err)
		}
		log := filepath.Join(dir, "drive.log")
		if err := os.WriteFile(log, []byte("== kq 10:00:00\nabkq exit 0 (MINFER_MMQ_F16_KQ) 10:05:00\n== qkr 10:05:00\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if step != "" {
			if err := os.WriteFile(filepath.Join(dir, "step"), []byte(step+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// The fake pkill logs its call; stopping abtest ends the step (its exit line), when asked to.
		end := ""
		if pkillEnds {
			end = `[ "$2" = abtest ] && echo "abqkr exit 143 (MINFER_FUSE_QKV_ROPE) 10:06:00" >>"$DRIVE_DIR/drive.log"`
		}
		body := "#!/bin/sh\necho \"pkill $*\" >>\"$DRIVE_DIR/calls\"\n" + end + "\nexit 0\n"
		if err := os.WriteFile(filepath.Join(fakes, "pkill"), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bash, driveScriptPath("device-drive.sh"), "--skip")
		cmd.Env = []string{"PATH=" + fakes + ":" + os.Getenv("PATH"), "DRIVE_DIR=" + dir, "SKIP_WAIT_S=2"}
		out, _ := cmd.CombinedOutput()
		calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
		return string(out), cmd.ProcessState.ExitCode(), string(calls)
	}
	out, code, calls := run(t, "abqkr", true)
	if code != 0 || !strings.Contains(out, "abqkr stopped: abqkr exit 143") || calls != "pkill -x abtest\npkill -x minfer\n" {
		t.Errorf("running A/B: exit %d, calls %q\n%s", code, calls, out)
	}
	out, code, _ = run(t, "abqkr", false)
	if code != 1 || !strings.Contains(out, "did not end within 2 s") {
		t.Errorf("a step that does not end: exit %d\n%s", code, out)
	}
	out, code, calls = run(t, "", true)
	if code != 1 || !strings.Contains(out, "no drive is running a step") || calls != "" {
		t.Errorf("no step: exit %d, calls %q\n%s", code, calls, out)
	}
}

// A poll packs the drive's folder into $OUT/dev.tgz and copies the files of
// its second folder (the SASS listings too large for dev.tgz) beside it,
// once the drive is DONE.
func TestDevicePoll_PacksTheDriveFolderAndBringsTheLargeFilesBeside(t *testing.T) {
	bash, d, x, out, fakes := pollFolders(t)
	for name, body := range map[string]string{
		filepath.Join(d, "drive.log"): "drive done 10:00:00\n", filepath.Join(d, "DONE"): "",
		filepath.Join(x, "nvcc.sass.gz"): "listing", filepath.Join(fakes, "nvidia-smi"): "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 0 MiB'\n",
	} {
		if err := os.WriteFile(name, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, driveScriptPath("device-poll.sh"), "10", "1")
	cmd.Env = []string{"PATH=" + fakes + ":" + os.Getenv("PATH"), "OUT=" + out, "DRIVE_DIR=" + d, "DRIVE_OUT=" + x}
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	if b, err := os.ReadFile(filepath.Join(out, "nvcc.sass.gz")); err != nil || string(b) != "listing" {
		t.Errorf("the large file beside dev.tgz: %q, %v", b, err)
	}
	list, err := exec.Command("tar", "-tzf", filepath.Join(out, "dev.tgz")).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "dev/drive.log") {
		t.Errorf("dev.tgz holds %q (%v), want dev/drive.log", list, err)
	}
}

// TestDevicePoll_ATermStopsTheWaitAndStillPacks: a call that runs out of
// time or device budget ends the poll with TERM long before its SECONDS;
// what the drive has written must still be packed into $OUT, at once
// (session 33 lost a whole call's files that way).
func TestDevicePoll_ATermStopsTheWaitAndStillPacks(t *testing.T) {
	bash, d, x, out, fakes := pollFolders(t)
	for name, body := range map[string]string{
		filepath.Join(d, "drive.log"):      "== probe 10:00:00\n", // not DONE, no finished line: the poll would wait its 120 s
		filepath.Join(fakes, "nvidia-smi"): "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 0 MiB'\n",
	} {
		if err := os.WriteFile(name, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, driveScriptPath("device-poll.sh"), "120", "5")
	cmd.Env = []string{"PATH=" + fakes + ":" + os.Getenv("PATH"), "OUT=" + out, "DRIVE_DIR=" + d, "DRIVE_OUT=" + x}
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the poll still waited 3 s after TERM\n%s", buf.String())
	}
	list, err := exec.Command("tar", "-tzf", filepath.Join(out, "dev.tgz")).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "dev/drive.log") {
		t.Errorf("after TERM dev.tgz holds %q (%v), want dev/drive.log\n%s", list, err, buf.String())
	}
	if !strings.Contains(buf.String(), "stopped after") {
		t.Errorf("no line saying the poll was stopped:\n%s", buf.String())
	}
	t.Logf("packed %v after TERM", time.Since(start).Round(time.Millisecond))
}

// pollFolders is bash and the four folders a device-poll.sh test uses: the
// drive's folder, its large-file folder, $OUT and a PATH folder of fakes.
func pollFolders(t *testing.T) (bash, d, x, out, fakes string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	d, x, out, fakes = filepath.Join(dir, "dev"), filepath.Join(dir, "dev-out"), filepath.Join(dir, "out"), filepath.Join(dir, "fakes")
	for _, p := range []string{d, x, out, fakes} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bash, d, x, out, fakes
}

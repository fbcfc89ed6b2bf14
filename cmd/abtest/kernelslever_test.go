package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// MINFER_KERNELS through the fake minfer (issue 25): arm A is the NVRTC
// build, arm B the kernels file given on the command line; the census
// names where each arm's kernels came from (kernels_nvrtc, kernels_file).

func kernelsFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "minfer-kernels.fatbin")
	if err := os.WriteFile(f, []byte("fatbin"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRunKernels_FileAgainstNVRTCPassesWithLivenessInEachGate(t *testing.T) {
	bin := fakeMinfer(t)
	fakeGPU(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_KERNELS="+kernelsFile(t), "--rounds", "5", "--device", "cuda", "--gates", "greedy,ab", "--workload=false")
	if code != 3 || rec.Verdict != gates.VerdictPartial {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Status != gates.Pass || !strings.HasPrefix(g.Liveness, "PASS") || !strings.Contains(g.Liveness, "kernels_file") || !strings.Contains(g.Liveness, "kernels_nvrtc") {
			t.Errorf("%s: %s (%s); liveness %q", g.Gate, g.Status, g.Reason, g.Liveness)
		}
	}
}

// A file arm that loaded the NVRTC build (phantom: MINFER_KERNELS reads
// as arm A's nvrtc) fails liveness.
func TestRunKernels_PhantomFileArmFailsLiveness(t *testing.T) {
	bin := fakeMinfer(t)
	fakeGPU(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_KERNELS="+kernelsFile(t), "--device", "cuda", "--gates", "greedy", "--mutate", "phantom", "--workload=false")
	if code != 1 || status(rec, gates.GateGreedy) != gates.Fail {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Gate == gates.GateGreedy && (!strings.Contains(g.Reason, "ran no kernels_file") || !strings.Contains(g.Reason, "still ran kernels_nvrtc")) {
			t.Errorf("greedy failed for another reason: %s", g.Reason)
		}
	}
}

// Arm B has no default: the bare lever, and a file that does not exist,
// could not run (exit 2) with one line that says what to give.
func TestRunKernels_ArmBMustBeGivenAndExist(t *testing.T) {
	bin := fakeMinfer(t)
	fakeGPU(t)
	for _, tc := range []struct{ lever, want string }{
		{"MINFER_KERNELS", "arm B has no default: give it as --lever MINFER_KERNELS=B"},
		{"MINFER_KERNELS=" + filepath.Join(t.TempDir(), "gone.fatbin"), "gone.fatbin"},
	} {
		code, msg := runStderr(t, []string{"run", "--minfer", bin, "--out", t.TempDir(), "--lever", tc.lever, "--device", "cuda", "--workload=false"})
		if code != 2 || !strings.Contains(msg, tc.want) {
			t.Errorf("--lever %s: exit %d, stderr %q; want 2 and %q", tc.lever, code, msg, tc.want)
		}
	}
}

package main

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// --with MINFER_X=V sets X in both arms, says so as a deviation and keeps
// the run's verdict; the lever itself, the mutation seam, an unknown lever
// or an invalid value are refused (exit 2) before anything runs.
func TestRun_WithPinsALeverInBothArmsAndBadOnesAreRefused(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_QKV=")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "parity,greedy", "--with", "MINFER_NO_FUSE_FFN=1")
	if code == 2 || rec.Config.A.Env["MINFER_NO_FUSE_FFN"] != "1" || rec.Config.B.Env["MINFER_NO_FUSE_FFN"] != "1" || len(rec.Config.With) != 1 {
		t.Fatalf("exit %d: %s; arms %v / %v", code, rec.VerdictLine, rec.Config.A.Env, rec.Config.B.Env)
	}
	dev := strings.Join(rec.Config.Deviations, "; ")
	if !strings.Contains(dev, "--with MINFER_NO_FUSE_FFN=1 in both arms (registry default: 0)") {
		t.Errorf("deviations: %s", dev)
	}
	if rec.Verdict == gates.VerdictPass {
		t.Errorf("a run of two gates passed: %s", rec.VerdictLine)
	}
	for _, w := range []string{"MINFER_NO_FUSE_QKV=0", "MINFER_TEST_MUTATE=perturb_logit", "MINFER_NOPE=1", "MINFER_NO_FUSE_FFN=7", "PATH=/x"} {
		out := t.TempDir()
		if c := run([]string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "parity", "--with", w}); c != 2 {
			t.Errorf("--with %s: exit %d, want 2", w, c)
		}
	}
}

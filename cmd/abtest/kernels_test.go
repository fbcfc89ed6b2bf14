package main

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// Issue 25: an arm whose minfer refuses its kernels file (built from other
// sources: exit schema.ExitStaleKernels) is the set-up, not the lever. In
// any arm, arm B alone included, every gate that runs arm processes could
// not run, and the run exits 2 (not 1: nothing of the lever was measured).
func TestStaleKernels_AnyArmCouldNotRunExit2(t *testing.T) {
	bin := fakeMinfer(t)
	for _, when := range []string{"always", "MINFER_CACHE_TYPE=f16"} {
		t.Setenv("FAKEMINFER_STALE_KERNELS_WHEN", when)
		code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "parity,greedy,ab", "--rounds", "3", "--device", "cpu")
		if code != gates.ExitCannotRun || rec.Verdict != gates.VerdictCannotRun {
			t.Fatalf("%s: exit %d, verdict %s: %s", when, code, rec.Verdict, rec.VerdictLine)
		}
		for _, g := range rec.Gates {
			if g.Status == gates.Fail || !g.CannotRun || !strings.Contains(g.Reason, "kernels file was not built from its minfer's sources") {
				t.Errorf("%s: gate %s: %s, cannot run %v: %s", when, g.Gate, g.Status, g.CannotRun, g.Reason)
			}
		}
	}
}

// Every report states which kernel sources its minfer embeds (and, on
// CUDA, the kernels file: see harness.Environment.KernelsLine).
func TestRun_ReportStatesTheKernelSources(t *testing.T) {
	bin := fakeMinfer(t)
	_, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--gates", "ab", "--rounds", "3", "--device", "cpu")
	if !strings.HasPrefix(rec.Env.KernelSources, "fa4e") || rec.Env.Kernels != nil {
		t.Errorf("environment: kernel sources %q, kernels %+v; want the fake's hash and no file on the CPU", rec.Env.KernelSources, rec.Env.Kernels)
	}
	if l := rec.Env.KernelsLine(); !strings.Contains(l, "none loaded") || !strings.Contains(l, rec.Env.KernelSources) {
		t.Errorf("kernels line %q", l)
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
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

// A lever whose path reads one KV cache format (its rule's needs.kv_cache)
// runs every arm process of parity and greedy on that cache, though the
// model's own cache would be another: both arms' census shows the f16 KV
// stores and none of f32's. The report states the pin under the lever's
// description and marks it in the lever table, not as a deviation; a --with
// of another cache cannot run (exit 2) before anything runs.
func TestRun_KVCacheNeedRunsEveryArmOnThatCacheAndAnotherWithIsRefused(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_QKV=")
	t.Setenv("FAKEMINFER_KVCACHE", "MINFER_NO_FUSE_QKV=f16")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "parity,greedy")
	if code == 2 || rec.Config.A.Env["MINFER_CACHE_TYPE"] != "f16" || rec.Config.B.Env["MINFER_CACHE_TYPE"] != "f16" || len(rec.Config.Deviations) != 0 {
		t.Fatalf("exit %d: %s; arms %v / %v; deviations %v", code, rec.VerdictLine, rec.Config.A.Env, rec.Config.B.Env, rec.Config.Deviations)
	}
	for _, g := range []string{gates.GateParity, gates.GateGreedy} {
		r := gateOf(rec, g)
		var ev []gates.ArmEvidence
		switch {
		case r.Parity != nil:
			ev = []gates.ArmEvidence{r.Parity.CensusA, r.Parity.CensusB}
		case r.Greedy != nil:
			ev = []gates.ArmEvidence{r.Greedy.CensusA, r.Greedy.CensusB}
		}
		if len(ev) == 0 {
			t.Fatalf("%s: no census evidence (%s)", g, r.Reason)
		}
		for _, e := range ev {
			if e.Processes == 0 || e.Census["cpu_kv_store_f16"] == 0 || e.Census["cpu_kv_store_f32"] != 0 {
				t.Errorf("%s arm %s: %d processes, census %v; want every one on the f16 cache", g, e.Arm.Name, e.Processes, e.Census)
			}
		}
	}
	md := report.Markdown(rec, nil)
	for _, want := range []string{
		"Pinned in both arms, for the path (the registry's declaration, not a deviation): MINFER_CACHE_TYPE=f16 (MINFER_NO_FUSE_QKV's path runs only over a KV cache of f16",
		"f16 (pinned: the path's KV cache)",
		"; not in the device suite, whose tests choose their caches)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report does not say %q", want)
		}
	}
	if strings.Contains(md, "Deviations from the registry") {
		t.Error("the pin is reported as a deviation")
	}
	for _, w := range []string{"MINFER_CACHE_TYPE=f32", "MINFER_CACHE_TYPE=auto"} {
		if c := run([]string{"run", "--minfer", bin, "--out", t.TempDir(), "--lever", "MINFER_NO_FUSE_QKV", "--gates", "parity", "--with", w}); c != 2 {
			t.Errorf("--with %s: exit %d, want 2", w, c)
		}
	}
}

// A lever whose path is routed by depth declares the setting under which it
// runs from the first KV cell (its rule's needs.any_depth). The correctness
// gates (parity, greedy, the suite) run every arm process with it, since
// their models' short contexts would never reach the path; the A/B and the
// profile gate run the arms as declared, at the workload where users meet
// the route. The arms' settings do not carry it; the report states the pin
// under the lever's description with the gates that applied it and marks
// it in the lever table, not as a deviation. (A harmless stand-in here:
// MINFER_DRAFT_N=3 as MINFER_CACHE_TYPE's any_depth.)
func TestRun_AnyDepthPinAppliesInTheCorrectnessGatesOnlyAndTheReportSaysWhere(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_ANYDEPTH", "MINFER_CACHE_TYPE=MINFER_DRAFT_N=3")
	code, rec := runAbtest(t, bin, "--lever", "MINFER_CACHE_TYPE=f16", "--rounds", "5", "--device", "cpu", "--suite-bin", filepath.Join(projectTestBins(t), "*.test"))
	if code == 2 || len(rec.Gates) != 5 {
		t.Fatalf("exit %d: %s", code, rec.VerdictLine)
	}
	if _, ok := rec.Config.A.Env["MINFER_DRAFT_N"]; ok || rec.Config.B.Env["MINFER_DRAFT_N"] != "" || len(rec.Config.Deviations) != 0 {
		t.Errorf("arms %v / %v, deviations %v: the pin is no arm setting and no deviation", rec.Config.A.Env, rec.Config.B.Env, rec.Config.Deviations)
	}
	pinned := map[string]bool{}
	for _, c := range rec.Reproduce {
		key, cmd, _ := strings.Cut(c, "\n")
		pinned[strings.TrimPrefix(key, "# ")] = strings.Contains(cmd, "MINFER_DRAFT_N=3")
	}
	for key, want := range map[string]bool{
		"parity: arm A logits": true, "parity: arm B logits": true, "greedy: arm A": true, "greedy: arm B": true,
		"ab: timed round, arm A": false, "ab: timed round, arm B": false, "profile: launch census arm A": false, "profile: launch census arm B": false,
	} {
		if got, ok := pinned[key]; !ok || got != want {
			t.Errorf("%s: recorded %v, carries the pin %v; want %v", key, ok, got, want)
		}
	}
	if s := gateOf(rec, gates.GateSuite).Suite; s == nil || s.Env["MINFER_DRAFT_N"] != "3" || s.Env["MINFER_CACHE_TYPE"] != "f16" {
		t.Errorf("suite: %+v, want arm B's settings and the pin", s)
	}
	if p := gateOf(rec, gates.GateParity).Parity; p == nil || p.CensusB.Arm.Env["MINFER_DRAFT_N"] != "3" {
		t.Errorf("parity's arm B evidence does not carry the pin")
	}
	md := report.Markdown(rec, nil)
	for _, want := range []string{
		"MINFER_DRAFT_N=3 (MINFER_CACHE_TYPE's path is routed by depth and runs from the first KV cell only with MINFER_DRAFT_N=3, while the correctness gates' models run short contexts",
		"; applied in parity, greedy and suite; not in ab and profile, which run the route as users get it at the run's workload)",
		"4 (3 in parity, greedy and suite: any_depth)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report does not say %q", want)
		}
	}
	if strings.Contains(md, "Deviations from the registry") {
		t.Error("the pin is reported as a deviation")
	}
}

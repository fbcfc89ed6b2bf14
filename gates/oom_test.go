package gates

import (
	"errors"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/schema"
)

func oomArm(label string, exit int, timedOut bool) error {
	return &harness.ArmError{Exec: &harness.Exec{Label: label, Exit: exit, TimedOut: timedOut}, Err: errors.New("exit")}
}

// Only an arm that exited with schema.ExitOutOfMemory is out of memory:
// not a crash (1), not a usage error (2), not one killed at its limit.
func TestArmOutOfMemory_OnlyTheOutOfMemoryExit(t *testing.T) {
	if !armOutOfMemory(oomArm("a", schema.ExitOutOfMemory, false)) {
		t.Error("exit 3 is not out of memory")
	}
	for _, err := range []error{oomArm("a", 1, false), oomArm("a", 2, false), oomArm("a", schema.ExitOutOfMemory, true), errors.New("x"), nil} {
		if armOutOfMemory(err) {
			t.Errorf("%v is out of memory", err)
		}
	}
}

// A pull request whose base does not fit a workload could not run (exit
// 2), unless another workload regressed (exit 1).
func TestPR_BaseOutOfMemoryCouldNotRunExit2(t *testing.T) {
	cannot := &Record{Complete: true, Gates: []Result{{Gate: GateAB, Status: Skip, CannotRun: true, Reason: "could not run: arm A ran out of memory"}}}
	pass := &Record{Complete: true, Gates: []Result{{Gate: GateAB, Status: Pass}}}
	p := &PRRun{Workloads: []PRWorkload{{Workload: "w1", Record: cannot}, {Workload: "w2", Record: pass}}}
	p.Decide()
	if p.Verdict != PRCannotRun || p.ExitCode() != ExitCannotRun || !strings.Contains(p.VerdictLine, "could not run (the base does not fit): w1") {
		t.Fatalf("verdict %s, exit %d: %s", p.Verdict, p.ExitCode(), p.VerdictLine)
	}
	failed := &Record{Complete: true, Gates: []Result{{Gate: GateGreedy, Status: Fail, Reason: "diverged"}}}
	p.Workloads = append(p.Workloads, PRWorkload{Workload: "w3", Record: failed})
	p.Decide()
	if p.Verdict != PRRegression || p.ExitCode() != ExitFail {
		t.Fatalf("with a regression: verdict %s, exit %d", p.Verdict, p.ExitCode())
	}
}

// A lever run with a gate that could not run is COULD NOT RUN, exit 2,
// whatever else is undecided; a FAIL elsewhere still wins.
func TestDecide_CannotRunGateIsCouldNotRunUnlessAGateFailed(t *testing.T) {
	r := &Record{Complete: true, Gates: []Result{{Gate: GateParity, Status: Inconclusive, Reason: "x"},
		{Gate: GateAB, Status: Skip, CannotRun: true, Reason: "could not run: arm A ran out of memory"}}}
	r.Decide()
	if r.Verdict != VerdictCannotRun || r.ExitCode() != ExitCannotRun || !strings.Contains(r.VerdictLine, "could not run: ab: ") {
		t.Fatalf("verdict %s, exit %d: %s", r.Verdict, r.ExitCode(), r.VerdictLine)
	}
	r.Gates = append(r.Gates, Result{Gate: GateGreedy, Status: Fail, Reason: "diverged"})
	r.Decide()
	if r.Verdict != VerdictFail || r.ExitCode() != ExitFail {
		t.Fatalf("with a FAIL: verdict %s, exit %d", r.Verdict, r.ExitCode())
	}
}

// minfer's own device_memory (schema.DeviceMemory) is summed up in one
// phrase for the cross-check, not cut raw at 200 characters.
func TestEngineMemory_MinfersDocumentInOnePhrase(t *testing.T) {
	out := []byte(`{"tests":[],"device_memory":{"backend":"cuda","classes":{"weights_bytes":1048576,"derived_weights_bytes":0,` +
		`"kv_cache_bytes":2097152,"activations_bytes":3145728,"workspace_bytes":0},"total_bytes":6291456,` +
		`"driver":{"free_at_open_bytes":10,"free_bytes":5,"total_bytes":20,"used_since_open_bytes":7340032},` +
		`"plan":{"model":"m","backend":"cuda","n_ctx":4,"kv_format":"f16","weights_bytes":1,"derived_bytes":0,"kv_bytes":1,` +
		`"scratch_bytes":1,"overhead_bytes":1,"total_bytes":9437184,"need_bytes":3}}}`)
	want := "6 MiB counted (weights 1, derived 0, KV 2, activations 3, workspace 0), 7 MiB by the driver since open, plan 9 MiB with the context"
	if got := engineMemory(out); got != want {
		t.Errorf("engineMemory = %q, want %q", got, want)
	}
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/schema"
)

// A model whose plan does not fit is refused in one line naming the
// classes, the free memory, the context that fits and what lowers it, and
// minfer exits with schema.ExitOutOfMemory (not 1: no defect of a path).
func TestBench_PlanThatDoesNotFitIsOneLineExitOutOfMemory(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-c", "1000000000", "-p", "8", "-n", "2", "-r", "1")
	wantOneLineFailure(t, stdout, stderr, code, schema.ExitOutOfMemory, "at -c 1000000000 needs ")
	for _, want := range []string{"KV f32 ", "GiB free on cpu", "the largest context that fits is about", "-c N or MINFER_CACHE_TYPE=q8_0 lowers it"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal %q lacks %q", stderr, want)
		}
	}
}

// info --device prints the plan without running: the classes, the total,
// the free memory and the answer; --json carries it as memory_plan; -c
// without --device is a usage error.
func TestInfo_DeviceAndCtxPrintTheMemoryPlan(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "info", "-m", m, "--device", "cpu", "-c", "100000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"memory plan    qwen2-tiny F16 on cpu at -c 100000, KV f32", "  weights      ", "  KV cache     ",
		"  scratch      ", "  total        ", "beyond the trained context", "  free         "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info lacks %q:\n%s", want, stdout)
		}
	}
	stdout, stderr, code = runCLI(t, testConfig(t), "info", "-m", m, "--device", "cpu", "-c", "100000", "--json")
	var in schema.Info
	if err := json.Unmarshal([]byte(stdout), &in); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stderr)
	}
	p := in.MemoryPlan
	if p == nil || p.NCtx != 100000 || p.Backend != "cpu" || p.KVBytes == 0 || p.FreeBytes == 0 || p.Fits == nil || p.MaxCtx == 0 {
		t.Errorf("memory_plan %+v", p)
	}
	if _, _, code := runCLI(t, testConfig(t), "info", "-m", m, "-c", "100"); code != schema.ExitUsage {
		t.Errorf("-c without --device: exit %d, want %d", code, schema.ExitUsage)
	}
	// Without --device, no plan: the document is as before.
	stdout, _, _ = runCLI(t, testConfig(t), "info", "-m", m, "--json")
	if strings.Contains(stdout, "memory_plan") {
		t.Errorf("info --json without --device has a memory plan")
	}
}

// A CPU bench has no device_memory (no device to account).
func TestBench_CPUHasNoDeviceMemory(t *testing.T) {
	m := synthModel(t)
	stdout, stderr, code := runCLI(t, testConfig(t), "bench", "--model", m, "--device", "cpu", "-p", "8", "-n", "2", "-r", "1", "--format", "json")
	if code != 0 || strings.Contains(stdout, "device_memory") {
		t.Fatalf("exit %d, device_memory on the CPU: %s %s", code, stdout, stderr)
	}
}

// An out-of-memory after the plan fit (an *memplan.OOMError, wrapped by the
// command) exits like the refusal; a usage error 2, any other 1.
func TestExitCode_OutOfMemoryAfterThePlanIsExitOutOfMemoryToo(t *testing.T) {
	oom := fmt.Errorf("bench: %w", &memplan.OOMError{Plan: memplan.Plan{Model: "m", NCtx: 8}, Err: fmt.Errorf("cuda: pool: %w", graph.ErrOutOfMemory)})
	for _, c := range []struct {
		err  error
		want int
	}{{oom, schema.ExitOutOfMemory}, {usagef("bad flag"), schema.ExitUsage}, {errors.New("boom"), schema.ExitError}, {nil, schema.ExitOK}} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// printPlan and planDoc show weights kept in mapped host memory
// (MINFER_EMBED_HOST) as their own class, outside the device total and
// what must be free.
func TestPrintPlan_HostMappedClassOutsideTheTotal(t *testing.T) {
	p := memplan.Plan{Model: "m", Backend: "cuda", NCtx: 4096, Weights: 7 << 30, HostMapped: 552 << 20, KV: 1 << 30, KVPerCell: 1 << 18}
	var b strings.Builder
	printPlan(&b, p, 0, "not checked")
	if !strings.Contains(b.String(), "  host-mapped  552.0 MiB (page-locked host memory the device reads: not device memory, not in the total)") {
		t.Errorf("plan text lacks the host-mapped line:\n%s", b.String())
	}
	d := planDoc(p, 0)
	if d.HostMappedBytes != 552<<20 || d.TotalBytes != 8<<30 || d.NeedBytes != 8<<30 {
		t.Errorf("plan document: host-mapped %d, total %d, need %d; want 552 MiB outside 8 GiB", d.HostMappedBytes, d.TotalBytes, d.NeedBytes)
	}
}

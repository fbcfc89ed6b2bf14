package gates

import (
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
)

// memRounds builds n rounds of exact rates (B/A = tgRatio on decode),
// each arm process measured at aMiB / bMiB, with a neighbour in the
// rounds listed.
func memRounds(n int, tgRatio float64, aMiB, bMiB uint64, neighbourIn ...int) *ABDetail {
	d := &ABDetail{Planned: n}
	usage := func(m uint64, others []gpumem.Other) *gpumem.Usage {
		return &gpumem.Usage{Measured: true, Method: "pid", PeakBytes: m << 20, Samples: 3, Source: "test", Others: others}
	}
	for _, arm := range []string{"A", "B"} {
		m := aMiB
		if arm == "B" {
			m = bMiB
		}
		d.Warmup = append(d.Warmup, WarmupRun{Arm: arm, Mem: usage(m, nil)})
	}
	for i := 0; i < n; i++ {
		var others []gpumem.Other
		for _, j := range neighbourIn {
			if j == i+1 {
				others = []gpumem.Other{{PID: 4242, PeakBytes: 3 << 30}}
			}
		}
		run := func(tg float64, m uint64) ArmRun {
			return ArmRun{PP: 4000, TG: tg, Wall: time.Second, Mem: usage(m, others)}
		}
		d.Rounds = append(d.Rounds, Round{I: i + 1, Order: harness.Order(i), A: run(400, aMiB), B: run(400*tgRatio, bMiB)})
	}
	return d
}

func finish(d *ABDetail, bar harness.MemoryBar) Result {
	cfg := Config{Backend: "cuda", A: Arm{Name: "A"}, B: Arm{Name: "B"}, Memory: bar}
	cfg.Defaults()
	res := Result{Gate: GateAB, AB: d}
	finishAB(&res, cfg)
	return res
}

// The verdict rules of the memory bar and of marked rounds (GATES.md gate
// 3, issue 19), on rounds built by hand.
func TestFinishAB_MemoryBarAndMarkedRounds(t *testing.T) {
	def := harness.DefaultMemory
	cost := harness.MemoryBar{Frac: 1, MiB: 64, Cost: "a second copy"}
	for _, c := range []struct {
		name   string
		d      *ABDetail
		bar    harness.MemoryBar
		status Status
		reason string
	}{
		{"same memory, same speed", memRounds(9, 1, 1000, 1000), def, Pass, "not slower"},
		{"B at the bar: A + 1% + 64 MiB", memRounds(9, 1, 1000, 1074), def, Pass, "not slower"},
		{"B just over the bar", memRounds(9, 1, 1000, 1075), def, Fail, "memory over the bar: arm B's peak device memory 1.05 GiB is above B <= A + 1% + 64 MiB"},
		{"twice A with its cost declared", memRounds(9, 1, 1000, 2000), cost, Pass, "not slower"},
		{"over the bar and a neighbour: still a FAIL", memRounds(9, 1, 1000, 3000, 4), cost, Fail, "memory over the bar"},
		{"a neighbour in one round: no PASS", memRounds(9, 1, 1000, 1000, 4), def, Inconclusive, "1 of 9 rounds marked (round 4: another process on the GPU: pid 4242 (3 GiB)), so the speed verdict cannot rest on them; without the marks: PASS"},
		{"a refusal resting on marked rounds: not blamed", memRounds(9, 0.9, 1000, 1000, 1, 2, 3, 4, 5, 6, 7, 8, 9), def, Inconclusive, "without the marks: FAIL: not-slower check refused"},
		{"a refusal without marks", memRounds(9, 0.9, 1000, 1000), def, Fail, "not-slower check refused"},
	} {
		r := finish(c.d, c.bar)
		if r.Status != c.status || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: %s: %s", c.name, r.Status, r.Reason)
		}
	}
}

// A CPU run has no device memory and no GPU neighbours: not measured, no
// marks, the verdict as before.
func TestFinishAB_CPUBackendIsNotMeasuredAndNotMarked(t *testing.T) {
	d := memRounds(9, 1, 1000, 5000, 1, 2)
	cfg := Config{Backend: "cpu", A: Arm{Name: "A"}, B: Arm{Name: "B"}}
	cfg.Defaults()
	res := Result{Gate: GateAB, AB: d}
	finishAB(&res, cfg)
	if res.Status != Pass || len(d.Marked) != 0 || d.Memory.Status != MemNotMeasured || !strings.Contains(d.Memory.Line(), "memory: not measured (the arms ran on the CPU backend") {
		t.Fatalf("%s: %s; marked %v; %s", res.Status, res.Reason, d.Marked, d.Memory.Line())
	}
}

func TestEngineMemory_RawFieldOrNone(t *testing.T) {
	if got := engineMemory([]byte(`{"tests":[], "device_memory": {"peak_bytes": 5,  "x": [1, 2]}}`)); got != `{"peak_bytes":5,"x":[1,2]}` {
		t.Errorf("got %q", got)
	}
	if got := engineMemory([]byte(`{"tests":[]}`)); got != "" {
		t.Errorf("got %q", got)
	}
}

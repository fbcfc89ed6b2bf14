package levers_test

import (
	"fmt"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/synth"
)

// An external test package: engine/synth imports levers, so only a test
// outside package levers can ask synth which shapes and types it knows.

// workloadProblem is the registry check of one lever's Workload: "" when
// it parses, names a shape and type `minfer synth` writes (or only a pp),
// and sits on a lever abtest runs.
func workloadProblem(l levers.Lever) string {
	if l.Workload == "" {
		return ""
	}
	shape, typ, pp, err := levers.ParseWorkload(l.Workload)
	switch {
	case err != nil:
		return err.Error()
	case shape == "" && pp == 0:
		return fmt.Sprintf("workload %q declares neither a model nor a pp", l.Workload)
	case l.ArmA == "" || l.ArmB == "" || l.Reserved != "":
		return fmt.Sprintf("a workload on a lever abtest does not run (arms %q/%q, reserved %q)", l.ArmA, l.ArmB, l.Reserved)
	}
	if shape != "" {
		if _, err := synth.ShapeByName(shape); err != nil {
			return fmt.Sprintf("workload %q: %v", l.Workload, err)
		}
		if _, _, err := synth.ParseType(typ); err != nil {
			return fmt.Sprintf("workload %q: %v", l.Workload, err)
		}
	}
	return ""
}

func TestRegistry_EveryWorkloadParsesAndNamesAModelSynthWrites(t *testing.T) {
	n := 0
	for _, l := range levers.All() {
		if l.Workload != "" {
			n++
		}
		if p := workloadProblem(l); p != "" {
			t.Errorf("%s: %s", l.Name, p)
		}
	}
	// The levers whose paths the default workload (qwen2-0.5b Q8_0, pp512)
	// never reaches.
	for name, want := range map[string]string{
		"MINFER_FUSE_QKNORM":     "qwen3-0.6b:Q8_0",
		"MINFER_NO_KQ_MMVQ":      "qwen2-0.5b:Q4_K_M",
		"MINFER_NO_Q40_MMVQ":     "qwen2-0.5b:Q4_0",
		"MINFER_MMVQ_NT":         "pp5",
		"MINFER_NO_PREFILL_GEMM": "qwen2-0.5b:F16",
	} {
		if l, _ := levers.Lookup(name); l.Workload != want {
			t.Errorf("%s: workload %q, want %q", name, l.Workload, want)
		}
	}
	if n == 0 {
		t.Fatal("no lever declares a workload")
	}
}

func TestParseWorkload_GrammarAndItsErrors(t *testing.T) {
	for _, c := range []struct {
		in        string
		shape, ty string
		pp        int
	}{
		{"", "", "", 0},
		{"qwen3-0.6b:Q8_0", "qwen3-0.6b", "Q8_0", 0},
		{"pp5", "", "", 5},
		{"qwen2-0.5b:Q4_0 pp512", "qwen2-0.5b", "Q4_0", 512},
		{"  pp7   qwen2-tiny:F16 ", "qwen2-tiny", "F16", 7},
	} {
		shape, ty, pp, err := levers.ParseWorkload(c.in)
		if err != nil || shape != c.shape || ty != c.ty || pp != c.pp {
			t.Errorf("%q: %q %q %d %v", c.in, shape, ty, pp, err)
		}
	}
	for _, bad := range []string{"pp", "pp0", "pp-3", "ppx", "pp5 pp6", "qwen2-0.5b", "qwen2-0.5b:", ":Q8_0", "a:b:c",
		"qwen2-0.5b:Q8_0 qwen3-0.6b:Q8_0", "qwen2-0.5b:Q8_0,pp5"} {
		if s, ty, pp, err := levers.ParseWorkload(bad); err == nil {
			t.Errorf("%q accepted: %q %q %d", bad, s, ty, pp)
		}
	}
}

// TestRegistry_BadWorkloadFailsTheCheck: the check the registry test
// applies fails a workload that does not parse, or names a shape or type
// synth does not know.
func TestRegistry_BadWorkloadFailsTheCheck(t *testing.T) {
	good, _ := levers.Lookup("MINFER_FUSE_QKNORM")
	if p := workloadProblem(good); p != "" {
		t.Fatalf("the registry's own workload fails: %s", p)
	}
	for _, w := range []string{"qwen3-0.6b", "pp0", "qwen9-1b:Q8_0", "qwen2-0.5b:Q9_9", "qwen2-0.5b:Q8_0 pp5 pp6"} {
		l := good
		l.Workload = w
		if p := workloadProblem(l); p == "" {
			t.Errorf("workload %q passes the registry check", w)
		}
	}
	l := good
	l.ArmA, l.ArmB = "", ""
	if p := workloadProblem(l); p == "" {
		t.Error("a workload on a lever without arms passes the registry check")
	}
}

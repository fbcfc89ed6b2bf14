package harness

import (
	"context"
	"os"
	"strings"
	"testing"
)

func TestParseLevers_RecordedRegistryFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/levers.json")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := ParseLevers(b)
	if err != nil {
		t.Fatal(err)
	}
	l, err := FindLever(ls, "MINFER_CACHE_TYPE")
	if err != nil || l.ArmA != "f32" || l.ArmB != "f16" || l.KindS != "enum" {
		t.Fatalf("%+v %v", l, err)
	}
	if err := l.Validate("f8"); err == nil || !strings.Contains(err.Error(), "q8_0") {
		t.Errorf("invalid value error should list the valid ones: %v", err)
	}
	if _, err := FindLever(ls, "MINFER_NOPE"); err == nil || !strings.Contains(err.Error(), "MINFER_MMQ") {
		t.Errorf("unknown lever error should list the levers: %v", err)
	}
}

func TestParseTolerance_ClassClauses(t *testing.T) {
	tol, err := ParseTolerance("accumulation-order: max|diff| <= 0.5, top-1 equal at every position, top-2 margin > 0.1 where compared")
	if err != nil || tol.Class != "accumulation-order" || !tol.Bounded || tol.MaxAbsDiff != 0.5 || !tol.Top1Equal || tol.MarginBar != 0.1 {
		t.Fatalf("%+v %v", tol, err)
	}
	if b, _ := ParseTolerance(""); !b.Bitwise {
		t.Error("empty class is not bitwise")
	}
	if _, err := ParseTolerance("x: wobble"); err == nil {
		t.Error("unknown clause accepted")
	}
}

func TestRunner_CleanEnvDropsInheritedLevers(t *testing.T) {
	r := &Runner{Bin: "/usr/bin/env", Base: []string{"PATH=/usr/bin:/bin", "MINFER_MMQ=0"}, Pinned: map[string]string{"MINFER_X": "1"}}
	e, err := r.Run(context.Background(), "env", map[string]string{"MINFER_Y": "2", "MINFER_X": Unset})
	if err != nil {
		t.Fatal(err)
	}
	out := string(e.Stdout)
	if strings.Contains(out, "MINFER_MMQ") || strings.Contains(out, "MINFER_X") || !strings.Contains(out, "MINFER_Y=2") {
		t.Fatalf("env:\n%s", out)
	}
}

func TestParseSMI_DeviceQueryWithUnits(t *testing.T) {
	out := "name, driver_version, clocks.current.sm [MHz], clocks.current.memory [MHz], clocks.max.sm [MHz], clocks_event_reasons.active, temperature.gpu, power.draw [W]\n" +
		"NVIDIA H200, 580.65.06, 1980 MHz, 3201 MHz, 1980 MHz, 0x0000000000000000, 41, 312.55 W\n"
	cs, err := ParseSMI(out)
	if err != nil || len(cs) != 1 || cs[0].SMMHz != 1980 || cs[0].PowerW != 312.55 || cs[0].Name != "NVIDIA H200" {
		t.Fatalf("%+v %v", cs, err)
	}
}

// Each GPU reads its UUID, so a shard names the GPU it ran on; the GPU is
// the one CUDA_VISIBLE_DEVICES names first.
func TestParseSMI_UUIDAndTheVisibleGPU(t *testing.T) {
	out := "name, driver_version, a, b, c, d, e, f, uuid\n" +
		"NVIDIA H200, 580, 1980 MHz, 3201 MHz, 1980 MHz, 0x0, 41, 312 W, GPU-1111\n" +
		"NVIDIA H200, 580, 1980 MHz, 3201 MHz, 1980 MHz, 0x0, 40, 300 W, GPU-2222\n"
	cs, err := ParseSMI(out)
	if err != nil || len(cs) != 2 || cs[1].UUID != "GPU-2222" {
		t.Fatalf("%+v %v", cs, err)
	}
	for v, want := range map[string]string{"": "", "1": "1", " 1,0": "1", "GPU-2222,GPU-1111": "GPU-2222"} {
		if got := VisibleGPU(v); got != want {
			t.Errorf("VisibleGPU(%q) = %q, want %q", v, got, want)
		}
	}
	var asked []string
	p := Probe{Command: func(_ context.Context, _ string, args ...string) (string, error) {
		asked = args
		return out, nil
	}}
	t.Setenv("CUDA_VISIBLE_DEVICES", "1")
	if _, err := p.ReadClocks(context.Background()); err != nil || strings.Join(asked[len(asked)-2:], " ") != "-i 1" {
		t.Errorf("nvidia-smi asked %q (%v), want the GPU of CUDA_VISIBLE_DEVICES", asked, err)
	}
}

func TestOrder_AlternatesABThenBA(t *testing.T) {
	if Order(0) != "AB" || Order(1) != "BA" || Order(8) != "AB" {
		t.Fatal("order")
	}
}

func TestDeterministicIDs_BelowVocabAndRepeatable(t *testing.T) {
	a, b := DeterministicIDs(64, 100, 7), DeterministicIDs(64, 100, 7)
	for i := range a {
		if a[i] != b[i] || a[i] < 0 || a[i] >= 100 {
			t.Fatalf("%v", a)
		}
	}
}

package harness

import (
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/synth"
)

// workloadProblem is the registry check of one lever's Workload: "" when
// it parses, names a shape and type `minfer synth` writes (or only a pp),
// and sits on a lever abtest runs. The harness parses workloads (it reads
// the registry from the binary, across the process boundary), so the check
// of the registry's declarations lives here, with synth asked in a test.
func workloadProblem(l levers.Lever) string {
	if l.Workload == "" {
		return ""
	}
	w, err := ParseWorkload(l.Workload)
	switch {
	case err != nil:
		return err.Error()
	case !w.HasModel() && w.PP == 0:
		return fmt.Sprintf("workload %q declares neither a model nor a pp", l.Workload)
	case l.ArmA == "" || l.ArmB == "" || l.Reserved != "":
		return fmt.Sprintf("a workload on a lever abtest does not run (arms %q/%q, reserved %q)", l.ArmA, l.ArmB, l.Reserved)
	}
	if w.HasModel() {
		if _, err := synth.ShapeByName(w.Shape); err != nil {
			return fmt.Sprintf("workload %q: %v", l.Workload, err)
		}
		if _, _, err := synth.ParseType(w.Type); err != nil {
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

// TestRegistry_BadWorkloadFailsTheCheck: the registry check fails a
// workload that does not parse, names a shape or type synth does not know,
// or sits on a lever without arms.
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

func TestParseWorkload_GrammarAndErrors(t *testing.T) {
	w, err := ParseWorkload(" pp5  qwen2-0.5b:Q4_K_M ")
	if err != nil || w != (Workload{Raw: "pp5  qwen2-0.5b:Q4_K_M", Shape: "qwen2-0.5b", Type: "Q4_K_M", PP: 5}) || w.ModelName() != "qwen2-0.5b:Q4_K_M" {
		t.Fatalf("%+v %v", w, err)
	}
	if w, err := ParseWorkload(""); err != nil || w.HasModel() || w.PP != 0 {
		t.Errorf("empty: %+v %v", w, err)
	}
	for _, bad := range []string{"pp0", "pp", "pp1 pp2", "qwen2-0.5b", "a:b c:d", "a:b:c", "../x:Q8_0", "q:Q8_0,pp5"} {
		if w, err := ParseWorkload(bad); err == nil {
			t.Errorf("%q accepted: %+v", bad, w)
		}
	}
}

func TestWorkload_MatchesTheSynthesizedFileNameOnly(t *testing.T) {
	w, _ := ParseWorkload("qwen2-0.5b:Q4_K")
	for model, want := range map[string]bool{
		"/m/qwen2-0.5b-Q4_K-seed1.gguf":   true,
		"/m/QWEN2-0.5B-q4_k-seed12.gguf":  true,
		"qwen2-0.5b-Q4_K.gguf":            true,
		"/m/qwen2-0.5b-Q4_K_M-seed1.gguf": false, // another mix
		"/m/qwen2-0.5b-Q8_0-seed1.gguf":   false,
		"/m/Qwen2-0.5B-Instruct.gguf":     false, // not a synthesized name: cannot tell, so no
		"":                                false, // the embedded default (qwen2-tiny F16)
	} {
		if got := w.MatchesModel(model); got != want {
			t.Errorf("%q: match %v, want %v", model, got, want)
		}
	}
	if pp, _ := ParseWorkload("pp5"); !pp.MatchesModel("/any.gguf") || !pp.MatchesModel("") {
		t.Error("a pp-only workload must match every model")
	}
}

func TestWorkloadMismatch_NamesTheDeclaredWorkloadAndWhatRan(t *testing.T) {
	l := Lever{Name: "MINFER_FUSE_QKNORM", Workload: "qwen3-0.6b:Q8_0"}
	got := l.WorkloadMismatch("/tmp/abtest-models/qwen2-0.5b-Q8_0-seed1.gguf", 512)
	if got != "MINFER_FUSE_QKNORM's path needs qwen3-0.6b:Q8_0; this run used qwen2-0.5b-Q8_0-seed1.gguf" {
		t.Errorf("got %q", got)
	}
	if got := l.WorkloadMismatch("/c/qwen3-0.6b-Q8_0-seed1.gguf", 512); got != "" {
		t.Errorf("the declared workload reported as a mismatch: %q", got)
	}
	if got := l.WorkloadMismatch("", 512); !strings.Contains(got, "embedded default") {
		t.Errorf("embedded default: %q", got)
	}
	nt := Lever{Name: "MINFER_MMVQ_NT", Workload: "pp5"}
	if got := nt.WorkloadMismatch("/m/x.gguf", 512); got != "MINFER_MMVQ_NT's path needs pp5; this run used pp512" {
		t.Errorf("pp: %q", got)
	}
	if got := nt.WorkloadMismatch("/m/x.gguf", 5); got != "" {
		t.Errorf("pp5 run: %q", got)
	}
	both := Lever{Name: "X", Workload: "qwen2-0.5b:Q4_0 pp5"}
	if got := both.WorkloadMismatch("/m/y.gguf", 16); !strings.Contains(got, "this run used y.gguf pp16") {
		t.Errorf("both: %q", got)
	}
	if got := (Lever{Name: "Y"}).WorkloadMismatch("/m/y.gguf", 16); got != "" {
		t.Errorf("no workload declared: %q", got)
	}
	if got := (Lever{Name: "Z", Workload: "pp0"}).WorkloadMismatch("/m/y.gguf", 16); !strings.Contains(got, "cannot read") {
		t.Errorf("unparseable workload: %q", got)
	}
}

package harness

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// TestParseWorkload_AgreesWithTheRegistryOnEveryDeclaration: the harness
// reads the registry from the binary, so it parses workloads itself; it must
// read every declared one as the registry does.
func TestParseWorkload_AgreesWithTheRegistryOnEveryDeclaration(t *testing.T) {
	n := 0
	for _, l := range levers.All() {
		if l.Workload == "" {
			continue
		}
		n++
		shape, typ, pp, err := levers.ParseWorkload(l.Workload)
		w, herr := ParseWorkload(l.Workload)
		if err != nil || herr != nil || w.Shape != shape || w.Type != typ || w.PP != pp {
			t.Errorf("%s %q: registry %q %q %d %v, harness %+v %v", l.Name, l.Workload, shape, typ, pp, err, w, herr)
		}
	}
	if n == 0 {
		t.Fatal("no lever declares a workload")
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

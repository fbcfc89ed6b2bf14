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
		"MINFER_MMVQ_NT":         "qwen2-0.5b:Q8_0 pp5",
		"MINFER_MMQ":             "qwen2-0.5b:Q8_0",
		"MINFER_NO_FUSE_QKV":     "qwen2-0.5b:Q8_0",
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
	if w, err := ParseWorkload("qwen2-7b:Q4_K_M d32128"); err != nil || w.Depth != 32128 || w.ModelName() != "qwen2-7b:Q4_K_M" {
		t.Errorf("depth: %+v %v", w, err)
	}
	for _, bad := range []string{"pp0", "pp", "pp1 pp2", "qwen2-0.5b", "a:b c:d", "a:b:c", "../x:Q8_0", "q:Q8_0,pp5", "d0", "d", "d1 d2", "dx"} {
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
	l := Lever{Lever: levers.Lever{Name: "MINFER_FUSE_QKNORM", Workload: "qwen3-0.6b:Q8_0"}}
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
	nt := Lever{Lever: levers.Lever{Name: "MINFER_MMVQ_NT", Workload: "pp5"}}
	if got := nt.WorkloadMismatch("/m/x.gguf", 512); got != "MINFER_MMVQ_NT's path needs pp5; this run used pp512" {
		t.Errorf("pp: %q", got)
	}
	if got := nt.WorkloadMismatch("/m/x.gguf", 5); got != "" {
		t.Errorf("pp5 run: %q", got)
	}
	both := Lever{Lever: levers.Lever{Name: "X", Workload: "qwen2-0.5b:Q4_0 pp5"}}
	if got := both.WorkloadMismatch("/m/y.gguf", 16); !strings.Contains(got, "this run used y.gguf pp16") {
		t.Errorf("both: %q", got)
	}
	if got := (Lever{Lever: levers.Lever{Name: "Y"}}).WorkloadMismatch("/m/y.gguf", 16); got != "" {
		t.Errorf("no workload declared: %q", got)
	}
	if got := (Lever{Lever: levers.Lever{Name: "Z", Workload: "pp0"}}).WorkloadMismatch("/m/y.gguf", 16); !strings.Contains(got, "cannot read") {
		t.Errorf("unparseable workload: %q", got)
	}
}

// needsProblem says why a lever's path cannot run on the workload a backend
// gives it ("" when it can): its CUDA rule's needs against the declared
// workload (its model's matrix types and architecture from the synth plan,
// its pp or decode), its CPU rule's against the default one (the embedded
// qwen2-tiny F16, pp512), which is what abtest runs there.
func needsProblem(l levers.Lever) []string {
	if l.Liveness == nil {
		return nil
	}
	var bad []string
	check := func(backend string, r *levers.PathRule, wl string) {
		if r == nil {
			return
		}
		w, err := ParseWorkload(wl)
		if err != nil {
			bad = append(bad, backend+": "+err.Error())
			return
		}
		shape, typ, pp := synth.DefaultShape, synth.DefaultType.String(), 512
		if w.HasModel() {
			shape, typ = w.Shape, w.Type
		}
		if w.PP > 0 {
			pp = w.PP
		}
		t, mix, err := synth.ParseType(typ)
		if err != nil {
			bad = append(bad, backend+": "+err.Error())
			return
		}
		arch, types, err := synth.MatrixTypes(synth.Options{Shape: shape, Type: t, Mix: mix})
		if err != nil {
			bad = append(bad, backend+": "+err.Error())
			return
		}
		n := r.Needs
		if n.Arch != "" && arch != n.Arch {
			bad = append(bad, fmt.Sprintf("%s: needs a %s model, its workload %s:%s is %s", backend, n.Arch, shape, typ, arch))
		}
		if len(n.WeightTypes) > 0 {
			found := false
			for _, q := range types {
				for _, want := range n.WeightTypes {
					found = found || q.String() == want
				}
			}
			if !found {
				bad = append(bad, fmt.Sprintf("%s: needs matmul weights of %v, its workload %s:%s has none", backend, n.WeightTypes, shape, typ))
			}
		}
		// Every gate runs a decode (nt = 1) and parity runs nt 5 and 64, but
		// the A/B and profile gates time pp and tg: one of them must run it.
		if !n.NTRuns(1) && !n.NTRuns(pp) {
			bad = append(bad, fmt.Sprintf("%s: needs forwards of %d..%d tokens, its workload runs pp%d and decode", backend, n.MinNT, n.MaxNT, pp))
		}
	}
	if l.Liveness.CUDA != nil {
		check("cuda", l.Liveness.CUDA, l.Workload)
	}
	if l.Liveness.CPU != nil {
		check("cpu", l.Liveness.CPU, "")
	}
	return bad
}

// Issue 13, item 8: a lever whose liveness kernels cannot run on its
// declared workload fails by construction in every gate (MINFER_NO_FUSE_QKV
// declared none, so the default F16 model never ran its fused MMVQ).
func TestRegistry_EveryLeversPathCanRunOnItsDeclaredWorkload(t *testing.T) {
	for _, l := range levers.All() {
		for _, p := range needsProblem(l) {
			t.Errorf("%s: %s", l.Name, p)
		}
	}
}

// The check fails the registry's defects of 2026-12-01: NO_FUSE_QKV on the
// default model, an MMVQ lever on F16 weights, the qwen3 fusion on qwen2, a
// 2..8-token path at pp512.
func TestRegistry_PathThatCannotRunOnItsWorkloadIsFound(t *testing.T) {
	for name, wl := range map[string]string{
		"MINFER_NO_FUSE_QKV": "", "MINFER_NO_KQ_MMVQ": "qwen2-0.5b:F16", "MINFER_FUSE_QKNORM": "qwen2-0.5b:Q8_0",
		"MINFER_MMVQ_NT": "qwen2-0.5b:Q8_0 pp512", "MINFER_MMQ": "qwen2-0.5b:F16",
	} {
		l, _ := levers.Lookup(name)
		l.Workload = wl
		if p := needsProblem(l); len(p) == 0 {
			t.Errorf("%s on %q: not found", name, wl)
		}
	}
}

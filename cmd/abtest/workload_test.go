package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/stats"
	"github.com/minfer-go/minfer/report"
)

// benchLines returns the fake's bench log lines that set lever (NAME=).
func benchLines(t *testing.T, log, lever string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(l, " "+lever+"=") {
			out = append(out, l)
		}
	}
	return out
}

// TestNightly_LeverWithWorkloadRunsOnItsModelSynthesizedOnce: of two
// levers, the one that declares a workload runs every bench on its own
// model (synthesized once into --synth-dir, reused the next night) at its
// own pp; the other keeps the default; the summary names both models; a
// previous night that ran the lever on another workload is "not
// comparable", never a regression.
func TestNightly_LeverWithWorkloadRunsOnItsModelSynthesizedOnce(t *testing.T) {
	bin := fakeMinfer(t)
	out, cache, logs := t.TempDir(), t.TempDir(), t.TempDir()
	synthLog, benchLog := filepath.Join(logs, "synth.log"), filepath.Join(logs, "bench.log")
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_QKV=qwen3-tiny:Q8_0 pp12;MINFER_NO_FUSE_FFN=")
	t.Setenv("FAKEMINFER_SYNTH_LOG", synthLog)
	t.Setenv("FAKEMINFER_BENCH_LOG", benchLog)
	args := []string{"nightly", "--minfer", bin, "--out", out, "--synth-dir", cache, "--device", "cpu",
		"--levers", "MINFER_NO_FUSE_FFN,MINFER_NO_FUSE_QKV", "--gates", "ab",
		"--rounds", "5", "--pp", "16", "--tg", "4", "--reps", "1", "--warmup-ms", "10", "--bench-warmup-ms", "10"}

	if code := run(args); code != 3 {
		_, s := readNightly(t, out)
		t.Fatalf("night 1: exit %d: %+v", code, s)
	}
	p1, s1 := readNightly(t, out)
	wantModel := filepath.Join(cache, "qwen3-tiny-Q8_0-seed1.gguf")
	qkv, ffn := entry(s1, "MINFER_NO_FUSE_QKV"), entry(s1, "MINFER_NO_FUSE_FFN")
	if qkv == nil || qkv.Model != wantModel || qkv.PP != 12 || qkv.Workload != "qwen3-tiny:Q8_0 pp12" || len(qkv.ModelSHA256) != 64 {
		t.Fatalf("lever with a workload: %+v", qkv)
	}
	if ffn == nil || ffn.PP != 16 || ffn.Workload != "" || ffn.ModelSHA256 != s1.ModelSHA256 || ffn.Model == wantModel {
		t.Fatalf("lever on the default workload: %+v (summary model %s %s)", ffn, s1.Model, s1.ModelSHA256)
	}
	q := benchLines(t, benchLog, "MINFER_NO_FUSE_QKV")
	if len(q) == 0 {
		t.Fatal("no bench of MINFER_NO_FUSE_QKV in the fake's log")
	}
	for _, l := range q {
		if !strings.HasPrefix(l, "model="+wantModel+" p=12 ") {
			t.Errorf("MINFER_NO_FUSE_QKV bench %q: want model=%s p=12", l, wantModel)
		}
	}
	for _, l := range benchLines(t, benchLog, "MINFER_NO_FUSE_FFN") {
		if strings.Contains(l, wantModel) || !strings.Contains(l, " p=16 ") {
			t.Errorf("MINFER_NO_FUSE_FFN bench %q: want the default model at p=16", l)
		}
	}
	md, _ := os.ReadFile(strings.TrimSuffix(p1, ".json") + ".md")
	for _, want := range []string{"qwen3-tiny-Q8_0-seed1.gguf (" + qkv.ModelSHA256[:12] + ") / pp12 [declared: qwen3-tiny:Q8_0 pp12]",
		filepath.Base(ffn.Model) + " (" + ffn.ModelSHA256[:12] + ") / pp16", "model (sha256) / pp"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("night 1 summary lacks %q:\n%s", want, md)
		}
	}

	// The previous night ran MINFER_NO_FUSE_QKV at pp512 and decoded 25%
	// faster: compared, that would be a regression; it is another workload.
	for i := range qkv.TGB {
		qkv.TGB[i] *= 1.25
	}
	qkv.PP = 512
	s1.Date = "2000-01-01T000000"
	b, _ := json.Marshal(s1)
	if err := os.Remove(p1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "nightly-2000-01-01T000000.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(args); code != 3 {
		_, s := readNightly(t, out)
		t.Fatalf("night 2: exit %d: regressions %v", code, s.Regressions)
	}
	p2, s2 := readNightly(t, out)
	if len(s2.Regressions) != 0 {
		t.Errorf("regressions %v: a changed workload is not comparable", s2.Regressions)
	}
	a := entry(s2, "MINFER_NO_FUSE_QKV").Against
	if len(a) != 1 || a[0].Verdict != gates.VerdictNotComparable || !strings.Contains(a[0].Note, "pp512") || !strings.Contains(a[0].Note, "pp12") {
		t.Errorf("MINFER_NO_FUSE_QKV against the previous night: %+v", a)
	}
	for _, d := range entry(s2, "MINFER_NO_FUSE_FFN").Against {
		if d.Verdict == gates.VerdictNotComparable {
			t.Errorf("the unchanged lever was not compared: %+v", d)
		}
	}
	if len(entry(s2, "MINFER_NO_FUSE_FFN").Against) != 2 {
		t.Errorf("MINFER_NO_FUSE_FFN compared on %d metrics, want pp and tg", len(entry(s2, "MINFER_NO_FUSE_FFN").Against))
	}
	md, _ = os.ReadFile(strings.TrimSuffix(p2, ".json") + ".md")
	if !strings.Contains(string(md), "not comparable: workload changed") || strings.Contains(string(md), "REGRESSION") {
		t.Errorf("night 2 summary:\n%s", md)
	}
	if b, err := os.ReadFile(synthLog); err != nil || string(b) != "qwen3-tiny Q8_0 1\n" {
		t.Errorf("synth calls over two nights %q (%v), want exactly one", b, err)
	}
}

// TestNightlyCompare_SummaryFromBeforeWorkloadsComparesOnlyDefaultLevers:
// a previous summary without per-lever models or pps ran every lever on its
// model at its (unrecorded) pp; a lever still on the default workload is
// compared, one that declares its own is not comparable.
func TestNightlyCompare_SummaryFromBeforeWorkloadsComparesOnlyDefaultLevers(t *testing.T) {
	tg := []float64{100, 101, 99}
	slow := []float64{80, 81, 79}
	prev := &gates.NightlySummary{Date: "old", Machine: "H200", Model: "/m/qwen2-0.5b-Q8_0-seed1.gguf", ModelSHA256: "aaaa",
		Entries: []gates.NightlyEntry{{Lever: "L_DEFAULT", B: "1", TGB: tg}, {Lever: "L_OWN", B: "1", TGB: tg}}}
	now := &gates.NightlySummary{Machine: "H200", Model: "/m/qwen2-0.5b-Q8_0-seed1.gguf", ModelSHA256: "aaaa", PP: 512, Threshold: 0.02,
		Entries: []gates.NightlyEntry{
			{Lever: "L_DEFAULT", B: "1", TGB: slow, Model: "/m/qwen2-0.5b-Q8_0-seed1.gguf", ModelSHA256: "aaaa", PP: 512},
			{Lever: "L_OWN", B: "1", TGB: slow, Workload: "pp5", Model: "/m/qwen2-0.5b-Q8_0-seed1.gguf", ModelSHA256: "aaaa", PP: 5},
		}}
	now.Compare("nightly-old.json", prev)
	if len(now.Regressions) != 1 || !strings.HasPrefix(now.Regressions[0], "L_DEFAULT=1 tg") {
		t.Errorf("regressions %v, want L_DEFAULT's tg only", now.Regressions)
	}
	if a := now.Entries[1].Against; len(a) != 1 || a[0].Verdict != gates.VerdictNotComparable || !strings.Contains(a[0].Note, "before per-lever workloads") ||
		!math.IsNaN(float64(a[0].Ratio)) {
		t.Errorf("L_OWN: %+v", a)
	}

	// A changed model (same pp) is not comparable either; the same one is.
	prev2 := &gates.NightlySummary{Date: "d", Machine: "H200", ModelSHA256: "aaaa", PP: 512, Entries: []gates.NightlyEntry{
		{Lever: "L_OWN", B: "1", TGB: tg, Model: "/c/qwen2-0.5b-Q4_0-seed1.gguf", ModelSHA256: "bbbb", PP: 512, Workload: "qwen2-0.5b:Q4_0"},
		{Lever: "L_SAME", B: "1", TGB: tg, Model: "/c/qwen3-0.6b-Q8_0-seed1.gguf", ModelSHA256: "cccc", PP: 512, Workload: "qwen3-0.6b:Q8_0"}}}
	now2 := &gates.NightlySummary{Machine: "H200", ModelSHA256: "aaaa", PP: 512, Threshold: 0.02, Entries: []gates.NightlyEntry{
		{Lever: "L_OWN", B: "1", TGB: slow, Model: "/c/qwen2-0.5b-Q4_K_M-seed1.gguf", ModelSHA256: "dddd", PP: 512, Workload: "qwen2-0.5b:Q4_K_M"},
		{Lever: "L_SAME", B: "1", TGB: slow, Model: "/c/qwen3-0.6b-Q8_0-seed1.gguf", ModelSHA256: "cccc", PP: 512, Workload: "qwen3-0.6b:Q8_0"}}}
	now2.Compare("nightly-d.json", prev2)
	if a := now2.Entries[0].Against; len(a) != 1 || a[0].Verdict != gates.VerdictNotComparable ||
		!strings.Contains(a[0].Note, "qwen2-0.5b-Q4_0-seed1.gguf") || !strings.Contains(a[0].Note, "qwen2-0.5b-Q4_K_M-seed1.gguf") {
		t.Errorf("changed model: %+v", a)
	}
	if len(now2.Regressions) != 1 || !strings.HasPrefix(now2.Regressions[0], "L_SAME=1 tg") {
		t.Errorf("regressions %v, want L_SAME's (same workload, slower)", now2.Regressions)
	}
	if a := now2.Entries[1].Against; len(a) != 1 || a[0].Verdict != stats.VerdictSlower {
		t.Errorf("L_SAME: %+v", a)
	}
}

// TestRun_OffTheDeclaredWorkloadRunsAndSaysWhichOnce: `abtest run` of a
// lever on another model than its workload runs as told, and stderr (once)
// and the report name the workload the lever declares.
func TestRun_OffTheDeclaredWorkloadRunsAndSaysWhichOnce(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_FFN=qwen2-0.5b:Q4_K_M")
	out := t.TempDir()
	code, stderr := runStderr(t, []string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5",
		"--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"})
	ms, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
	if len(ms) != 1 {
		t.Fatalf("exit %d, %d result files:\n%s", code, len(ms), stderr)
	}
	rec, err := report.ReadJSON(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 || status(rec, "ab") != "PASS" {
		t.Fatalf("the run did not run as told (ab PASS, PARTIAL exit 3): exit %d: %s", code, rec.VerdictLine)
	}
	want := "MINFER_NO_FUSE_FFN's path needs qwen2-0.5b:Q4_K_M; this run used minfer's embedded default model"
	if n := strings.Count(stderr, want); n != 1 {
		t.Errorf("stderr states the declared workload %d times, want once:\n%s", n, stderr)
	}
	if rec.Config.Lever.Workload != "qwen2-0.5b:Q4_K_M" {
		t.Errorf("the record's lever lacks its workload: %+v", rec.Config.Lever)
	}
	md, _ := os.ReadFile(strings.TrimSuffix(ms[0], ".json") + ".md")
	if n := strings.Count(string(md), want); n != 1 || !strings.Contains(string(md), "Not the lever's workload") {
		t.Errorf("the report states the declared workload %d times, want once:\n%.1500s", n, md)
	}

	// On its workload (a model of that synthesized name), nothing is said.
	model := filepath.Join(t.TempDir(), "qwen2-0.5b-Q4_K_M-seed1.gguf")
	if err := os.WriteFile(model, []byte("fake"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr = captureStderr(t, func() {
		code, rec = runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_FFN", "--gates", "ab", "--rounds", "5", "--model", model)
	})
	if code != 3 || strings.Contains(stderr, "path needs") {
		t.Errorf("on its workload: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestNightly_CorrectnessModelFollowsTheWorkloadsTypeAndArchitecture: with
// --correctness-model (a trained qwen2 Q8_0), a lever whose workload is a
// qwen2 of another weight type runs parity and greedy on the trained model
// quantized to that type (once, reused the next night, redone when the
// trained model changes); one of the same type keeps the trained model; a
// qwen3 workload runs them on its own model (the qwen2 model lacks its path).
func TestNightly_CorrectnessModelFollowsTheWorkloadsTypeAndArchitecture(t *testing.T) {
	bin := fakeMinfer(t)
	out, cache, logs := t.TempDir(), t.TempDir(), t.TempDir()
	cm := filepath.Join(logs, "trained-Q8_0.gguf")
	if err := os.WriteFile(cm, []byte("GGUF fake qwen2-trained Q8_0 seed 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	qlog := filepath.Join(logs, "quantize.log")
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_QKV=qwen3-tiny:Q8_0;MINFER_NO_FUSE_FFN=qwen2-tiny:Q4_K_M;MINFER_CACHE_TYPE=qwen2-tiny:Q8_0")
	t.Setenv("FAKEMINFER_QUANTIZE_LOG", qlog)
	args := []string{"nightly", "--minfer", bin, "--out", out, "--synth-dir", cache, "--device", "cpu", "--correctness-model", cm,
		"--levers", "MINFER_NO_FUSE_QKV,MINFER_NO_FUSE_FFN,MINFER_CACHE_TYPE=f16", "--gates", "ab",
		"--rounds", "5", "--pp", "16", "--tg", "4", "--reps", "1", "--warmup-ms", "10", "--bench-warmup-ms", "10"}
	cmOf := func(lever string) string {
		t.Helper()
		ms, _ := filepath.Glob(filepath.Join(out, lever, "*.json"))
		if len(ms) == 0 {
			t.Fatalf("no record of %s", lever)
		}
		slices.Sort(ms)
		rec, err := report.ReadJSON(ms[len(ms)-1])
		if err != nil {
			t.Fatal(err)
		}
		return rec.Config.CorrectnessModel
	}
	quantizes := func() []string {
		b, _ := os.ReadFile(qlog)
		return strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
	}
	for night := 1; night <= 3; night++ {
		if night == 3 { // the trained model changed: its Q4_K_M copy must be made again
			if err := os.WriteFile(cm, []byte("GGUF fake qwen2-trained Q8_0 seed 1"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if code := run(args); code != 3 { // PARTIAL: only gate 3 chosen
			p, _ := readNightly(t, out)
			md, _ := os.ReadFile(strings.TrimSuffix(p, ".json") + ".md")
			t.Fatalf("night %d: exit %d\n%s", night, code, md)
		}
		if got := cmOf("MINFER_NO_FUSE_QKV"); got != "" {
			t.Errorf("night %d: the qwen3 workload's parity model %q, want its own", night, got)
		}
		if got := cmOf("MINFER_CACHE_TYPE"); got != cm {
			t.Errorf("night %d: the Q8_0 workload's parity model %q, want the trained model", night, got)
		}
		got := cmOf("MINFER_NO_FUSE_FFN")
		if filepath.Dir(got) != cache || !strings.HasPrefix(filepath.Base(got), "trained-Q8_0-") || !strings.HasSuffix(got, "-as-Q4_K_M.gguf") {
			t.Errorf("night %d: the Q4_K_M workload's parity model %q", night, got)
		}
		if b, _ := os.ReadFile(got); !strings.Contains(string(b), "qwen2-trained Q4_K_M") {
			t.Errorf("night %d: %s holds %q", night, got, b)
		}
		want := map[int]int{1: 2, 2: 2, 3: 4}[night] // "IN TYPE" per quantize
		if q := quantizes(); len(q) != want || q[0] != cm || q[1] != "Q4_K_M" {
			t.Errorf("night %d: quantize calls %q, want %d fields", night, q, want)
		}
	}
}

// TestRun_WorkloadFlagRunsOnTheDeclaredWorkload: abtest run --workload runs
// the lever on its declared model and pp (not --pp), with parity and greedy
// on the trained model in its weight type, and says nothing of a mismatch; a
// lever without a workload keeps --model and says so.
func TestRun_WorkloadFlagRunsOnTheDeclaredWorkload(t *testing.T) {
	bin := fakeMinfer(t)
	synth, logs := t.TempDir(), t.TempDir()
	cm := filepath.Join(logs, "trained-Q8_0.gguf")
	if err := os.WriteFile(cm, []byte("GGUF fake qwen2-trained Q8_0 seed 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_FFN=qwen2-tiny:Q4_K_M pp12;MINFER_NO_FUSE_QKV=")
	for _, c := range []struct {
		lever, model, cm, note string
		pp                     int
	}{
		{"MINFER_NO_FUSE_FFN", filepath.Join(synth, "qwen2-tiny-Q4_K_M-seed1.gguf"), "-as-Q4_K_M.gguf", "", 12},
		{"MINFER_NO_FUSE_QKV", "", cm, "MINFER_NO_FUSE_QKV declares no workload: --workload keeps --model and --pp", 16},
	} {
		out := t.TempDir()
		code, stderr := runStderr(t, []string{"run", "--minfer", bin, "--out", out, "--lever", c.lever, "--workload", "--synth-dir", synth,
			"--correctness-model", cm, "--gates", "ab", "--rounds", "5", "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"})
		ms, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
		if code != 3 || len(ms) != 1 {
			t.Fatalf("%s: exit %d (want 3: PARTIAL), %d records:\n%s", c.lever, code, len(ms), stderr)
		}
		rec, err := report.ReadJSON(ms[0])
		if err != nil {
			t.Fatal(err)
		}
		if c.model != "" && rec.Config.Model != c.model {
			t.Errorf("%s: model %q, want %q", c.lever, rec.Config.Model, c.model)
		}
		if rec.Config.PP != c.pp || !strings.HasSuffix(rec.Config.CorrectnessModel, c.cm) {
			t.Errorf("%s: pp %d correctness model %q, want pp %d and ...%s", c.lever, rec.Config.PP, rec.Config.CorrectnessModel, c.pp, c.cm)
		}
		if strings.Contains(stderr, "path needs") || (c.note != "" && !strings.Contains(stderr, c.note)) {
			t.Errorf("%s: stderr:\n%s", c.lever, stderr)
		}
	}
}

// abtest run fits --correctness-model to the run's model whatever chose it:
// another weight type gets the quantized copy, another architecture none
// (parity and greedy on the model itself), the same type the model as given.
func TestRun_CorrectnessModelFitsTheRunsModel(t *testing.T) {
	bin := fakeMinfer(t)
	synth := t.TempDir()
	write := fakeModelWriter(t)
	cm := write("trained-Q8_0.gguf", "GGUF fake qwen2-trained Q8_0 seed 0")
	for _, c := range []struct{ model, want string }{
		{write("m-q4km.gguf", "GGUF fake qwen2-0.5b Q4_K_M seed 1"), "-as-Q4_K_M.gguf"},
		{write("m-qwen3.gguf", "GGUF fake qwen3-0.6b Q8_0 seed 1"), ""},
		{write("m-q8.gguf", "GGUF fake qwen2-0.5b Q8_0 seed 1"), cm},
	} {
		out := t.TempDir()
		code := run([]string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_NO_FUSE_FFN", "--model", c.model, "--correctness-model", cm,
			"--synth-dir", synth, "--gates", "ab", "--rounds", "5", "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"})
		ms, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
		if code != 3 || len(ms) != 1 {
			t.Fatalf("%s: exit %d (want 3: PARTIAL), %d records", c.model, code, len(ms))
		}
		rec, err := report.ReadJSON(ms[0])
		if err != nil {
			t.Fatal(err)
		}
		got := rec.Config.CorrectnessModel
		if ok := (c.want == "" && got == "") || (c.want != "" && strings.HasSuffix(got, c.want)); !ok {
			t.Errorf("%s: correctness model %q, want %q", filepath.Base(c.model), got, c.want)
		}
		if fb := rec.Config.CorrectnessFallback; (got == "") != (fb != "") || (fb != "" && !strings.Contains(fb, "architecture qwen3")) {
			t.Errorf("%s: fallback %q beside correctness model %q", filepath.Base(c.model), fb, got)
		}
	}
}

// TestRun_CorrectnessModelOfTheRunsArchitectureIsTaken_ElseTheReportSaysSo:
// given a trained qwen2 and a trained qwen3 model, a qwen3 run's parity and
// greedy run on the qwen3 one (GATES.md: a trained model of the lever's
// architecture); given the qwen2 one only, they run on the random-weight
// model and the report's parity and greedy evidence says so.
func TestRun_CorrectnessModelOfTheRunsArchitectureIsTaken_ElseTheReportSaysSo(t *testing.T) {
	bin := fakeMinfer(t)
	synth := t.TempDir()
	write := fakeModelWriter(t)
	cm2 := write("trained2-Q8_0.gguf", "GGUF fake qwen2-trained Q8_0 seed 0")
	cm3 := write("trained3-Q8_0.gguf", "GGUF fake qwen3-trained Q8_0 seed 0")
	model := write("m-qwen3.gguf", "GGUF fake qwen3-0.6b Q8_0 seed 1")
	for _, c := range []struct {
		cms  []string
		want string
	}{
		{[]string{cm2, cm3}, cm3},
		{[]string{cm2}, ""},
	} {
		out := t.TempDir()
		args := []string{"run", "--minfer", bin, "--out", out, "--lever", "MINFER_NO_FUSE_FFN", "--model", model, "--synth-dir", synth,
			"--gates", "parity,greedy", "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10"}
		for _, cm := range c.cms {
			args = append(args, "--correctness-model", cm)
		}
		code := run(args)
		ms, _ := filepath.Glob(filepath.Join(out, "*", "*.json"))
		if code == 2 || len(ms) != 1 {
			t.Fatalf("%d correctness models: exit %d, %d records", len(c.cms), code, len(ms))
		}
		rec, err := report.ReadJSON(ms[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Config.CorrectnessModel; got != c.want {
			t.Errorf("%d correctness models: parity and greedy on %q, want %q", len(c.cms), got, c.want)
		}
		md, err := os.ReadFile(strings.TrimSuffix(ms[0], ".json") + ".md")
		if err != nil {
			t.Fatal(err)
		}
		const fallback = "not a trained one: no trained model of architecture qwen3 among the correctness models (trained2-Q8_0.gguf: qwen2)"
		for _, row := range strings.Split(string(md), "\n") {
			if gate := strings.Fields(row + " . ."); strings.HasPrefix(row, "| parity") || strings.HasPrefix(row, "| greedy") {
				if strings.Contains(row, fallback) != (c.want == "") {
					t.Errorf("%d correctness models: the %s row states the fallback: %v, want %v:\n%s", len(c.cms), gate[1], !(c.want == ""), c.want == "", row)
				}
			}
		}
	}
}

// fakeModelWriter returns a writer of fake model files (the fake minfer
// reads "GGUF fake SHAPE TYPE ..." as the model's architecture and type)
// into a temporary folder.
func fakeModelWriter(t *testing.T) func(name, body string) string {
	dir := t.TempDir()
	return func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// TestRun_UntiedOnlyPathGetsTheTrainedModelUntied_ATiedRunModelCannotRun: a
// lever whose path runs only on untied models (MINFER_EMBED_HOST) gets the
// tied trained correctness model written again with `quantize --untie`
// (session 18's A/B ran parity and greedy on the tied one: no liveness);
// another lever keeps it as given; a tied run model is could-not-run.
func TestRun_UntiedOnlyPathGetsTheTrainedModelUntied_ATiedRunModelCannotRun(t *testing.T) {
	bin := fakeMinfer(t)
	fakeGPU(t)
	qlog := filepath.Join(t.TempDir(), "quantize.log")
	t.Setenv("FAKEMINFER_QUANTIZE_LOG", qlog)
	write := fakeModelWriter(t)
	cm := write("trained-Q8_0.gguf", "GGUF fake qwen2-trained Q8_0 seed 0")
	untied := write("m-7b.gguf", "GGUF fake qwen2-7b Q8_0 seed 1")
	for _, c := range []struct{ lever, want string }{{"MINFER_EMBED_HOST", "-as-Q8_0-untied.gguf"}, {"MINFER_NO_FUSE_FFN", cm}} {
		code, rec := runAbtest(t, bin, "--lever", c.lever, "--device", "cuda", "--model", untied, "--correctness-model", cm,
			"--synth-dir", t.TempDir(), "--gates", "ab", "--rounds", "5", "--workload=false")
		if got := rec.Config.CorrectnessModel; code == 2 || !strings.HasSuffix(got, c.want) {
			t.Errorf("%s: exit %d, correctness model %q, want ...%s", c.lever, code, got, c.want)
		}
	}
	if b, _ := os.ReadFile(qlog); strings.Count(string(b), " --untie\n") != 1 {
		t.Errorf("quantize calls:\n%s", b)
	}
	tied := write("m-05b.gguf", "GGUF fake qwen2-0.5b Q8_0 seed 1")
	code, stderr := runStderr(t, []string{"run", "--minfer", bin, "--out", t.TempDir(), "--lever", "MINFER_EMBED_HOST", "--device", "cuda",
		"--model", tied, "--gates", "ab", "--rounds", "5", "--workload=false", "--pp", "16", "--tg", "4"})
	if code != 2 || !strings.Contains(stderr, "needs a model with an output matrix of its own, m-05b.gguf ties it") {
		t.Errorf("tied run model: exit %d (want 2), stderr:\n%s", code, stderr)
	}
}

// runStderr runs abtest with args and returns its exit code and stderr.
func runStderr(t *testing.T, args []string) (code int, stderr string) {
	t.Helper()
	stderr = captureStderr(t, func() { code = run(args) })
	return code, stderr
}

// captureStderr returns what fn writes to os.Stderr.
func captureStderr(t *testing.T, fn func()) string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = f
	fn()
	os.Stderr = saved
	f.Close()
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

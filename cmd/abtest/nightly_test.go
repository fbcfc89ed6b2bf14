package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
)

func readNightly(t *testing.T, out string) (string, *gates.NightlySummary) {
	t.Helper()
	path, s, skipped := gates.PreviousNightly(out)
	if len(skipped) > 0 {
		t.Fatalf("unreadable nightly results in %s: %v", out, skipped)
	}
	if s == nil {
		t.Fatalf("no nightly summary in %s", out)
	}
	return path, s
}

func entry(s *gates.NightlySummary, lever string) *gates.NightlyEntry {
	for i := range s.Entries {
		if s.Entries[i].Lever == lever {
			return &s.Entries[i]
		}
	}
	return nil
}

func TestNightly_CUDALeversSkipNeverPassAndPlantedRegressionIsFlagged(t *testing.T) {
	bin := fakeMinfer(t)
	out := t.TempDir()
	t.Setenv("FAKEMINFER_RESERVED", "MINFER_MMQ=not built in this fake")
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_NO_FUSE_FFN=")
	args := []string{"nightly", "--minfer", bin, "--out", out, "--levers", "MINFER_NO_FUSE_FFN,MINFER_NO_PREFILL_GEMM,MINFER_MMQ", "--gates", "ab,suite",
		"--rounds", "5", "--pp", "16", "--tg", "4", "--reps", "1", "--warmup-ms", "10", "--bench-warmup-ms", "10"}

	// Night 1, forced onto the CPU: the CUDA lever is a SKIP with its
	// reason, so the night is INCONCLUSIVE (exit 3), never a PASS.
	if code := run(append(args, "--device", "cpu")); code != 3 {
		_, s := readNightly(t, out)
		t.Fatalf("night 1: exit %d: %+v", code, s)
	}
	p1, s1 := readNightly(t, out)
	ffn, mmq := entry(s1, "MINFER_NO_FUSE_FFN"), entry(s1, "MINFER_NO_PREFILL_GEMM")
	if res := entry(s1, "MINFER_MMQ"); res == nil || res.Verdict != gates.VerdictSkip || !strings.Contains(res.Line, "reserved") {
		t.Fatalf("a reserved lever must be a SKIP with its reason: %+v", res)
	}
	if ffn == nil || len(ffn.TGB) != 5 || ffn.Report == "" {
		t.Fatalf("FFN entry %+v", ffn)
	}
	if mmq == nil || mmq.Verdict != gates.VerdictSkip || !strings.Contains(mmq.Line, "--device cpu") {
		t.Fatalf("CUDA lever on the CPU: %+v", mmq)
	}
	md, _ := os.ReadFile(strings.TrimSuffix(p1, ".json") + ".md")
	if s1.Verdict != "INCONCLUSIVE" {
		t.Errorf("night 1 verdict %s", s1.Verdict)
	}
	for _, want := range []string{"**Nightly: INCONCLUSIVE**", "| MINFER_NO_PREFILL_GEMM", "| MINFER_MMQ", "**SKIP**", "never counted as PASS", "no previous nightly result", ffn.Report} {
		if !strings.Contains(string(md), want) {
			t.Errorf("night 1 summary lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(out, ffn.Report)); err != nil {
		t.Errorf("the summary's report link does not resolve: %v", err)
	}

	// Plant a previous night whose arm B decoded 25% faster.
	for i := range ffn.TGB {
		ffn.TGB[i] *= 1.25
	}
	s1.Date = "2000-01-01T000000"
	b, _ := json.Marshal(s1)
	if err := os.Remove(p1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "nightly-2000-01-01T000000.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	// Night 2 (device auto): the decode regression is flagged and fails the night.
	if code := run(args); code != 1 {
		t.Fatalf("night 2 with a planted regression: exit %d, want 1", code)
	}
	p2, s2 := readNightly(t, out)
	if len(s2.Regressions) != 1 || !strings.Contains(s2.Regressions[0], "MINFER_NO_FUSE_FFN=0 tg") {
		t.Fatalf("regressions %v (note %q)", s2.Regressions, s2.PrevNote)
	}
	for _, d := range entry(s2, "MINFER_NO_FUSE_FFN").Against {
		if d.Metric == "pp" && d.Verdict != "~" {
			t.Errorf("unchanged prefill marked %s", d.Verdict)
		}
	}
	if mmq := entry(s2, "MINFER_NO_PREFILL_GEMM"); !s2hasGPU() && (mmq.Verdict != gates.VerdictSkip || !strings.Contains(mmq.Line, "no CUDA device")) {
		t.Errorf("CUDA lever without a device: %+v", mmq)
	}
	md, _ = os.ReadFile(strings.TrimSuffix(p2, ".json") + ".md")
	if !strings.Contains(string(md), "REGRESSION (slower)") || !strings.HasPrefix(string(md), "**Nightly: FAIL**") {
		t.Errorf("night 2 summary:\n%s", md)
	}
}

// s2hasGPU: on a machine with a device the CUDA lever really runs.
func s2hasGPU() bool {
	ok, _ := harness.DefaultProbe().HasGPU(t0ctx())
	return ok
}

func t0ctx() context.Context { return context.Background() }

// A corrupt newest result is not silently passed over for an older one: the
// skip comes back with its reason, for the summary's note.
func TestPreviousNightly_CorruptNewestIsReportedNotSilentlySkipped(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "nightly-2026-01-01T000000.json")
	if err := os.WriteFile(old, []byte(`{"date":"2026-01-01T000000"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nightly-2026-01-02T000000.json"), []byte(`{"date":`), 0o644); err != nil {
		t.Fatal(err)
	}
	path, prev, skipped := gates.PreviousNightly(dir)
	if path != old || prev == nil || prev.Date != "2026-01-01T000000" {
		t.Fatalf("previous = %q %+v, want the readable %s", path, prev, old)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "nightly-2026-01-02T000000.json") {
		t.Fatalf("skipped = %q, want the corrupt newest file named", skipped)
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
)

// readProfile parses a pprof CPU profile file.
func readProfile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("profile: %v", err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("%s is not a pprof profile: %v", path, err)
	}
	return p
}

// MINFER_CPU_PROFILE=FILE writes a pprof CPU profile of the command's run,
// also when the command fails; a file that cannot be created fails the
// command.
func TestCPUProfile_WritesAValidProfileOnSuccessAndOnError(t *testing.T) {
	m := synthModel(t)
	dir := t.TempDir()
	t.Setenv("MINFER_BENCH_WARMUP_MS", "0")
	ok := filepath.Join(dir, "ok.pprof")
	t.Setenv("MINFER_CPU_PROFILE", ok)
	if code := run([]string{"bench", "--model", m, "--device", "cpu", "-p", "32", "-n", "8", "-r", "2", "--format", "csv"}); code != 0 {
		t.Fatalf("bench under MINFER_CPU_PROFILE: exit %d", code)
	}
	p := readProfile(t, ok)
	if len(p.SampleType) == 0 || p.SampleType[len(p.SampleType)-1].Type != "cpu" {
		t.Errorf("profile sample types %v: want a CPU profile", p.SampleType)
	}
	t.Logf("%d samples over %v", len(p.Sample), p.DurationNanos)

	failed := filepath.Join(dir, "failed.pprof")
	t.Setenv("MINFER_CPU_PROFILE", failed)
	if code := run([]string{"generate", "--model", filepath.Join(dir, "absent.gguf"), "--device", "cpu", "hi"}); code != 1 {
		t.Fatalf("generate of an absent model: exit %d, want 1", code)
	}
	readProfile(t, failed)

	t.Setenv("MINFER_CPU_PROFILE", filepath.Join(dir, "no", "such", "dir", "x.pprof"))
	if code := run([]string{"logits", "--model", m, "--device", "cpu", "--ids", "1"}); code != 1 {
		t.Fatalf("an uncreatable profile file: exit %d, want 1", code)
	}
}

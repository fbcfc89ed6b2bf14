package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness/runs"
)

func TestNCU_WritesMarkdownForTheFixtureAndExits0(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "ncu-qwen2-7b-Q8_0-decode.csv")
	b, err := os.ReadFile("../../harness/profile/testdata/ncu-launches.csv")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(csv, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "ncu.md")
	if code := run([]string{"ncu", "--out", out, csv}); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## qwen2-7b Q8_0 decode", "Bound rule:", "| `minfer_mmvq_q8_0` | 2 |", "**compute/issue bound**"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestNCU_MissingOrGarbageFileExits2WithOneMessage(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "ncu-x-Q8_0-decode.csv")
	if err := os.WriteFile(garbage, []byte("==ERROR== the application terminated before profiling\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope.csv")
	for _, f := range []string{garbage, missing} {
		out := filepath.Join(dir, "ncu.md")
		if code := run([]string{"ncu", "--out", out, f}); code != 2 {
			t.Errorf("%s: exit %d, want 2", f, code)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: a report was written with nothing summarized", f)
		}
		err := runs.NCU([]string{f}, "", 4300, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), f) || strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("%s: error %v: want one line naming the file", f, err)
		}
	}
	if code := run([]string{"ncu"}); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
	if code := run([]string{"ncu", "--floor-gbs", "0", garbage}); code != 2 {
		t.Errorf("floor 0: exit %d, want 2", code)
	}
}

// One bad file among good ones: the good ones are still written, the exit is 2.
func TestNCU_GoodFilesWrittenWhenOneFails(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ncu.md")
	code := run([]string{"ncu", "--out", out, "../../harness/profile/testdata/ncu-launches.csv", filepath.Join(dir, "gone.csv")})
	md, err := os.ReadFile(out)
	if code != 2 || err != nil || !strings.Contains(string(md), "minfer_mmvq_q8_0") || !strings.Contains(string(md), "Not summarized") {
		t.Fatalf("exit %d, err %v, report:\n%s", code, err, md)
	}
}

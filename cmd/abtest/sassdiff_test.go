package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness/runs"
)

// sass-diff: identical listings exit 0; a changed function exits 1 with its
// row (instruction counts, moved opcodes); an unreadable or empty input is
// exit 2.
func TestSASSDiff_ExitCodesAndChangedFunctionRows(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "harness", "profile", "testdata", "sass.txt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.sass", string(src))
	same := write("same.sass", strings.ReplaceAll(string(src), "/*0020*/", "/*0120*/"))
	changed := write("changed.sass", strings.Replace(string(src), "@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20 ;", "@!P0 HMMA.16816.F32 R20, R12, R18, R20 ;", 1))
	var out bytes.Buffer
	if err := runs.SASSDiff(context.Background(), a, same, &out); runs.ExitCode(err) != 0 || !strings.Contains(out.String(), "2 identical, 0 changed") {
		t.Errorf("same: exit %d:\n%s", runs.ExitCode(err), out.String())
	}
	out.Reset()
	err = runs.SASSDiff(context.Background(), a, changed, &out)
	if runs.ExitCode(err) != 1 || !strings.Contains(out.String(), "| sm_90a mmq_q4k | 7 -> 7 | HMMA 0 -> 1, IMMA 2 -> 1 |") {
		t.Errorf("changed: exit %d:\n%s", runs.ExitCode(err), out.String())
	}
	for _, bad := range []string{filepath.Join(dir, "missing.sass"), write("empty.sass", "no functions here\n")} {
		if err := runs.SASSDiff(context.Background(), a, bad, &out); runs.ExitCode(err) != 2 {
			t.Errorf("%s: exit %d (%v), want 2", bad, runs.ExitCode(err), err)
		}
	}
}

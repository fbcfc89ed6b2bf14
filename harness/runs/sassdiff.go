package runs

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/profile"
)

// sassListing reads a listing file as it is, or runs cuobjdump on a kernels
// file.
func sassListing(ctx context.Context, path string) (profile.SASSListing, error) {
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".sass" || ext == ".txt" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return profile.ParseSASSListing(string(b)), nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	cu := gates.FindTool("cuobjdump")
	if cu == "" {
		return nil, fmt.Errorf("no cuobjdump in PATH or /usr/local/cuda/bin (or pass a saved listing, *.sass)")
	}
	out, err := exec.CommandContext(ctx, cu, "--dump-sass", path).Output()
	if err != nil {
		return nil, fmt.Errorf("cuobjdump --dump-sass %s: %w", path, err)
	}
	return profile.ParseSASSListing(string(out)), nil
}

func SASSDiff(ctx context.Context, oldPath, newPath string, w io.Writer) error {
	var ls [2]profile.SASSListing
	for i, p := range []string{oldPath, newPath} {
		l, err := sassListing(ctx, p)
		if err != nil {
			return CannotRun("sass-diff: %v", err)
		}
		if len(l) == 0 {
			return CannotRun("sass-diff: %s: no SASS functions in it", p)
		}
		ls[i] = l
	}
	d := profile.DiffSASS(ls[0], ls[1])
	fmt.Fprintf(w, "# SASS: %s -> %s\n\n%d functions in the new listing: %d identical, %d changed, %d added; %d removed.\n",
		oldPath, newPath, len(ls[1]), len(d.Same), len(d.Changed), len(d.Added), len(d.Removed))
	if len(d.Changed) > 0 {
		fmt.Fprintf(w, "\n| changed function | instructions old -> new | opcodes whose counts moved (old -> new) |\n|---|---|---|\n")
		for _, k := range d.Changed {
			fmt.Fprintf(w, "| %s | %d -> %d | %s |\n", k, len(ls[0][k]), len(ls[1][k]), opcodeMoves(ls[0][k], ls[1][k], 6))
		}
	}
	for _, s := range []struct {
		what string
		keys []string
	}{{"added", d.Added}, {"removed", d.Removed}} {
		if len(s.keys) > 0 {
			fmt.Fprintf(w, "\n%s: %s\n", s.what, strings.Join(s.keys, ", "))
		}
	}
	if len(d.Changed)+len(d.Added)+len(d.Removed) > 0 {
		return &Error{1, nil}
	}
	return nil
}

// opcodeMoves lists up to n base opcodes whose counts differ, largest move
// first ("FFMA 120 -> 96"); "same opcode counts" when only operands or
// order moved.
func opcodeMoves(old, cur []string, n int) string {
	count := func(ins []string) map[string]int {
		m := map[string]int{}
		for _, s := range ins {
			if op := profile.SASSOpcode(s); op != "" {
				m[op]++
			}
		}
		return m
	}
	a, b := count(old), count(cur)
	var ops []string
	for op := range a {
		if a[op] != b[op] {
			ops = append(ops, op)
		}
	}
	for op := range b {
		if _, ok := a[op]; !ok {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return "same opcode counts (operands, registers or order moved)"
	}
	abs := func(x int) int {
		if x < 0 {
			return -x
		}
		return x
	}
	sort.Slice(ops, func(i, j int) bool {
		di, dj := abs(b[ops[i]]-a[ops[i]]), abs(b[ops[j]]-a[ops[j]])
		if di != dj {
			return di > dj
		}
		return ops[i] < ops[j]
	})
	if len(ops) > n {
		ops = ops[:n]
	}
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = fmt.Sprintf("%s %d -> %d", op, a[op], b[op])
	}
	return strings.Join(parts, ", ")
}

package runs

import (
	"context"
	"encoding/json"
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
		l, err := profile.ParseSASSListing(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return l, nil
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
	l, err := profile.ParseSASSListing(string(out))
	if err != nil {
		return nil, fmt.Errorf("cuobjdump --dump-sass %s: %w", path, err)
	}
	return l, nil
}

// kernelsRun is what sass-diff reads of an abtest report (its JSON) of the
// MINFER_KERNELS lever: the verdict, the kernel sources both arms ran, and
// what each arm launched (the profile gate's census).
type kernelsRun struct {
	name        string
	Lever       string `json:"lever"`
	Verdict     string `json:"verdict"`
	Environment struct {
		KernelSources string `json:"kernel_sources_sha256"`
	} `json:"environment"`
	Gates []struct {
		Gate    string `json:"gate"`
		Profile *struct {
			CensusA map[string]int64 `json:"census_a"`
			CensusB map[string]int64 `json:"census_b"`
		} `json:"profile"`
	} `json:"gates"`
}

// launched reports whether both arms of the run launched kernel name: only
// then did its A/B time both builds of it.
func (r *kernelsRun) launched(name string) bool {
	for _, g := range r.Gates {
		if g.Profile != nil && g.Profile.CensusA[name] > 0 && g.Profile.CensusB[name] > 0 {
			return true
		}
	}
	return false
}

// readKernelsRuns reads the --runs reports: each a MINFER_KERNELS A/B with
// a profile census, all of one kernel-sources hash (a run of other sources
// says nothing of these listings).
func readKernelsRuns(patterns []string) ([]*kernelsRun, error) {
	var paths []string
	for _, pat := range patterns {
		m, err := filepath.Glob(pat)
		if err != nil || len(m) == 0 {
			m = []string{pat} // read as a name: a missing file is its own error
		}
		paths = append(paths, m...)
	}
	var out []*kernelsRun
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r := &kernelsRun{name: strings.TrimSuffix(filepath.Base(p), ".json")}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%s: not an abtest report: %v", p, err)
		}
		if lever, _, _ := strings.Cut(r.Lever, "="); lever != "MINFER_KERNELS" {
			return nil, fmt.Errorf("%s: a report of %q, want MINFER_KERNELS (an nvcc file against the NVRTC build)", p, r.Lever)
		}
		census := false
		for _, g := range r.Gates {
			census = census || (g.Profile != nil && len(g.Profile.CensusB) > 0)
		}
		if !census {
			return nil, fmt.Errorf("%s: no profile gate census (which kernels ran is unknown)", p)
		}
		if len(out) > 0 && r.Environment.KernelSources != out[0].Environment.KernelSources {
			return nil, fmt.Errorf("%s: kernel sources %.12s, %s has %.12s: the runs must be of one source tree",
				p, r.Environment.KernelSources, out[0].name, out[0].Environment.KernelSources)
		}
		out = append(out, r)
	}
	return out, nil
}

// SASSDiff compares two kernel listings (oldPath -> newPath). With runs
// (abtest JSON reports of MINFER_KERNELS A/Bs of the same sources) each
// changed or added function is also matched with the runs whose two arms
// both launched it, and the question becomes issue 25's: is every
// difference shown no slower by a PASS run? Exit 0: no difference, or (with
// runs) every changed and added function launched in a PASS run and none
// removed; 1: otherwise; 2: an input could not be read.
func SASSDiff(ctx context.Context, oldPath, newPath string, runPaths []string, w io.Writer) error {
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
	rs, err := readKernelsRuns(runPaths)
	if err != nil {
		return CannotRun("sass-diff --runs: %v", err)
	}
	d := profile.DiffSASS(ls[0], ls[1])
	fmt.Fprintf(w, "# SASS: %s -> %s\n\n%d functions in the new listing: %d identical, %d changed, %d added; %d removed.\n",
		oldPath, newPath, len(ls[1]), len(d.Same), len(d.Changed), len(d.Added), len(d.Removed))
	// runIn names the runs that launched function key (arch-qualified) in
	// both arms, PASS runs first; shown reports whether a PASS run did.
	runIn := func(key string) (cell string, shown bool) {
		_, name, _ := strings.Cut(key, " ")
		var pass, other []string
		for _, r := range rs {
			switch {
			case !r.launched(name):
			case r.Verdict == "PASS":
				pass = append(pass, r.name)
			default:
				other = append(other, r.name+" ("+r.Verdict+")")
			}
		}
		switch {
		case len(pass) > 0:
			return "PASS " + strings.Join(pass, ", "), true
		case len(other) > 0:
			return "not a PASS: " + strings.Join(other, ", "), false
		}
		return "not run", false
	}
	var shownN, otherN int
	var unshown []string
	if len(d.Changed) > 0 {
		head, rule := "| changed function | instructions old -> new | opcodes whose counts moved (old -> new) |", "|---|---|---|"
		if len(rs) > 0 {
			head, rule = head+" run in (both arms launched it) |", rule+"---|"
		}
		fmt.Fprintf(w, "\n%s\n%s\n", head, rule)
		for _, k := range d.Changed {
			row := fmt.Sprintf("| %s | %d -> %d | %s |", k, len(ls[0][k]), len(ls[1][k]), opcodeMoves(ls[0][k], ls[1][k], 6))
			if len(rs) > 0 {
				cell, shown := runIn(k)
				row += " " + cell + " |"
				if shown {
					shownN++
				} else {
					unshown = append(unshown, k)
					if cell != "not run" {
						otherN++
					}
				}
			}
			fmt.Fprintln(w, row)
		}
	}
	for _, k := range d.Added {
		if len(rs) > 0 {
			if _, shown := runIn(k); shown {
				shownN++
			} else {
				unshown = append(unshown, k)
			}
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
	diff := len(d.Changed)+len(d.Added)+len(d.Removed) > 0
	if len(rs) > 0 {
		pass := 0
		for _, r := range rs {
			if r.Verdict == "PASS" {
				pass++
			}
		}
		fmt.Fprintf(w, "\nRuns: %d MINFER_KERNELS reports of kernel sources %.12s, %d PASS. Changed or added functions launched by both arms of a PASS run: %d of %d; only in runs that did not PASS: %d; in none: %d.\n",
			len(rs), rs[0].Environment.KernelSources, pass, shownN, len(d.Changed)+len(d.Added), otherN, len(unshown)-otherN)
		if len(unshown) > 0 {
			fmt.Fprintf(w, "\nNot shown no slower by a PASS run: %s\n", strings.Join(unshown, ", "))
		}
		diff = len(unshown)+len(d.Removed) > 0
	}
	if diff {
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

package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	// ledger is the SASS ledger of the run's sources when they are not the
	// listings' (--ledger); nil when the run timed today's SASS.
	ledger sassLedger
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
// a profile census. With oneTree all must be of one kernel-sources hash (a
// run of other sources says nothing of these listings unless a ledger
// vouches for its SASS).
func readKernelsRuns(patterns []string, oneTree bool) ([]*kernelsRun, error) {
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
		if oneTree && len(out) > 0 && r.Environment.KernelSources != out[0].Environment.KernelSources {
			return nil, fmt.Errorf("%s: kernel sources %.12s, %s has %.12s: the runs must be of one source tree (or pass --ledger)",
				p, r.Environment.KernelSources, out[0].name, out[0].Environment.KernelSources)
		}
		if !oneTree && !isSourcesHash(r.Environment.KernelSources) {
			return nil, fmt.Errorf("%s: kernel_sources_sha256 %q is not a sha256: which SASS it timed cannot be told", p, r.Environment.KernelSources)
		}
		out = append(out, r)
	}
	return out, nil
}

// SASSDiffOptions are sass-diff's flags.
type SASSDiffOptions struct {
	// Runs are abtest reports (JSON, globs expanded) of MINFER_KERNELS A/Bs.
	Runs []string
	// Ledger is the SASS ledger directory: the listings' digests are
	// recorded there, and runs of other sources count through theirs. ""
	// keeps the runs to one source tree.
	Ledger string
	// Sources is the kernel-sources hash the listings are of (with Ledger);
	// "" is this binary's embedded sources.
	Sources string
}

// runStatus is how a function stands against the runs.
type runStatus int

const (
	notRun      runStatus = iota
	shownByPass           // a PASS run timed today's SASS of it
	sassChanged           // PASS runs launched it, but its SASS changed since
	notAPass              // only runs that did not PASS launched it
)

// SASSDiff compares two kernel listings (oldPath -> newPath). With runs
// (abtest JSON reports of MINFER_KERNELS A/Bs) each changed or added
// function is also matched with the runs whose two arms both launched it,
// and the question becomes issue 25's: is every difference shown no slower
// by a PASS run? Without a ledger the runs must be of one source tree, and
// are taken to be of the listings' sources; with one, a run of other
// sources counts for a function only where its ledger's digests equal
// today's. Exit 0: no difference, or (with runs) every changed and added
// function shown no slower by a PASS run and none removed; 1: otherwise; 2:
// an input could not be read or judged.
func SASSDiff(ctx context.Context, oldPath, newPath string, o SASSDiffOptions, w io.Writer) error {
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
	sources := o.Sources
	if o.Ledger == "" && sources != "" {
		return CannotRun("sass-diff: --sources names the listings' sources for --ledger; without --ledger it has no use")
	}
	if sources == "" && o.Ledger != "" {
		// No default: listings carry no sources hash, and a ledger written
		// under the wrong one would let runs count for SASS they never timed.
		return CannotRun("sass-diff --ledger: --sources is required: the kernel-sources sha256 the listings were built from (a run's or minfer bench's kernel_sources_sha256)")
	}
	today := ledgerOf(ls[0], ls[1])
	var ledgerNote string
	if o.Ledger != "" {
		if !isSourcesHash(sources) {
			return CannotRun("sass-diff: --sources %q: want a kernel-sources sha256 (64 lower-case hex digits)", sources)
		}
		p, wrote, err := writeLedger(o.Ledger, sources, filepath.Base(oldPath), filepath.Base(newPath), today)
		if err != nil {
			return CannotRun("sass-diff --ledger: %v", err)
		}
		how := "already there, the same digests"
		if wrote {
			how = "written"
		}
		ledgerNote = fmt.Sprintf("SASS ledger of these listings (kernel sources %.12s): %s (%s).\n", sources, p, how)
	}
	rs, err := readKernelsRuns(o.Runs, o.Ledger == "")
	if err != nil {
		return CannotRun("sass-diff --runs: %v", err)
	}
	if o.Ledger != "" {
		if err := attachLedgers(rs, o.Ledger, sources); err != nil {
			return CannotRun("sass-diff --runs: %v", err)
		}
	}
	d := profile.DiffSASS(ls[0], ls[1])
	fmt.Fprintf(w, "# SASS: %s -> %s\n\n%d functions in the new listing: %d identical, %d changed, %d added; %d removed.\n",
		oldPath, newPath, len(ls[1]), len(d.Same), len(d.Changed), len(d.Added), len(d.Removed))
	if ledgerNote != "" {
		fmt.Fprintf(w, "\n%s", ledgerNote)
	}
	// runIn names the runs that launched function key (arch-qualified) in
	// both arms, PASS runs that timed today's SASS of it first.
	runIn := func(key string) (string, runStatus) {
		_, name, _ := strings.Cut(key, " ")
		var pass, changed, other []string
		for _, r := range rs {
			switch {
			case !r.launched(name):
			case r.Verdict != "PASS":
				other = append(other, r.name+" ("+r.Verdict+")")
			case r.ledger == nil:
				pass = append(pass, r.name)
			case r.ledger.digests(key) == today.digests(key):
				// The run timed both builds' SASS of it as they are today.
				pass = append(pass, fmt.Sprintf("%s (sources %.12s, SASS equal)", r.name, r.Environment.KernelSources))
			default:
				changed = append(changed, fmt.Sprintf("%s (sources %.12s)", r.name, r.Environment.KernelSources))
			}
		}
		since := ""
		if len(changed) > 0 {
			since = "SASS changed since: " + strings.Join(changed, ", ")
		}
		switch {
		case len(pass) > 0 && since != "":
			return "PASS " + strings.Join(pass, ", ") + "; " + since, shownByPass
		case len(pass) > 0:
			return "PASS " + strings.Join(pass, ", "), shownByPass
		case since != "" && len(other) > 0:
			return since + "; not a PASS: " + strings.Join(other, ", "), sassChanged
		case since != "":
			return since, sassChanged
		case len(other) > 0:
			return "not a PASS: " + strings.Join(other, ", "), notAPass
		}
		return "not run", notRun
	}
	var byStatus [4]int
	var unshown []string
	judge := func(k string) string {
		cell, st := runIn(k)
		byStatus[st]++
		if st != shownByPass {
			unshown = append(unshown, k)
		}
		return cell
	}
	if len(d.Changed) > 0 {
		head, rule := "| changed function | instructions old -> new | opcodes whose counts moved (old -> new) |", "|---|---|---|"
		if len(rs) > 0 {
			head, rule = head+" run in (both arms launched it) |", rule+"---|"
		}
		fmt.Fprintf(w, "\n%s\n%s\n", head, rule)
		for _, k := range d.Changed {
			row := fmt.Sprintf("| %s | %d -> %d | %s |", k, len(ls[0][k]), len(ls[1][k]), opcodeMoves(ls[0][k], ls[1][k], 6))
			if len(rs) > 0 {
				row += " " + judge(k) + " |"
			}
			fmt.Fprintln(w, row)
		}
	}
	for _, k := range d.Added {
		if len(rs) > 0 {
			judge(k)
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
		judged := len(d.Changed) + len(d.Added)
		if o.Ledger == "" {
			fmt.Fprintf(w, "\nRuns: %d MINFER_KERNELS reports of kernel sources %.12s, %d PASS. Changed or added functions launched by both arms of a PASS run: %d of %d; only in runs that did not PASS: %d; in none: %d.\n",
				len(rs), rs[0].Environment.KernelSources, pass, byStatus[shownByPass], judged, byStatus[notAPass], byStatus[notRun])
		} else {
			fmt.Fprintf(w, "\nRuns: %d MINFER_KERNELS reports, %d PASS: %s. Changed or added functions launched by both arms of a PASS run that timed their SASS of today: %d of %d; launched by PASS runs only at SASS that has changed since: %d; only in runs that did not PASS: %d; in none: %d.\n",
				len(rs), pass, runsBySources(rs, sources), byStatus[shownByPass], judged, byStatus[sassChanged], byStatus[notAPass], byStatus[notRun])
		}
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

// attachLedgers reads the ledger of every run whose sources are not the
// listings'. A run without one cannot be judged: what SASS it timed is
// unknown.
func attachLedgers(rs []*kernelsRun, dir, sources string) error {
	byHash := map[string]sassLedger{}
	for _, r := range rs {
		h := r.Environment.KernelSources
		if h == sources {
			continue
		}
		l, ok := byHash[h]
		if !ok {
			p := ledgerPath(dir, h)
			var err error
			l, err = readLedger(p, h)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s.json: kernel sources %.12s, not these listings' (%.12s), and no SASS ledger of them (%s): run sass-diff --ledger on listings of those sources first",
					r.name, h, sources, p)
			}
			if err != nil {
				return fmt.Errorf("%s.json: %w", r.name, err)
			}
			byHash[h] = l
		}
		r.ledger = l
	}
	return nil
}

// runsBySources counts the runs per kernel-sources hash, the listings'
// own first, then by hash.
func runsBySources(rs []*kernelsRun, sources string) string {
	n, pass := map[string]int{}, map[string]int{}
	for _, r := range rs {
		n[r.Environment.KernelSources]++
		if r.Verdict == "PASS" {
			pass[r.Environment.KernelSources]++
		}
	}
	var hs []string
	if n[sources] > 0 {
		hs = append(hs, sources)
	}
	var others []string
	for h := range n {
		if h != sources {
			others = append(others, h)
		}
	}
	sort.Strings(others)
	hs = append(hs, others...)
	parts := make([]string, len(hs))
	for i, h := range hs {
		how := "through its ledger"
		if h == sources {
			how = "these listings' sources"
		}
		parts[i] = fmt.Sprintf("%d of kernel sources %.12s (%s; %d PASS)", n[h], h, how, pass[h])
	}
	return strings.Join(parts, ", ")
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

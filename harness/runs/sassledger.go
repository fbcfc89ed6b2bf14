package runs

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/minfer-go/minfer/harness/profile"
)

// A SASS ledger records, for one kernel-sources tree, the digest of every
// function's SASS in nvcc's build (old) and NVRTC's (new). A MINFER_KERNELS
// run at those sources timed exactly that SASS, so it still shows a
// function no slower today when both of today's digests equal its ledger's:
// runs then count across source trees, per function.

// SASSDigest is the digest of one function's normalized instructions (a
// profile.SASSListing value): the first 16 hex digits of their sha256,
// joined by newlines so that no two instruction lists run together.
func SASSDigest(ins []string) string {
	h := sha256.Sum256([]byte(strings.Join(ins, "\n")))
	return hex.EncodeToString(h[:])[:16]
}

// absent is the ledger's digest of a function one listing lacks.
const absent = "-"

// sassLedger maps a function key ("sm_90a minfer_foo") to its digests in
// the old (nvcc) and new (NVRTC) listings.
type sassLedger map[string][2]string

// ledgerOf digests every function of the two listings.
func ledgerOf(old, cur profile.SASSListing) sassLedger {
	l := sassLedger{}
	for i, ls := range []profile.SASSListing{old, cur} {
		for k, ins := range ls {
			d := l[k]
			if d[0] == "" {
				d = [2]string{absent, absent}
			}
			d[i] = SASSDigest(ins)
			l[k] = d
		}
	}
	return l
}

// digests is k's entry, absent in both when the ledger lacks it.
func (l sassLedger) digests(k string) [2]string {
	if d, ok := l[k]; ok {
		return d
	}
	return [2]string{absent, absent}
}

// firstDiff is the first key (in order) whose digests differ between l and
// m, "" when none does.
func (l sassLedger) firstDiff(m sassLedger) string {
	var keys []string
	for k := range l {
		keys = append(keys, k)
	}
	for k := range m {
		if _, ok := l[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if l.digests(k) != m.digests(k) {
			return k
		}
	}
	return ""
}

const ledgerHeader = "# SASS ledger of kernel sources "

// ledgerPath is the ledger file of a sources hash in dir.
func ledgerPath(dir, sources string) string {
	return filepath.Join(dir, sources[:12]+".tsv")
}

// isSourcesHash reports whether s is a kernel-sources hash (sha256, hex):
// its first 12 digits name a ledger file.
func isSourcesHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// formatLedger is the ledger file: the header, then one line per function
// key in key order.
func formatLedger(sources, oldName, newName string, l sassLedger) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%s: old %s (nvcc), new %s (NVRTC); KEY<TAB>OLD<TAB>NEW, sha256[:16] of each function's instructions\n",
		ledgerHeader, sources, oldName, newName)
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", k, l[k][0], l[k][1])
	}
	return b.Bytes()
}

// readLedger reads the ledger file of sources; an error wrapping
// fs.ErrNotExist when there is none.
func readLedger(path, sources string) (sassLedger, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	l := sassLedger{}
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if line == 1 {
			// The file name holds 12 digits of the hash; the header holds
			// all of them, so a shared prefix is caught here.
			rest, ok := strings.CutPrefix(s, ledgerHeader)
			h, _, _ := strings.Cut(rest, ":")
			if !ok || h != sources {
				return nil, fmt.Errorf("%s: not the ledger of kernel sources %.12s (header %q)", path, sources, s)
			}
			continue
		}
		if s == "" {
			continue
		}
		f := strings.Split(s, "\t")
		if len(f) != 3 || !isDigest(f[1]) || !isDigest(f[2]) || (f[1] == absent && f[2] == absent) {
			return nil, fmt.Errorf("%s:%d: want KEY<TAB>OLD<TAB>NEW digests, got %q", path, line, s)
		}
		if _, dup := l[f[0]]; dup {
			return nil, fmt.Errorf("%s:%d: %s twice", path, line, f[0])
		}
		l[f[0]] = [2]string{f[1], f[2]}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("%s: empty ledger", path)
	}
	return l, nil
}

func isDigest(s string) bool {
	if s == absent {
		return true
	}
	_, err := hex.DecodeString(s)
	return len(s) == 16 && err == nil
}

// writeLedger records l as the ledger of sources in dir, creating dir. An
// existing ledger of those sources must hold the same digests (then it is
// left as it is): the same sources compiled to other SASS means another
// compiler, or listings that are not of these sources, and every run
// judged through it would be judged wrongly. It returns the file's path
// and whether it was written.
func writeLedger(dir, sources, oldName, newName string, l sassLedger) (string, bool, error) {
	p := ledgerPath(dir, sources)
	had, err := readLedger(p, sources)
	switch {
	case err == nil:
		if k := had.firstDiff(l); k != "" {
			d, h := l.digests(k), had.digests(k)
			return p, false, fmt.Errorf("%s: kernel sources %.12s gave other SASS before: %s was nvcc %s, NVRTC %s there, is nvcc %s, NVRTC %s in these listings (another compiler, or listings not of these sources: --sources)",
				p, sources, k, h[0], h[1], d[0], d[1])
		}
		return p, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return p, false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return p, false, fmt.Errorf("ledger: %w", err)
	}
	if err := os.WriteFile(p, formatLedger(sources, oldName, newName, l), 0o644); err != nil {
		return p, false, fmt.Errorf("ledger: %w", err)
	}
	return p, true, nil
}

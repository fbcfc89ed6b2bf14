package runs

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness/profile"
)

// The digest tells apart any two instruction lists: one changed instruction,
// one more, or the same text split at another line gives another digest;
// the same list gives the same one.
func TestSASSDigest_DiffersWhenAnyInstructionDoes(t *testing.T) {
	base := []string{"LDC R1, c[0x0][0x28]", "@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20", "EXIT"}
	d := SASSDigest(base)
	if len(d) != 16 || !isDigest(d) {
		t.Fatalf("digest %q: want 16 hex digits", d)
	}
	if again := SASSDigest(append([]string(nil), base...)); again != d {
		t.Errorf("the same instructions: %s, then %s", d, again)
	}
	for name, other := range map[string][]string{
		"one operand": {"LDC R1, c[0x0][0x28]", "@!P0 IMMA.16832.S8.S8 R20, R12, R19, R20", "EXIT"},
		"predicate":   {"LDC R1, c[0x0][0x28]", "@P0 IMMA.16832.S8.S8 R20, R12, R18, R20", "EXIT"},
		"one more":    append(append([]string(nil), base...), "EXIT"),
		"split again": {"LDC R1, c[0x0][0x28] @!P0", "IMMA.16832.S8.S8 R20, R12, R18, R20", "EXIT"},
		"order":       {"@!P0 IMMA.16832.S8.S8 R20, R12, R18, R20", "LDC R1, c[0x0][0x28]", "EXIT"},
		"none":        nil,
	} {
		if SASSDigest(other) == d {
			t.Errorf("%s: the same digest as the base", name)
		}
	}
}

// A ledger written is read back as it was: both builds' digests, "-" for
// a function one listing lacks; a file whose header names other sources
// (12 digits shared) is refused.
func TestSASSLedger_ReadsBackWhatWasWritten(t *testing.T) {
	old := profile.SASSListing{"sm_90a f": {"EXIT"}, "sm_90a gone": {"NOP", "EXIT"}}
	cur := profile.SASSListing{"sm_90a f": {"NOP", "EXIT"}, "sm_90a new": {"EXIT"}}
	l := ledgerOf(old, cur)
	want := sassLedger{
		"sm_90a f":    {SASSDigest(old["sm_90a f"]), SASSDigest(cur["sm_90a f"])},
		"sm_90a gone": {SASSDigest(old["sm_90a gone"]), absent},
		"sm_90a new":  {absent, SASSDigest(cur["sm_90a new"])},
	}
	if !maps.Equal(l, want) {
		t.Fatalf("ledgerOf: %v, want %v", l, want)
	}
	dir := t.TempDir()
	h := strings.Repeat("ab", 32)
	p, wrote, err := writeLedger(dir, h, "a.sass", "b.sass", l)
	if err != nil || !wrote || p != filepath.Join(dir, "abababababab.tsv") {
		t.Fatalf("writeLedger: %s %v %v", p, wrote, err)
	}
	back, err := readLedger(p, h)
	if err != nil || !maps.Equal(back, l) {
		t.Errorf("read back %v (%v), want %v", back, err, l)
	}
	if _, err := readLedger(p, strings.Repeat("ab", 6)+strings.Repeat("0", 52)); err == nil {
		t.Errorf("a ledger of other sources sharing 12 digits was read")
	}
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, append(b, "sm_90a x\tzz\t-\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readLedger(p, h); err == nil {
		t.Errorf("a line with a bad digest was read")
	}
}

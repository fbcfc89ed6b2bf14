package filehash

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// later is a clock past the racy window of any file a test just wrote.
func later() time.Time { return time.Now().Add(time.Hour) }

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSHA256_SecondCallIsAHitWithTheFileHash: the first call reads the file
// and remembers it; the second returns the same hash without reading.
func TestSHA256_SecondCallIsAHitWithTheFileHash(t *testing.T) {
	dir, f := t.TempDir(), filepath.Join(t.TempDir(), "m.gguf")
	b := []byte(strings.Repeat("weights ", 1000))
	write(t, f, b)
	for i, wantHit := range []bool{false, true} {
		r, err := sha256In(dir, f, later())
		if err != nil || r.SHA256 != sum(b) || r.Hit != wantHit || r.CacheErr != nil {
			t.Fatalf("call %d: %+v, %v: want %s, hit %v", i, r, err, sum(b), wantHit)
		}
	}
}

// TestSHA256_AnEditWithItsModTimeRestoredIsHashedAgain: the same size, the
// modification time set back, and still a miss with the new hash (the
// change time moved); a renamed-over file (new inode) is a miss too.
func TestSHA256_AnEditWithItsModTimeRestoredIsHashedAgain(t *testing.T) {
	dir, f := t.TempDir(), filepath.Join(t.TempDir(), "m.gguf")
	write(t, f, []byte("aaaa"))
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sha256In(dir, f, later()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // past a coarse clock tick
	write(t, f, []byte("bbbb"))
	if err := os.Chtimes(f, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	r, err := sha256In(dir, f, later())
	if err != nil || r.Hit || r.SHA256 != sum([]byte("bbbb")) {
		t.Fatalf("after an in-place edit: %+v, %v: want a miss with the new hash", r, err)
	}
	tmp := f + ".new"
	write(t, tmp, []byte("cccc"))
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
	if r, err := sha256In(dir, f, later()); err != nil || r.Hit || r.SHA256 != sum([]byte("cccc")) {
		t.Fatalf("after a rename over it: %+v, %v: want a miss with the new hash", r, err)
	}
}

// TestSHA256_AFreshFileIsNotRemembered: a file changed within the racy
// window is hashed on every call.
func TestSHA256_AFreshFileIsNotRemembered(t *testing.T) {
	dir, f := t.TempDir(), filepath.Join(t.TempDir(), "m.gguf")
	write(t, f, []byte("fresh"))
	for i := range 2 {
		if r, err := sha256In(dir, f, time.Now()); err != nil || r.Hit || r.SHA256 != sum([]byte("fresh")) {
			t.Fatalf("call %d: %+v, %v: want a miss with the hash", i, r, err)
		}
	}
}

// TestSHA256_ACorruptOrForeignEntryIsAMissThatSaysSo: garbage in the entry
// is reported in CacheErr and the file hashed; an entry naming another path
// (or hash) is never used.
func TestSHA256_ACorruptOrForeignEntryIsAMissThatSaysSo(t *testing.T) {
	dir, f := t.TempDir(), filepath.Join(t.TempDir(), "m.gguf")
	write(t, f, []byte("model"))
	if _, err := sha256In(dir, f, later()); err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(names) != 1 {
		t.Fatalf("entries %v, %v: want one", names, err)
	}
	e, err := readEntry(names[0])
	if err != nil {
		t.Fatal(err)
	}
	e.Path = "/elsewhere/m.gguf"
	if err := writeEntry(names[0], e); err != nil {
		t.Fatal(err)
	}
	if r, err := sha256In(dir, f, later()); err != nil || r.Hit || r.SHA256 != sum([]byte("model")) {
		t.Fatalf("a foreign entry: %+v, %v: want a miss", r, err)
	}
	write(t, names[0], []byte("{not json"))
	r, err := sha256In(dir, f, later())
	if err != nil || r.Hit || r.SHA256 != sum([]byte("model")) || r.CacheErr == nil || !strings.Contains(r.CacheErr.Error(), "corrupt") {
		t.Fatalf("a corrupt entry: %+v, %v: want a miss with the hash and CacheErr naming it", r, err)
	}
}

// TestSHA256_MissingFileAndUnwritableCache: a missing file is an error; a
// cache that cannot be written still gives the file's hash, with CacheErr.
func TestSHA256_MissingFileAndUnwritableCache(t *testing.T) {
	if _, err := SHA256In(t.TempDir(), filepath.Join(t.TempDir(), "none.gguf")); err == nil {
		t.Error("a missing file: no error")
	}
	f := filepath.Join(t.TempDir(), "m.gguf")
	write(t, f, []byte("x"))
	blocker := filepath.Join(t.TempDir(), "file")
	write(t, blocker, nil)
	r, err := sha256In(filepath.Join(blocker, "sub"), f, later())
	if err != nil || r.SHA256 != sum([]byte("x")) || r.CacheErr == nil {
		t.Fatalf("unwritable cache: %+v, %v: want the hash and a CacheErr", r, err)
	}
	if _, err := SHA256In(t.TempDir(), t.TempDir()); err == nil {
		t.Error("a directory: no error")
	}
}

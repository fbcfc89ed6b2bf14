// Package filehash gives a file's SHA-256 and remembers it on disk, beside
// the kernels cache (os.UserCacheDir()/minfer/sha256). A 7B model is 8 GB:
// ~5 s of hashing, which every bench process of an A/B spent before it
// loaded a weight. An entry is used only while the file is the one it
// describes: same path, device and inode, size, modification time and
// change time. Any write to the file moves its change time, which no user
// call can set back (os.Chtimes moves it too), so a file edited in place,
// even with its modification time restored, is hashed again.
//
// Time stamps come from a coarse clock (a few ms), so a write within the
// same tick as the last one may leave them as they were: a file changed in
// the last racyWindow is hashed but not remembered (git's "racily clean"
// rule), and any later write lands on a later tick.
//
// Where the file system gives no change time (not Linux), nothing is
// remembered and every call hashes the file.
package filehash

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// racyWindow: a file whose change time is this recent is not remembered.
const racyWindow = 2 * time.Second

// Result is a file's hash and how it was found.
type Result struct {
	SHA256 string // hex
	Hit    bool   // from the cache: the file was not read
	// CacheErr is a failure of the cache alone (an unreadable or corrupt
	// entry, a directory that cannot be written): the hash is still the
	// file's, read in full; callers say it once, as a warning.
	CacheErr error
}

// entry is one remembered hash, stored as JSON in <dir>/<sha256(path)>.json.
type entry struct {
	Path string `json:"path"`
	identity
	SHA256 string `json:"sha256"`
}

// identity is what must not change for an entry to stand (stat_linux.go).
type identity struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	CtimeNS int64  `json:"ctime_ns"`
}

// DefaultDir is os.UserCacheDir()/minfer/sha256.
func DefaultDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("filehash: no user cache directory: %w", err)
	}
	return filepath.Join(d, "minfer", "sha256"), nil
}

// SHA256 is SHA256In with DefaultDir (no cache when there is none).
func SHA256(path string) (Result, error) {
	dir, err := DefaultDir()
	if err != nil {
		r, herr := SHA256In("", path)
		if herr == nil {
			r.CacheErr = err
		}
		return r, herr
	}
	return SHA256In(dir, path)
}

// SHA256In returns the SHA-256 of the file at path, from the entry in dir
// when it still describes the file, else by reading the file (and then
// writing the entry, atomically). dir "" remembers nothing. The error is
// the file's (missing, unreadable); the cache's own failures go in
// Result.CacheErr.
func SHA256In(dir, path string) (Result, error) { return sha256In(dir, path, time.Now()) }

// sha256In is SHA256In at the time now (tests move it past racyWindow).
func sha256In(dir, path string, now time.Time) (Result, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Result{}, fmt.Errorf("filehash: %s: %w", path, err)
	}
	id, idOK, err := stat(abs)
	if err != nil {
		return Result{}, fmt.Errorf("filehash: %w", err)
	}
	var res Result
	name := ""
	if dir != "" && idOK {
		k := sha256.Sum256([]byte(abs))
		name = filepath.Join(dir, hex.EncodeToString(k[:16])+".json")
		switch e, err := readEntry(name); {
		case err == nil && e.Path == abs && e.identity == id:
			return Result{SHA256: e.SHA256, Hit: true}, nil
		case err != nil && !errors.Is(err, os.ErrNotExist):
			res.CacheErr = err
		}
	}
	sum, err := hashFile(abs)
	if err != nil {
		return Result{}, err
	}
	res.SHA256 = sum
	if name == "" {
		return res, nil
	}
	// The file may have changed while it was read: remember the hash only
	// for the identity it had before and still has after.
	if after, ok, err := stat(abs); err != nil || !ok || after != id || now.Sub(time.Unix(0, id.CtimeNS)) < racyWindow {
		return res, nil
	}
	if err := writeEntry(name, entry{Path: abs, identity: id, SHA256: sum}); err != nil && res.CacheErr == nil {
		res.CacheErr = err
	}
	return res, nil
}

// regular stats the file at path and refuses anything but a regular file.
func regular(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return fi, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("filehash: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("filehash: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func readEntry(name string) (entry, error) {
	var e entry
	b, err := os.ReadFile(name)
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(b, &e); err != nil || len(e.SHA256) != 64 {
		return e, fmt.Errorf("filehash: cache entry %s is corrupt (hashing the file again)", name)
	}
	return e, nil
}

// writeEntry writes the entry to a temporary file and renames it over name:
// a reader sees the old entry or the new one, never a part.
func writeEntry(name string, e entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("filehash: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("filehash: cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), ".entry-*")
	if err != nil {
		return fmt.Errorf("filehash: cache: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("filehash: cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("filehash: cache: %w", err)
	}
	return nil
}

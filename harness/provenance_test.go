package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/engine/levers"
)

// noGitProbe answers like the device copy of the tree: no .git, no GPU.
func noGitProbe() Probe {
	return Probe{
		LookPath: func(string) (string, error) { return "", errors.New("not found") },
		Command: func(_ context.Context, name string, _ ...string) (string, error) {
			return "", errors.New(name + ": not a git repository")
		},
	}
}

func TestCommit_WithoutGitComesFromTheMinferBuildStamp(t *testing.T) {
	defer func(r func(string) (VCSStamp, bool), o func() (VCSStamp, bool)) { readStamp, ownStamp = r, o }(readStamp, ownStamp)
	readStamp = func(string) (VCSStamp, bool) { return VCSStamp{Revision: "1234abcd5678", Modified: false}, true }
	ownStamp = func() (VCSStamp, bool) { return VCSStamp{Revision: "ffff"}, true }
	e := noGitProbe().Capture(context.Background(), "/nonexistent/minfer", "")
	if e.Commit != "1234abcd5678" || e.CommitFrom != CommitFromMinfer {
		t.Fatalf("commit %q from %q", e.Commit, e.CommitFrom)
	}
	if got := e.CommitLine(); got != "1234abcd5678 (from the minfer binary's build stamp; modified: false)" {
		t.Errorf("commit line %q", got)
	}
	if e.ShortCommit() != "1234abcd5" {
		t.Errorf("short %q", e.ShortCommit())
	}

	// No stamp on minfer: abtest's own, said so.
	readStamp = func(string) (VCSStamp, bool) { return VCSStamp{}, false }
	ownStamp = func() (VCSStamp, bool) { return VCSStamp{Revision: "abcdef012345", Modified: true}, true }
	e = noGitProbe().Capture(context.Background(), "/nonexistent/minfer", "")
	if e.CommitFrom != CommitFromAbtest || !strings.Contains(e.CommitLine(), "abtest's own build stamp; modified: true") {
		t.Errorf("%q", e.CommitLine())
	}
	// Neither: unknown, with how to fix it.
	ownStamp = func() (VCSStamp, bool) { return VCSStamp{}, false }
	e = noGitProbe().Capture(context.Background(), "/nonexistent/minfer", "")
	if e.Commit != "unknown" || !strings.Contains(e.CommitLine(), "-buildvcs=true") {
		t.Errorf("%q", e.CommitLine())
	}
}

// A git HEAD that is not the commit minfer was built from (the device's
// copy of the work tree carried a stale .git) must not name the record: the
// binary is what ran.
func TestCommit_MinferStampWinsOverAStaleGitHead(t *testing.T) {
	defer func(r func(string) (VCSStamp, bool)) { readStamp = r }(readStamp)
	readStamp = func(string) (VCSStamp, bool) { return VCSStamp{Revision: "de97add14b07", Modified: false}, true }
	e := Environment{Commit: "091eec67fe43", CommitFrom: CommitFromGit, Dirty: true}
	e.setCommitFromStamps("/nonexistent/minfer")
	if e.ShortCommit() != "de97add14" || e.CommitFrom != CommitFromMinfer || e.Dirty {
		t.Fatalf("commit %q from %q dirty %v", e.Commit, e.CommitFrom, e.Dirty)
	}
	if !strings.Contains(e.CommitLine(), "git HEAD 091eec67fe43 (uncommitted changes: true)") {
		t.Errorf("the stale HEAD is not named: %q", e.CommitLine())
	}
	// The same commit: git stays the source, no note.
	e = Environment{Commit: "de97add14b07", CommitFrom: CommitFromGit}
	e.setCommitFromStamps("/nonexistent/minfer")
	if e.CommitFrom != CommitFromGit || e.CommitNote != "" {
		t.Errorf("same commit: from %q note %q", e.CommitFrom, e.CommitNote)
	}
}

// TestReadVCSStamp_BinaryBuiltWithBuildvcsCarriesRevision builds a small
// main package of this module as scripts/abtest-device.sh builds minfer
// (-buildvcs=true, overriding GOFLAGS=-buildvcs=false) and reads the stamp
// back from the file.
func TestReadVCSStamp_BinaryBuiltWithBuildvcsCarriesRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary (-short)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if err := exec.Command("git", "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("not inside a git work tree")
	}
	bin := filepath.Join(t.TempDir(), "stamped")
	cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "github.com/minfer-go/minfer/harness/internal/fakeminfer")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s, ok := ReadVCSStamp(bin)
	if !ok || len(s.Revision) != 40 {
		t.Fatalf("stamp %+v ok %v", s, ok)
	}
	if _, ok := ReadVCSStamp("/nonexistent"); ok {
		t.Error("stamp of a missing file")
	}
}

func TestParseTolerance_AcceptsEveryRegistryDeclaration(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range levers.All() {
		if l.Tolerance == "" {
			continue
		}
		tol, err := ParseTolerance(l.Tolerance)
		if err != nil || tol.Bitwise || !(tol.Bounded || tol.RelBounded) || !tol.Top1Equal || tol.String() != l.Tolerance {
			t.Errorf("%s: %q: %+v %v", l.Name, l.Tolerance, tol, err)
		}
		seen[l.Name] = true
	}
	l, _ := levers.Lookup("MINFER_NO_PREFILL_GEMM")
	tol, _ := ParseTolerance(l.Tolerance)
	if tol.Class != "f16-weight-tile" || tol.MaxAbsDiff != 0.5 || tol.MarginBar != 0 {
		t.Errorf("MINFER_NO_PREFILL_GEMM declares %+v", tol)
	}
	for _, name := range []string{"MINFER_NO_Q80_MMVQ", "MINFER_NO_Q40_MMVQ", "MINFER_NO_KQ_MMVQ"} {
		l, _ := levers.Lookup(name)
		if tol, _ := ParseTolerance(l.Tolerance); tol.Class != "activation-quantization" || !tol.RelBounded || tol.RelL2 != 0.05 || tol.Bounded || tol.MarginBar != 0.2 {
			t.Errorf("%s declares %+v", name, tol)
		}
	}
	if !seen["MINFER_MMQ"] {
		t.Error("MINFER_MMQ's class is gone")
	}
}

// TestFileSHA256Cached_SeesAnEditWithItsModTimeRestored: the cached hash
// (internal/filehash, which tests the caching itself) never outlives the
// file's contents, even when an edit keeps the size and sets the
// modification time back (the in-process cache it replaced answered with
// the old hash there).
func TestFileSHA256Cached_SeesAnEditWithItsModTimeRestored(t *testing.T) {
	p := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	h1, err := FileSHA256Cached(p)
	want, _ := FileSHA256(p)
	if err != nil || h1 != want {
		t.Fatalf("%s %v", h1, err)
	}
	st, _ := os.Stat(p)
	time.Sleep(50 * time.Millisecond) // past a coarse clock tick
	if err := os.WriteFile(p, []byte("owt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	want, _ = FileSHA256(p)
	if h, err := FileSHA256Cached(p); err != nil || h != want || h == h1 {
		t.Errorf("after an in-place edit: %s %v, want %s", h, err, want)
	}
}

func TestRunner_ProfilerRunsAreAccountedApartFromMinfer(t *testing.T) {
	r := &Runner{Bin: "/bin/true"}
	if _, err := r.RunCall(context.Background(), Call{Label: "arm"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunCall(context.Background(), Call{Label: "ncu", Wrapper: []string{"/usr/bin/env"}}); err != nil {
		t.Fatal(err)
	}
	r.Account(WorkDeviceTests, time.Second)
	w := r.Work()
	if w[WorkMinfer].Execs != 1 || w[WorkProfilers].Execs != 1 || w[WorkDeviceTests].Wall != time.Second {
		t.Fatalf("%+v", w)
	}
	if d, n := r.ArmTime(); n != 1 || d != w[WorkMinfer].Wall {
		t.Errorf("ArmTime %v %d", d, n)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// scratchRepo makes a git repository of n commits whose cmd/minfer execs
// the fake minfer. Commit plant on (and every later one) sets plantEnv
// through the engine's test seam before it does; commit broken does not
// compile (the next one fixes it).
func scratchRepo(t *testing.T, fake string, n, plant int, plantEnv string, broken int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module scratch\n\ngo 1.21\n")
	var commits []string
	for i := 0; i < n; i++ {
		seam := ""
		if i >= plant {
			k, v, _ := strings.Cut(plantEnv, "=")
			seam = fmt.Sprintf("os.Setenv(%q, %q)", k, v)
		}
		brace := "}"
		if i == broken {
			brace = "" // does not compile
		}
		write("cmd/minfer/main.go", fmt.Sprintf("package main\n\nimport (\n\t\"os\"\n\t\"syscall\"\n)\n\n// commit %d\nfunc main() {\n\t%s\n\t_ = syscall.Exec(%q, append([]string{%q}, os.Args[1:]...), os.Environ())\n\tos.Exit(127)\n%s\n", i, seam, fake, fake, brace))
		git("add", "-A")
		subject := fmt.Sprintf("commit %d", i)
		if i == plant {
			subject += " (planted)"
		}
		git("commit", "-q", "-m", subject)
		commits = append(commits, git("rev-parse", "HEAD"))
	}
	return dir, commits
}

func readBisect(t *testing.T, out string) *gates.BisectRun {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(out, "*.json"))
	if len(ms) != 1 {
		t.Fatalf("bisect reports in %s: %v", out, ms)
	}
	b, err := os.ReadFile(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	var r gates.BisectRun
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

var bisectArgs = []string{"--pp", "16", "--tg", "4", "--reps", "1", "--bench-warmup-ms", "10", "--gen-n", "8", "--device", "cpu"}

// The done-when of bisect: over a scratch repository whose fifth commit
// plants a 10% decode slowdown through the test seam, abtest bisect names
// that commit, skipping a commit that does not build, confirms it against
// the last good one and reports their per-kernel difference; a range with
// no slowdown is refused as not reproduced.
func TestBisect_NamesThePlantedSlowdownCommitSkippingOneThatDoesNotBuild(t *testing.T) {
	fake := fakeMinfer(t)
	t.Setenv("FAKEMINFER_NOISE_SD", "0.01")
	t.Setenv("FAKEMINFER_SEED", "7")
	t.Setenv("FAKEMINFER_COUNTER", filepath.Join(t.TempDir(), "counter"))
	repo, commits := scratchRepo(t, fake, 8, 5, "MINFER_TEST_MUTATE=slow_decode=0.10", 3)
	builds := t.TempDir()

	out := t.TempDir()
	code := run(append([]string{"bisect", "--minfer", fake, "--repo", repo, "--good", commits[0], "--bad", commits[7], "--out", out, "--build-dir", builds}, bisectArgs...))
	r := readBisect(t, out)
	if code != 0 || r.Verdict != gates.BisectFound || r.FirstBad != commits[5] || r.LastGood != commits[4] {
		t.Fatalf("exit %d: %s (first bad %s, want %s)\nsteps %+v", code, r.Line, gates.Short(r.FirstBad), gates.Short(commits[5]), r.Steps)
	}
	if r.Mode != gates.BisectSpeed || r.Metric != "tg" || r.Reproduce.Outcome != gates.LikeBad {
		t.Errorf("mode %s metric %s reproduction %+v", r.Mode, r.Metric, r.Reproduce)
	}
	skipped := false
	for _, s := range r.Steps {
		if s.Commit == commits[3] {
			skipped = s.Outcome == gates.Untestable && strings.Contains(s.Why, "does not build")
		}
		if s.Outcome == gates.LikeGood && s.Index >= 5 || s.Outcome == gates.LikeBad && s.Index < 5 {
			t.Errorf("step %d (%s) judged %s: %s", s.Index, s.Subject, s.Outcome, s.Why)
		}
	}
	if !skipped {
		t.Errorf("the commit that does not build was not probed and skipped: %+v", r.Steps)
	}
	if r.Final == nil || r.Final.Outcome != gates.LikeBad || r.Profile == nil || r.Profile.Profile == nil || len(r.Profile.Profile.CensusA) == 0 {
		t.Errorf("confirmation %+v, per-kernel difference %+v", r.Final, r.Profile)
	}
	md, _ := os.ReadFile(filepath.Join(out, strings.TrimSuffix(filepath.Base(mustGlob(t, out, "*.md")), ".md")+".md"))
	if testing.Verbose() {
		t.Logf("report:\n%s", md)
	}
	for _, want := range []string{"**Bisect: FOUND: " + gates.Short(commits[5]), "commit 5 (planted)", "does not build", "## Confirmation", "## Per-kernel difference"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}

	// No slowdown between commit 0 and commit 4: refused, nothing bisected.
	out2 := t.TempDir()
	code = run(append([]string{"bisect", "--minfer", fake, "--repo", repo, "--good", commits[0], "--bad", commits[4], "--out", out2, "--build-dir", builds}, bisectArgs...))
	r = readBisect(t, out2)
	if code != 3 || r.Verdict != gates.BisectNotReproduced || len(r.Steps) != 0 {
		t.Fatalf("a range without the slowdown: exit %d: %s, %d steps", code, r.Line, len(r.Steps))
	}
}

// Greedy output changed: the commit that plants a perturbed logit is named.
func TestBisect_NamesTheCommitThatChangedGreedyOutput(t *testing.T) {
	fake := fakeMinfer(t)
	repo, commits := scratchRepo(t, fake, 6, 2, "MINFER_TEST_MUTATE=perturb_logit", -1)
	out := t.TempDir()
	code := run(append([]string{"bisect", "--minfer", fake, "--repo", repo, "--good", commits[0], "--bad", commits[5], "--out", out}, bisectArgs...))
	r := readBisect(t, out)
	if code != 0 || r.Mode != gates.BisectOutput || r.FirstBad != commits[2] {
		t.Fatalf("exit %d, mode %s: %s", code, r.Mode, r.Line)
	}
}

// A speed-up is bisected the same way: the commit that made the workload
// faster (through a variable the fake reads) is named.
func TestBisect_NamesTheCommitThatMadeItFaster(t *testing.T) {
	fake := fakeMinfer(t)
	t.Setenv("FAKEMINFER_NOISE_SD", "0.01")
	t.Setenv("FAKEMINFER_SEED", "11")
	t.Setenv("FAKEMINFER_COUNTER", filepath.Join(t.TempDir(), "counter"))
	t.Setenv("FAKEMINFER_SLOW_WHEN", "BISECT_FAST=:0.10") // slower until a commit sets it
	repo, commits := scratchRepo(t, fake, 6, 4, "BISECT_FAST=1", -1)
	out := t.TempDir()
	code := run(append([]string{"bisect", "--minfer", fake, "--repo", repo, "--good", commits[0], "--bad", commits[5], "--out", out}, bisectArgs...))
	r := readBisect(t, out)
	if code != 0 || r.FirstBad != commits[4] || !strings.Contains(r.Reproduce.Why, "faster") {
		t.Fatalf("exit %d: %s; ends: %s", code, r.Line, r.Reproduce.Why)
	}
}

func mustGlob(t *testing.T, dir, pat string) string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(dir, pat))
	if len(ms) != 1 {
		t.Fatalf("%s/%s: %v", dir, pat, ms)
	}
	return ms[0]
}

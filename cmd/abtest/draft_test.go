package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// MINFER_DRAFT through the fake minfer: the drafted arm's liveness
// (spec_drafted in the census) is judged in every gate that runs arm
// processes, and gate 2 is exact.

func TestRunDraft_LookupPassesGreedyABAndProfileWithLivenessInEach(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_DRAFT=lookup", "--rounds", "5", "--device", "cpu", "--gates", "greedy,ab,profile")
	if code != 3 || rec.Verdict != gates.VerdictPartial {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Status != gates.Pass || !strings.HasPrefix(g.Liveness, "PASS") || !strings.Contains(g.Liveness, "spec_drafted") {
			t.Errorf("%s: %s (%s); liveness %q", g.Gate, g.Status, g.Reason, g.Liveness)
		}
	}
}

func TestRunDraft_AcceptWrongDraftMakesGreedyFail(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_DRAFT=lookup", "--device", "cpu", "--gates", "greedy", "--mutate", "accept_wrong_draft")
	if code != 1 || status(rec, gates.GateGreedy) != gates.Fail {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
}

func TestRunDraft_PhantomDraftIsCaughtByLiveness(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_DRAFT=lookup", "--device", "cpu", "--gates", "greedy", "--mutate", "phantom")
	if code != 1 || status(rec, gates.GateGreedy) != gates.Fail {
		t.Fatalf("exit %d verdict %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, g := range rec.Gates {
		if g.Gate == gates.GateGreedy && !strings.Contains(g.Reason, "ran no spec_drafted") {
			t.Errorf("greedy failed for another reason: %s", g.Reason)
		}
	}
}

func TestRunDraft_RefusedPairCouldNotRun(t *testing.T) {
	bin := fakeMinfer(t)
	draft := filepath.Join(t.TempDir(), "qwen2-0.5b-othervocab.gguf")
	if err := os.WriteFile(draft, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	code := run([]string{"run", "--minfer", bin, "--out", t.TempDir(), "--lever", "MINFER_DRAFT=" + draft, "--device", "cpu"})
	if code != 2 {
		t.Fatalf("exit %d, want 2 (could not run)", code)
	}
}

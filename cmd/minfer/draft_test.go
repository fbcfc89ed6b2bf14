package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/schema"
)

// synthShape writes a synthetic model of shape and seed.
func synthShape(t *testing.T, shape string, seed uint64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape+".gguf")
	if err := synth.Write(path, synth.Options{Shape: shape, Type: quant.Q8_0, Seed: seed, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	return path
}

// generateIDs runs generate --json with args and returns its document.
func generateIDs(t *testing.T, cfg levers.Config, args ...string) schema.Generate {
	t.Helper()
	stdout, stderr, code := runApp(t, &app{cfg: cfg}, append([]string{"generate", "--device", "cpu", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	var doc schema.Generate
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// generate --draft gives the ids of plain greedy decoding with every
// drafter (the model itself, another model of its vocabulary, lookup,
// none), says what the drafts did, and the accept_wrong_draft seam makes
// the ids differ: the CLI's end of the identity gate.
func TestGenerate_DraftGivesThePlainGreedyIDs(t *testing.T) {
	m := synthShape(t, "qwen2-tiny", 1)
	other := synthShape(t, "qwen2-tiny", 2) // same vocabulary, other weights: wrong drafts
	prompt := "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
	base := []string{"-m", m, "--greedy", "-n", "24", prompt}
	plain := generateIDs(t, testConfig(t), base...)
	if plain.Speculative != nil {
		t.Errorf("plain generate wrote %+v", plain.Speculative)
	}
	for _, d := range []string{m, other, "lookup", "none"} {
		for _, k := range []string{"1", "4"} {
			doc := generateIDs(t, testConfig(t), append([]string{"--draft", d, "--draft-n", k}, base...)...)
			if !slices.Equal(doc.IDs, plain.IDs) {
				t.Errorf("--draft %s --draft-n %s: ids %v, plain %v", d, k, doc.IDs, plain.IDs)
			}
			s := doc.Speculative
			if s == nil || s.Draft != d || s.TargetForwards < 1 || s.Accepted > s.Drafted {
				t.Errorf("--draft %s: speculative %+v", d, s)
				continue
			}
			if d == m && s.AcceptanceRate != 1 {
				t.Errorf("the model drafting for itself: acceptance %.2f, want 1", s.AcceptanceRate)
			}
			t.Logf("--draft %s -k %s: accepted %d of %d, %.2f tokens per forward", filepath.Base(d), k, s.Accepted, s.Drafted, s.TokensPerForward)
		}
	}
	mut, err := levers.Parse([]string{"MINFER_TEST_MUTATE=" + levers.MutateAcceptWrongDraft})
	if err != nil {
		t.Fatal(err)
	}
	doc := generateIDs(t, mut, append([]string{"--draft", other}, base...)...)
	if slices.Equal(doc.IDs, plain.IDs) {
		t.Error("MINFER_TEST_MUTATE=accept_wrong_draft: the ids are the plain ones")
	}
}

// A draft model that cannot draft for the model is refused in one line
// (exit 2) before it is loaded; so are bad flags.
func TestGenerate_UnusableDraftIsOneClearError(t *testing.T) {
	m := synthShape(t, "qwen2-tiny", 1)
	notGGUF := filepath.Join(t.TempDir(), "draft.gguf")
	if err := os.WriteFile(notGGUF, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, draft string
		code        int
		want        string
	}{
		{"architecture", synthShape(t, "qwen3-tiny", 1), 2, "architecture qwen3, the target's is qwen2"},
		{"not gguf", notGGUF, 1, "--draft"},
		{"absent", filepath.Join(t.TempDir(), "absent.gguf"), 1, "--draft"},
	}
	if real := "../../../shared/models/tiny-code-f16.gguf"; fileExists(real) {
		cases = append(cases, struct {
			name, draft string
			code        int
			want        string
		}{"vocabulary", real, 2, "another vocabulary"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runApp(t, &app{cfg: testConfig(t)}, "generate", "-m", m, "--device", "cpu", "--greedy", "-n", "4", "--draft", c.draft, "hi")
			wantOneLineFailure(t, stdout, stderr, code, c.code, c.want)
			if strings.Contains(stderr, "panic") {
				t.Errorf("a panic: %s", stderr)
			}
		})
	}
	for _, args := range [][]string{{"--draft-n", "3"}, {"--draft", "lookup", "--draft-n", "0"}} {
		stdout, stderr, code := runApp(t, &app{cfg: testConfig(t)}, append([]string{"generate", "-m", m, "--device", "cpu", "hi"}, args...)...)
		wantOneLineFailure(t, stdout, stderr, code, 2, "--draft")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// bench --draft: the tg test generates and carries what the drafts did;
// the pp test and a bench without --draft carry nothing of it.
func TestBench_DraftWritesAcceptanceAndTokensPerForward(t *testing.T) {
	m := synthShape(t, "qwen2-tiny", 1)
	for _, d := range []string{m, "lookup"} {
		stdout, stderr, code := runApp(t, &app{cfg: testConfig(t)}, "bench", "-m", m, "--device", "cpu", "-p", "8", "-n", "12", "-r", "2", "--draft", d, "--draft-n", "3", "--format", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var doc schema.Bench
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatal(err)
		}
		pp, _ := doc.Test("pp")
		tg, ok := doc.Test("tg")
		if !ok || pp.Speculative != nil || tg.Speculative == nil {
			t.Fatalf("--draft %s: tests %+v", d, doc.Tests)
		}
		s := tg.Speculative
		if s.K != 3 || s.Drafted < s.Accepted || s.TargetForwards < 1 || s.TokensPerForward < 1 || len(tg.TokS) != 2 {
			t.Errorf("--draft %s: %+v", d, s)
		}
		if d == m && (s.AcceptanceRate != 1 || s.TokensPerForward < 3) {
			t.Errorf("the model drafting for itself: %+v", s)
		}
	}
}

// chat --draft answers what chat answers, and --stats says what the drafts
// did.
func TestChat_DraftAnswersAsWithout(t *testing.T) {
	m := synthModel(t)
	script := filepath.Join(t.TempDir(), "turns.txt")
	if err := os.WriteFile(script, []byte("def add(a, b):\n---\nand again\n---\nthird\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"chat", "-m", m, "--device", "cpu", "--ctx", "256", "--greedy", "-n", "12", "--script", script, "--stats"}
	plain, errOut, code := runAppIn(t, "", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, d := range []string{m, "lookup"} {
		out, errOut, code := runAppIn(t, "", append(args, "--draft", d)...)
		if code != 0 {
			t.Fatalf("--draft %s: exit %d: %s", d, code, errOut)
		}
		if out != plain {
			t.Errorf("--draft %s answered\n%s\nwithout\n%s", d, out, plain)
		}
		if n := strings.Count(errOut, ", drafts ("+d+") accepted"); n != 3 {
			t.Errorf("--draft %s: %d turn stats lines with the drafts, want 3:\n%s", d, n, errOut)
		}
	}
}

// A session saved by a drafted run is byte for byte the one a plain run
// saves (the rejected drafts' cells are past the context), and continuing
// it with drafts continues as the plain run does.
func TestGenerate_DraftSavesTheSessionAPlainRunSaves(t *testing.T) {
	m := synthShape(t, "qwen2-tiny", 1)
	dir := t.TempDir()
	run := func(session string, extra ...string) string {
		var text string
		for _, prompt := range []string{"def add(a, b):", ""} {
			args := []string{"generate", "-m", m, "--device", "cpu", "--greedy", "-n", "10", "--session", session}
			if prompt != "" {
				args = append(args, prompt)
			}
			stdout, stderr, code := runApp(t, &app{cfg: testConfig(t)}, append(args, extra...)...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
			text += stdout
		}
		return text
	}
	plain := run(filepath.Join(dir, "plain.session"))
	drafted := run(filepath.Join(dir, "drafted.session"), "--draft", m, "--draft-n", "3")
	if drafted != plain {
		t.Errorf("drafted %q, plain %q", drafted, plain)
	}
	a, errA := os.ReadFile(filepath.Join(dir, "plain.session"))
	b, errB := os.ReadFile(filepath.Join(dir, "drafted.session"))
	if errA != nil || errB != nil || !slices.Equal(a, b) {
		t.Errorf("the session files differ (%v, %v)", errA, errB)
	}
}

// bench --turns --draft: every turn carries what its drafts did.
func TestBenchTurns_DraftPerTurn(t *testing.T) {
	m := synthShape(t, "qwen2-tiny", 1)
	stdout, stderr, code := runApp(t, &app{cfg: testConfig(t)}, "bench", "-m", m, "--device", "cpu", "--turns", "2", "-n", "8", "-r", "2", "--draft", "lookup", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc schema.Bench
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 2; k++ {
		turn, ok := doc.Turn(k)
		if !ok || turn.Speculative == nil || turn.Speculative.Draft != "lookup" || turn.Speculative.TargetForwards < 1 {
			t.Errorf("turn %d: %+v", k, turn)
		}
	}
}

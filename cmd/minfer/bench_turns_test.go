package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/schema"
)

// bench --turns times every turn of a conversation: its time to first
// token and its decode rate, for every repetition; a turn forwards its own
// tokens only (the conversation is never prefilled again).
func TestBenchTurns_TimesEveryTurnOfOneConversation(t *testing.T) {
	m := synthModel(t)
	out, errOut, code := runCLI(t, testConfig(t), "bench", "-m", m, "--device", "cpu", "--turns", "3", "-n", "5", "-r", "2", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var b schema.Bench
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatal(err)
	}
	if b.Turns != 3 || len(b.Tests) != 3 || b.NGen != 5 || b.NPrompt != 0 {
		t.Fatalf("turns %d, %d tests, n_gen %d, n_prompt %d", b.Turns, len(b.Tests), b.NGen, b.NPrompt)
	}
	held := 0 // tokens of the conversation before the turn
	for i, tt := range b.Tests {
		if tt.Name != "turn"+string(rune('1'+i)) || tt.NTokens != 4 || len(tt.TTFTMS) != 2 || len(tt.TokS) != 2 || len(tt.SamplesMS) != 2 || tt.MeanTokS <= 0 {
			t.Errorf("test %d: %+v", i, tt)
		}
		if tt.PromptTokens <= 0 || (i > 0 && tt.PromptTokens >= held) {
			t.Errorf("%s forwarded %d tokens after a conversation of %d: want its own tokens only", tt.Name, tt.PromptTokens, held)
		}
		held += tt.PromptTokens + 5
	}
	if _, ok := b.Test("pp"); ok {
		t.Error("a conversation bench has a pp test")
	}
	if _, ok := b.Test("tg"); ok {
		t.Error("a conversation bench has a tg test")
	}
}

func TestBenchTurns_BadFlagsAreOneLine(t *testing.T) {
	m := synthModel(t)
	empty := filepath.Join(t.TempDir(), "empty.txt")
	os.WriteFile(empty, []byte("---\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--turns", "-1"}, "--turns -1: want at least one turn"},
		{[]string{"--script", empty}, "--turns 0: want at least one turn"},
		{[]string{"--turns", "2", "--script", empty}, "the script holds no turn"},
		{[]string{"--turns", "2", "-p", "8"}, "-p: a conversation's prompts are its turns"},
		{[]string{"--turns", "2", "-d", "8"}, "-d: a conversation starts from an empty context"},
		{[]string{"--turns", "2", "-n", "1"}, "-n 1: want at least 2 answer tokens"},
	} {
		args := append([]string{"bench", "-m", m, "--device", "cpu", "--format", "json"}, c.args...)
		out, errOut, code := runCLI(t, testConfig(t), args...)
		if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args, code, out, errOut, c.want)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// runAppIn is runApp with stdin.
func runAppIn(t *testing.T, in string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&app{cfg: testConfig(t)})
	root.SetIn(strings.NewReader(in))
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		errb.WriteString("minfer: " + err.Error() + "\n")
		code = exitCode(err)
	}
	return out.String(), errb.String(), code
}

var turnStatsRE = regexp.MustCompile(`turn (\d+): (\d+) tokens forwarded, (\d+) answered \((eog|limit)\), first token [0-9.]+ ms, decode [0-9.]+ tok/s, context (\d+) of 256`)

// Each turn of a chat forwards its own tokens only: the context grows by
// what the turn forwarded and what the previous answer left, never by the
// conversation again.
func TestChat_ScriptTurnsAppendToTheContext(t *testing.T) {
	m := synthModel(t)
	script := filepath.Join(t.TempDir(), "turns.txt")
	if err := os.WriteFile(script, []byte("hello there\n---\nand again\n---\nthird\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runAppIn(t, "", "chat", "-m", m, "--device", "cpu", "--ctx", "256", "--greedy", "-n", "5", "--script", script, "--stats")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, turn := range []string{"> hello there\n", "> and again\n", "> third\n"} {
		if !strings.Contains(out, turn) {
			t.Errorf("stdout lacks %q:\n%s", turn, out)
		}
	}
	stats := turnStatsRE.FindAllStringSubmatch(errOut, -1)
	if len(stats) != 3 {
		t.Fatalf("%d turn stats lines, want 3:\n%s", len(stats), errOut)
	}
	prev := 0
	for i, s := range stats {
		fed, _ := strconv.Atoi(s[2])
		answered, _ := strconv.Atoi(s[3])
		ctx, _ := strconv.Atoi(s[5])
		// The context holds everything before, the turn and the answer but
		// its last token (pending; forwarded by the next turn).
		if ctx != prev+fed+answered-1 || (i > 0 && fed >= ctx/2) {
			t.Errorf("turn %d: forwarded %d, answered %d, context %d after %d", i+1, fed, answered, ctx, prev)
		}
		prev = ctx
	}
}

// Without --script the turns are stdin's lines; empty lines are skipped
// and /exit ends the chat.
func TestChat_StdinLinesAreTurns(t *testing.T) {
	m := synthModel(t)
	out, errOut, code := runAppIn(t, "one\n\ntwo\n/exit\nthree\n", "chat", "-m", m, "--device", "cpu", "--ctx", "256", "--greedy", "-n", "3", "--stats")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := len(turnStatsRE.FindAllString(errOut, -1)); n != 2 {
		t.Errorf("%d turns, want 2 (two lines before /exit):\n%s", n, errOut)
	}
	if strings.Contains(out, "> ") {
		t.Errorf("stdin is no terminal: no prompt wanted; stdout %q", out)
	}
}

// Bad input is one line and exit 2; a conversation past the context is one
// line naming it and exit 1.
func TestChat_BadInputIsOneLine(t *testing.T) {
	m := synthModel(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("\n---\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--script", filepath.Join(dir, "absent.txt")}, 2, "--script: open"},
		{[]string{"--script", empty}, 2, "the script holds no turn"},
		{[]string{"--template", "llama3"}, 2, `--template "llama3": want auto or chatml`},
		{[]string{"-n", "0"}, 2, "-n 0: want at least one answer token"},
		{[]string{"--temp", "-1", "--top-p", "2"}, 2, "top"},
	} {
		args := append([]string{"chat", "-m", m, "--device", "cpu", "--ctx", "256"}, c.args...)
		out, errOut, code := runAppIn(t, "hi\n", args...)
		if code != c.code || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
	_, errOut, code := runAppIn(t, "hi\n"+strings.Repeat("word ", 300)+"\n", "chat", "-m", m, "--device", "cpu", "--ctx", "64", "--greedy", "-n", "2")
	if code != 1 || !strings.Contains(errOut, "turn 2: chat: the turn's") || !strings.Contains(errOut, "the context is full") {
		t.Errorf("a turn past the context: exit %d, %q", code, errOut)
	}
}

// --session: a chat saved at its end continues in the next run, appending
// its first turn to the restored conversation.
func TestChat_SessionContinuesTheConversation(t *testing.T) {
	m := synthModel(t)
	sess := filepath.Join(t.TempDir(), "chat.session")
	args := []string{"chat", "-m", m, "--device", "cpu", "--ctx", "256", "--greedy", "-n", "4", "--stats", "--session", sess}
	_, errOut, code := runAppIn(t, "first\n", args...)
	if code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errOut)
	}
	first := turnStatsRE.FindStringSubmatch(errOut)
	_, errOut, code = runAppIn(t, "second\n", args...)
	if code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errOut)
	}
	second := turnStatsRE.FindStringSubmatch(errOut)
	if first == nil || second == nil {
		t.Fatalf("no stats: %q", errOut)
	}
	c1, _ := strconv.Atoi(first[5])
	fed, _ := strconv.Atoi(second[2])
	answered, _ := strconv.Atoi(second[3])
	c2, _ := strconv.Atoi(second[5])
	if c2 != c1+fed+answered-1 {
		t.Errorf("second run: context %d, want the restored %d + %d forwarded + %d answered - 1", c2, c1, fed, answered)
	}
	if _, errOut, code := runAppIn(t, "x\n", append(args, "--system", "be brief")...); code != 2 || !strings.Contains(errOut, "--system starts a conversation") {
		t.Errorf("--system on a restored chat: exit %d, %q", code, errOut)
	}
}

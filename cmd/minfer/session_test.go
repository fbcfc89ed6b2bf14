package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
	"github.com/minfer-go/minfer/schema"
)

// sessionGen runs generate with --json and decodes the document.
func sessionGen(t *testing.T, cfg levers.Config, args ...string) schema.Generate {
	t.Helper()
	out, errs, code := runCLI(t, cfg, append([]string{"generate", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("generate %v: exit %d: %s", args, code, errs)
	}
	var g schema.Generate
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("generate %v: %v\n%s", args, err, out)
	}
	return g
}

func idList(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// Generating 5 tokens into a session and 7 more from it (the same command
// line, no prompt) draws the 12 tokens one run draws: the sampler's
// generator and the context continue. The JSON says what was restored and
// saved; text mode streams the continuation only.
func TestGenerate_SessionContinuesLikeTheRunThatNeverStopped(t *testing.T) {
	m, cfg := synthModel(t), testConfig(t)
	file := filepath.Join(t.TempDir(), "s.session")
	base := []string{"--model", m, "--device", "cpu", "--seed", "3", "--temp", "0.9", "--top-k", "20", "--repeat-penalty", "1.1"}
	whole := sessionGen(t, cfg, append(slices.Clone(base), "-n", "12", "def main():")...)
	if len(whole.IDs) != 12 {
		t.Fatalf("the uninterrupted run ended after %d tokens: pick a prompt that runs 12", len(whole.IDs))
	}
	first := sessionGen(t, cfg, append(slices.Clone(base), "-n", "5", "--session", file, "def main():")...)
	if first.Session == nil || first.Session.RestoredTokens != 0 || first.Session.SavedTokens != first.NPrompt+5 {
		t.Fatalf("first run's session %+v (n_prompt %d)", first.Session, first.NPrompt)
	}
	second := sessionGen(t, cfg, append(slices.Clone(base), "-n", "7", "--session", file)...)
	if got := append(slices.Clone(first.IDs), second.IDs...); !slices.Equal(got, whole.IDs) {
		t.Fatalf("5 + 7 tokens through a session %v, one run %v", got, whole.IDs)
	}
	if s := second.Session; s == nil || s.RestoredTokens != first.NPrompt+5 || s.SavedTokens != first.NPrompt+12 || second.NPrompt != 0 {
		t.Fatalf("second run's session %+v, n_prompt %d", s, second.NPrompt)
	}
	// The same in text mode: the second run streams the continuation only.
	text := func(args ...string) string {
		out, errs, code := runCLI(t, cfg, append(append([]string{"generate"}, base...), args...)...)
		if code != 0 || !strings.HasSuffix(out, "\n") {
			t.Fatalf("%v: exit %d, %q: %s", args, code, out, errs)
		}
		return strings.TrimSuffix(out, "\n")
	}
	file2 := filepath.Join(t.TempDir(), "t.session")
	if a, b, all := text("-n", "5", "--session", file2, "def main():"), text("-n", "7", "--session", file2), text("-n", "12", "def main():"); a+b != all {
		t.Fatalf("text mode: %q + %q, one run %q", a, b, all)
	}
}

// A prompt given with a session is appended to the restored context: the
// tokens are those of one run over the whole context (prompt, generated
// tokens, the new prompt, encoded without BOS), greedily.
func TestGenerate_SessionAppendsThePromptToTheContext(t *testing.T) {
	m, cfg := synthModel(t), testConfig(t)
	file := filepath.Join(t.TempDir(), "s.session")
	a := sessionGen(t, cfg, "--model", m, "--device", "cpu", "--greedy", "-n", "4", "--session", file, "def f():")
	b := sessionGen(t, cfg, "--model", m, "--device", "cpu", "--greedy", "-n", "4", "--session", file, "    return 1")
	ctx := append(append(slices.Clone(a.PromptIDs), a.IDs...), b.PromptIDs...)
	one := sessionGen(t, cfg, "--model", m, "--device", "cpu", "--greedy", "-n", "4", "--ids", idList(ctx))
	if !slices.Equal(b.IDs, one.IDs) {
		t.Fatalf("after the session %v, one run over the whole context %v", b.IDs, one.IDs)
	}
	if b.Session.RestoredTokens != len(a.PromptIDs)+len(a.IDs) || b.Session.SavedTokens != len(ctx)+len(b.IDs) {
		t.Fatalf("session %+v", b.Session)
	}
}

// Bad session files: one line naming the field, exit 2, nothing on
// stdout, the file byte for byte as it was and nothing written beside it.
func TestGenerate_BadSessionFilesFailInOneLineAndStayUntouched(t *testing.T) {
	m, cfg := synthModel(t), testConfig(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.session")
	sessionGen(t, cfg, "--model", m, "--device", "cpu", "--greedy", "-n", "3", "--session", good, "def f():")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.gguf")
	if err := synth.Write(other, synth.Options{Shape: "qwen2-tiny", Type: quant.F16, Seed: 2, Workers: 1}); err != nil {
		t.Fatal(err)
	}
	f16 := cfg
	f16.CacheType = "f16"
	fixHeader := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[128:], crc32.Checksum(b[:128], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	flip := func(at int) []byte { b := bytes.Clone(data); b[at] ^= 0x10; return b }
	newer := fixHeader(bytes.Clone(data))
	binary.LittleEndian.PutUint32(newer[8:], 2)
	newer = fixHeader(newer)
	for _, c := range []struct {
		name  string
		file  []byte // nil: the good file
		cfg   levers.Config
		model string
		extra []string
		want  string
	}{
		{"another model", nil, cfg, other, nil, "model_sha256: the file is of model"},
		{"another KV format", nil, f16, m, nil, "kv_format: the file has f32, this run uses f16"},
		{"another context", nil, cfg, m, []string{"--ctx", "64"}, "n_ctx: the file has 4096, this run uses 64"},
		{"a newer version", newer, cfg, m, nil, "version: the file is format version 2"},
		{"truncated", data[:len(data)/2], cfg, m, nil, "kv: truncated"},
		{"a bit flipped in the KV cells", flip(len(data) / 2), cfg, m, nil, "kv: checksum mismatch"},
		{"a bit flipped in the header", flip(100), cfg, m, nil, "header: checksum mismatch"},
		{"a bit flipped in the tokens", flip(150), cfg, m, nil, "tokens: checksum mismatch"},
		{"not a session", []byte("def f():\n    return 1\n"), cfg, m, nil, "magic: not a minfer session file"},
		{"empty", []byte{}, cfg, m, nil, "header: truncated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			path := filepath.Join(d, "s.session")
			b := data
			if c.file != nil {
				b = c.file
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"generate", "--model", c.model, "--device", "cpu", "--greedy", "-n", "2", "--session", path}, c.extra...)
			stdout, stderr, code := runCLI(t, c.cfg, append(args, "x = 1")...)
			wantOneLineFailure(t, stdout, stderr, code, 2, "session "+path+": "+c.want)
			if now, err := os.ReadFile(path); err != nil || !bytes.Equal(now, b) {
				t.Errorf("the session file changed (%v)", err)
			}
			if ents, _ := os.ReadDir(d); len(ents) != 1 {
				t.Errorf("%d files beside the session, want none", len(ents)-1)
			}
		})
	}
}

// --session-readonly restores and never writes: two runs give the same
// tokens and leave the file as it was. Flags that cannot go together are
// usage errors.
func TestGenerate_SessionReadonlyAndFlagErrors(t *testing.T) {
	m, cfg := synthModel(t), testConfig(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "s.session")
	sessionGen(t, cfg, "--model", m, "--device", "cpu", "--seed", "1", "-n", "3", "--session", file, "def f():")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var runs [2]schema.Generate
	for i := range runs {
		runs[i] = sessionGen(t, cfg, "--model", m, "--device", "cpu", "-n", "4", "--session", file, "--session-readonly", "x")
		if now, _ := os.ReadFile(file); !bytes.Equal(now, data) {
			t.Fatalf("run %d wrote the read-only session", i)
		}
	}
	if !slices.Equal(runs[0].IDs, runs[1].IDs) || runs[0].Session.SavedTokens != 0 {
		t.Fatalf("read-only runs: %v and %v, saved %d", runs[0].IDs, runs[1].IDs, runs[0].Session.SavedTokens)
	}
	missing := filepath.Join(dir, "absent.session")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--session-readonly", "x"}, "--session-readonly needs --session FILE"},
		{[]string{"--session", missing, "--session-readonly", "x"}, "does not exist"},
		{[]string{"--session", file, "--repeat", "2", "x"}, "not with --session"},
		{[]string{"--session", missing}, "give a prompt"},
	} {
		stdout, stderr, code := runCLI(t, cfg, append([]string{"generate", "--model", m, "--device", "cpu"}, c.args...)...)
		wantOneLineFailure(t, stdout, stderr, code, 2, c.want)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("a failed run created the session file")
	}
}

// noSessions is an engine whose KV backend cannot copy cells (a device
// backend without graph.KVCells).
type noSessions struct{ *model.Engine }

func (noSessions) SessionSupport() error {
	return errors.New("session: save or restore: the fakedev backend cannot copy KV cells to or from the host")
}

// On such a backend --session stops before generating anything, in one
// line naming the backend, and writes no file.
func TestGenerate_SessionOnABackendWithoutKVCellsFailsBeforeGenerating(t *testing.T) {
	m := synthModel(t)
	file := filepath.Join(t.TempDir(), "s.session")
	a := &app{cfg: testConfig(t), wrap: func(e lm) lm { return noSessions{e.(*model.Engine)} }}
	stdout, stderr, code := runApp(t, a, "generate", "--model", m, "--device", "cpu", "-n", "4", "--session", file, "def f():")
	wantOneLineFailure(t, stdout, stderr, code, 1, "the fakedev backend cannot copy KV cells")
	if _, err := os.Stat(file); err == nil {
		t.Error("the session file was written")
	}
}

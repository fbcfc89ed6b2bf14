package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/schema"
)

// flakyLM gives, in its run number bad (runs counted by Reset), logits in
// which the runner-up of every row beats the top by 1: what a graph replay
// that computed something else would look like.
type flakyLM struct {
	lm
	bad, run int
}

func (f *flakyLM) Reset() { f.run++; f.lm.Reset() }

func (f *flakyLM) Forward(tokens []int32, all bool) ([]float32, error) {
	out, err := f.lm.Forward(tokens, all)
	if err != nil || f.run != f.bad {
		return out, err
	}
	n := f.HParams().NVocab
	for r := 0; r+n <= len(out); r += n {
		row := out[r : r+n]
		top, second := 0, 1
		if row[second] > row[top] {
			top, second = second, top
		}
		for i, v := range row[2:] {
			switch {
			case v > row[top]:
				top, second = i+2, top
			case v > row[second]:
				second = i + 2
			}
		}
		row[second] = row[top] + 1
	}
	return out, nil
}

func (f *flakyLM) ForwardInto(_ []float32, tokens []int32, all bool) ([]float32, error) {
	return f.Forward(tokens, all)
}

func flakyApp(t *testing.T, bad int) *app {
	return &app{cfg: testConfig(t), wrap: func(e lm) lm { return &flakyLM{lm: e, bad: bad} }}
}

// logits --repeat N prints the last of N runs from an empty context (the
// same document as one run) and refuses, with one line and nothing on
// stdout, a run whose logits differ bitwise from the first.
func TestLogits_RepeatPrintsTheLastRunAndRefusesADifferingRun(t *testing.T) {
	m := synthModel(t)
	cfg := testConfig(t)
	args := []string{"logits", "--model", m, "--device", "cpu", "--ids", "5,6,7,8", "--top", "3", "--json"}
	one, stderr, code := runCLI(t, cfg, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	four, stderr, code := runCLI(t, cfg, append(args, "--repeat", "4")...)
	if code != 0 || four != one {
		t.Fatalf("--repeat 4: exit %d (%s), stdout\n%s\nwant the single run's\n%s", code, stderr, four, one)
	}
	// The 4th run (the first replay of a CUDA graph) differs: refused.
	stdout, stderr, code := runApp(t, flakyApp(t, 4), append(args, "--repeat", "4")...)
	wantOneLineFailure(t, stdout, stderr, code, 1, "run 4's logits differ from run 1's")
	// Three runs never reach the flaky fourth: the check is not vacuous.
	if _, stderr, code := runApp(t, flakyApp(t, 4), append(args, "--repeat", "3")...); code != 0 {
		t.Fatalf("--repeat 3 with run 4 flaky: exit %d: %s", code, stderr)
	}
	stdout, stderr, code = runCLI(t, cfg, append(args, "--repeat", "0")...)
	wantOneLineFailure(t, stdout, stderr, code, 2, "--repeat 0")
}

func generateJSON(t *testing.T, a *app, args ...string) schema.Generate {
	t.Helper()
	stdout, stderr, code := runApp(t, a, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	var r schema.Generate
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stdout)
	}
	return r
}

// generate --repeat N runs the whole generation N times (sampled too: each
// run starts its sampler from the seed) and prints the last; ids that
// differ between runs are one error line, nothing on stdout.
func TestGenerate_RepeatPrintsTheLastRunAndRefusesDifferingIDs(t *testing.T) {
	m := synthModel(t)
	base := []string{"generate", "--model", m, "--device", "cpu", "-n", "6", "--seed", "3", "--temp", "0.8"}
	one := generateJSON(t, &app{cfg: testConfig(t)}, append(base, "--json", "def f():")...)
	four := generateJSON(t, &app{cfg: testConfig(t)}, append(base, "--json", "--repeat", "4", "def f():")...)
	if !equalIDs(one.IDs, four.IDs) || one.Text != four.Text || len(one.IDs) == 0 {
		t.Fatalf("--repeat 4 ids %v %q, one run %v %q", four.IDs, four.Text, one.IDs, one.Text)
	}
	// Text mode prints the last run once, after the check.
	text, stderr, code := runCLI(t, testConfig(t), append(base, "--repeat", "3", "def f():")...)
	if code != 0 || text != one.Text+"\n" {
		t.Fatalf("--repeat 3 text: exit %d (%s), %q, want %q", code, stderr, text, one.Text+"\n")
	}
	for _, mode := range [][]string{{"--json"}, {}} {
		args := append(append(append([]string{}, base...), mode...), "--greedy", "--repeat", "4", "def f():")
		stdout, stderr, code := runApp(t, flakyApp(t, 4), args...)
		wantOneLineFailure(t, stdout, stderr, code, 1, "--repeat: run 4 generated")
	}
	stdout, stderr, code := runCLI(t, testConfig(t), append(base, "--repeat", "0", "x")...)
	wantOneLineFailure(t, stdout, stderr, code, 2, "--repeat 0")
}

// generate --ids takes the prompt as token ids: the same ids as a text
// prompt encodes to give the same generation; text and --ids together,
// --ids with --chat and a bad id are usage errors.
func TestGenerate_IDsPromptEqualsTheTextItEncodes(t *testing.T) {
	m := synthModel(t)
	base := []string{"generate", "--model", m, "--device", "cpu", "--greedy", "-n", "5", "--json"}
	text := generateJSON(t, &app{cfg: testConfig(t)}, append(base, "def main():")...)
	ids := make([]string, len(text.PromptIDs))
	for i, id := range text.PromptIDs {
		ids[i] = fmt.Sprint(id)
	}
	byID := generateJSON(t, &app{cfg: testConfig(t)}, append(base, "--ids", strings.Join(ids, ","))...)
	if !equalIDs(byID.PromptIDs, text.PromptIDs) || !equalIDs(byID.IDs, text.IDs) || byID.Prompt != "" {
		t.Fatalf("--ids %v: prompt %q ids %v, text prompt ids %v", byID.PromptIDs, byID.Prompt, byID.IDs, text.IDs)
	}
	cfg := testConfig(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--ids", "1,2", "hello"}, 2, "not both"},
		{[]string{"--ids", "1,2", "--chat"}, 2, "--chat"},
		{[]string{"--ids", "1,x"}, 2, `"x" is not a token id`},
		{[]string{"--ids", "99999999"}, 1, "outside the vocabulary"},
	} {
		stdout, stderr, code := runCLI(t, cfg, append(base, c.args...)...)
		wantOneLineFailure(t, stdout, stderr, code, c.code, c.want)
	}
}

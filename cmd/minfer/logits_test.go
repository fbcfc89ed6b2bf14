package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/schema"
)

func TestLogits_JSONTopKMatchesOutputFile(t *testing.T) {
	m := synthModel(t)
	outFile := filepath.Join(t.TempDir(), "logits.f32")
	stdout, stderr, code := runCLI(t, testConfig(t), "logits", "--model", m, "--device", "cpu", "--ids", "1, 2,3",
		"--top", "4", "-o", outFile, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res schema.Logits
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if len(res.Positions) != 3 || res.NVocab <= 4 {
		t.Fatalf("%d positions, n_vocab %d", len(res.Positions), res.NVocab)
	}
	raw, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 3*res.NVocab*4 {
		t.Fatalf("-o holds %d bytes, want 3 rows of %d f32", len(raw), res.NVocab)
	}
	for p, pos := range res.Positions {
		if pos.Pos != p || len(pos.Top) != 4 {
			t.Fatalf("position %d: %+v", p, pos)
		}
		row := make([]float32, res.NVocab)
		for i := range row {
			row[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(p*res.NVocab+i):]))
		}
		want := topK(row, 4)
		for i, x := range pos.Top {
			if x != want[i] {
				t.Fatalf("position %d top[%d] = %+v, the file says %+v", p, i, x, want[i])
			}
		}
		if got := pos.Top[0].Logit - pos.Top[1].Logit; got != pos.Top2Margin {
			t.Errorf("position %d: top2_margin %g, top-2 gap %g", p, pos.Top2Margin, got)
		}
	}
}

func TestLogits_BadInputsFailWithOneLine(t *testing.T) {
	m := synthModel(t)
	cfg := testConfig(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"logits", "--model", m}, 2, "exactly one of --prompt and --ids"},
		{[]string{"logits", "--model", m, "--prompt", "x", "--ids", "1"}, 2, "exactly one"},
		{[]string{"logits", "--model", m, "--ids", "1,a"}, 2, `"a" is not a token id`},
		{[]string{"logits", "--model", m, "--device", "cpu", "--ids", "1,99999999"}, 1, "outside the vocabulary"},
		{[]string{"logits", "--model", m, "--device", "cpu", "--ids", "1,2,3", "--ctx", "2"}, 1, "do not fit the context"},
		{[]string{"logits", "--model", m, "--device", "gpu", "--ids", "1"}, 2, "--device"},
		{[]string{"logits", "--model", m, "--ids", "1", "--out", "a.f32", "-o", "b.f32"}, 2, "give the rows file once"},
	}
	for _, c := range cases {
		stdout, stderr, code := runCLI(t, cfg, c.args...)
		wantOneLineFailure(t, stdout, stderr, code, c.code, c.want)
	}
}

// --out, the rows file's flag before -o/--output, still writes the rows,
// with a note on stderr.
func TestLogits_DeprecatedOutStillWritesTheRows(t *testing.T) {
	m := synthModel(t)
	dir := t.TempDir()
	rows := map[string][]byte{}
	for _, flag := range []string{"--out", "--output"} {
		file := filepath.Join(dir, flag[2:]+".f32")
		stdout, stderr, code := runCLI(t, testConfig(t), "logits", "--model", m, "--device", "cpu", "--ids", "1,2", flag, file, "--json")
		if code != 0 || stdout == "" {
			t.Fatalf("%s: exit %d: %s", flag, code, stderr)
		}
		if deprecated := strings.Contains(stderr, "--out is deprecated"); deprecated != (flag == "--out") {
			t.Errorf("%s: stderr %q", flag, stderr)
		}
		if rows[flag], _ = os.ReadFile(file); len(rows[flag]) == 0 {
			t.Fatalf("%s wrote no rows", flag)
		}
	}
	if string(rows["--out"]) != string(rows["--output"]) {
		t.Error("--out and --output wrote different rows")
	}
}

func TestTopK_OrdersByLogitThenLowerID(t *testing.T) {
	nan := float32(math.NaN())
	got := topK([]float32{1, 3, nan, 3, 2, 5, 3}, 4)
	want := []schema.TopLogit{{ID: 5, Logit: 5}, {ID: 1, Logit: 3}, {ID: 3, Logit: 3}, {ID: 6, Logit: 3}}
	if len(got) != len(want) {
		t.Fatalf("topK = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("topK = %v, want %v", got, want)
		}
	}
	if got := topK([]float32{1, 2}, 5); len(got) != 2 || got[0].ID != 1 {
		t.Fatalf("k > n: %v", got)
	}
	if got := topK([]float32{1, 2}, 0); len(got) != 0 {
		t.Fatalf("k = 0: %v", got)
	}
}

package model

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// MINFER_GRAPH_DUMP writes every node output of a forward; the dumped final
// output equals the logits Forward returns, and the instrumented run gives
// bitwise the logits of a plain run.
func TestGraphDump_WritesEveryNodeAndTheLogitsMatchAPlainRun(t *testing.T) {
	dir := t.TempDir()
	plain := loadTiny(t, tinyQwen2, mustEnv(t))
	want, err := plain.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	e := loadTiny(t, tinyQwen2, mustEnv(t, "MINFER_GRAPH_DUMP=1", "MINFER_DUMP_DIR="+dir))
	got, err := e.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got, want); d != 0 {
		t.Fatalf("instrumented logits differ from a plain run by %g", d)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "index.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(idx)), "\n")
	if len(lines) < 10 {
		t.Fatalf("index.tsv has %d lines, want one per node with an output", len(lines))
	}
	last := strings.Split(lines[len(lines)-1], "\t")
	raw, err := os.ReadFile(filepath.Join(dir, last[len(last)-1]))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 4*len(want) {
		t.Fatalf("last dumped node %q has %d values, the logits %d", last[3], len(raw)/4, len(want))
	}
	for i := range want {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); v != want[i] {
			t.Fatalf("dumped logit %d = %v, Forward returned %v", i, v, want[i])
		}
	}
}

func TestGraphDump_WithoutDumpDirIsAnError(t *testing.T) {
	_, err := Load(writeTiny(t, t.TempDir(), tinyQwen2), Options{Device: "cpu", Levers: mustEnv(t, "MINFER_GRAPH_DUMP=1")})
	if err == nil || !strings.Contains(err.Error(), "MINFER_DUMP_DIR") {
		t.Fatalf("err = %v, want one naming MINFER_DUMP_DIR", err)
	}
}

package runs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

// A lever of shard 1 carries its suite gate as deferred; the merge takes
// shard 0's run of it: a device-suite failure there turns the lever, and
// the night, red. Without shard 0 the gate stays undecided and says why.
func TestMerge_DeferredSuiteGateTakesShardZerosResult(t *testing.T) {
	root := t.TempDir()
	all := []string{"MINFER_A", "MINFER_B"}
	part := [][]string{{"MINFER_A"}, {"MINFER_B"}}
	pass := func(g string) gates.Result { return gates.Result{Gate: g, Status: gates.Pass} }
	rec := &gates.Record{Lever: "MINFER_B", A: "0", B: "1", Complete: true, Gates: []gates.Result{pass(gates.GateParity), pass(gates.GateGreedy), pass(gates.GateAB),
		{Gate: gates.GateSuite, Status: gates.Skip, DeferredTo: "0/2", Reason: "deferred"}, pass(gates.GateProfile)}}
	rec.Decide()
	if err := report.WriteFinal(filepath.Join(root, "s1", "MINFER_B", "r"), rec, nil); err != nil {
		t.Fatal(err)
	}
	write := func(i int, sum *gates.NightlySummary) {
		b, _ := json.Marshal(sum)
		d := filepath.Join(root, "s"+string(rune('0'+i)))
		_ = os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, gates.ShardFileBase("2026-12-01T00000"+string(rune('0'+i)), i, 2)+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := func(i int) *gates.NightlySummary {
		return &gates.NightlySummary{Date: "2026-12-01T00000" + string(rune('0'+i)), Machine: "NVIDIA H200", Commit: "abc", Complete: true,
			Shard: &gates.ShardInfo{Index: i, Count: 2, All: all, Partition: part, Balance: "by count"}}
	}
	s0 := base(0)
	s0.Entries = []gates.NightlyEntry{{Spec: "MINFER_A", Lever: "MINFER_A", Verdict: gates.VerdictPass}}
	s0.Shard.Suites = []gates.LeverSuite{{Lever: "MINFER_B", B: "1", Result: gates.Result{Gate: gates.GateSuite, Status: gates.Fail, Reason: "1 device test failed: TestX"}}}
	s1 := base(1)
	s1.Entries = []gates.NightlyEntry{{Spec: "MINFER_B", Lever: "MINFER_B", A: "0", B: "1", Verdict: rec.Verdict, Line: rec.VerdictLine, Report: "MINFER_B/r.md"}}
	write(0, s0)
	write(1, s1)

	m, _, err := Merge(context.Background(), filepath.Join(root, "out"), []string{filepath.Join(root, "s0"), filepath.Join(root, "s1")}, "abtest merge")
	if err != nil {
		t.Fatal(err)
	}
	if m.Verdict != gates.VerdictFail || m.Entries[1].Verdict != gates.VerdictFail || !strings.Contains(m.Entries[1].Line, "FAIL: suite") {
		t.Fatalf("night %s, lever B %s: %s", m.Verdict, m.Entries[1].Verdict, m.Entries[1].Line)
	}
	got, err := report.ReadJSON(filepath.Join(root, "out", "MINFER_B", "r.json"))
	if err != nil || got.Gates[3].Status != gates.Fail {
		t.Fatalf("the merged lever report: %v %+v", err, got)
	}

	// Shard 0 missing: B's suite gate cannot be decided, and says why.
	m, _, err = Merge(context.Background(), filepath.Join(root, "out2"), []string{filepath.Join(root, "s1")}, "abtest merge")
	if err != nil {
		t.Fatal(err)
	}
	if m.Verdict != gates.VerdictInconclusive || m.Entries[1].Verdict != gates.VerdictInconclusive || !strings.Contains(m.Entries[1].Line, "shard 0 is missing") {
		t.Fatalf("without shard 0: night %s, lever B %s: %s", m.Verdict, m.Entries[1].Verdict, m.Entries[1].Line)
	}
}

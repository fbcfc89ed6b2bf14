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

// The split reads the last night's lever times; the first night of a pool
// (the folder not there yet) splits by count; an unreadable source is an
// error, never a silent split by count.
func TestBalance_ByTheLastNightsTimesElseByCount(t *testing.T) {
	var items []nightlyItem
	for _, sp := range []string{"A", "B", "C", "D", "E", "F"} {
		items = append(items, nightlyItem{spec: sp})
	}
	sh := &gates.ShardInfo{Count: 2, SuiteEveryShard: true}
	if err := balance(sh, items, filepath.Join(t.TempDir(), "nightly"), "out", "", nil); err != nil || !strings.Contains(sh.Balance, "does not exist yet") || len(sh.Partition[0]) != 3 {
		t.Fatalf("first night: %v %q %v", err, sh.Balance, sh.Partition)
	}
	dir := t.TempDir()
	prev := gates.NightlySummary{Date: "2026-11-30T000000", Entries: []gates.NightlyEntry{{Lever: "A", B: "1", Seconds: 500}}}
	for _, l := range []string{"B", "C", "D", "E", "F"} {
		prev.Entries = append(prev.Entries, gates.NightlyEntry{Lever: l, B: "1", Seconds: 100})
	}
	b, _ := json.Marshal(prev)
	if err := os.WriteFile(filepath.Join(dir, "nightly-2026-11-30T000000.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sh = &gates.ShardInfo{Count: 2, SuiteEveryShard: true}
	if err := balance(sh, items, dir, "out", "", nil); err != nil || !strings.Contains(sh.Balance, "lever times of nightly-2026-11-30T000000.json") {
		t.Fatalf("by times: %v %q", err, sh.Balance)
	}
	if got := sh.Partition; len(got[0]) != 1 || got[0][0] != "A" {
		t.Errorf("the 500 s lever should run alone against five of 100 s: %v", got)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "nightly-2026-11-30T000000.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := balance(&gates.ShardInfo{Count: 2}, items, bad, "out", "", nil); ExitCode(err) != 2 {
		t.Errorf("an unreadable source: %v", err)
	}
}

package gates

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseShard_IndexFromZeroAutoReadsTheJobIndex(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == ShardEnv {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		in, envv string
		i, n     int
		bad      string
	}{
		{"0/3", "", 0, 3, ""}, {"2/3", "", 2, 3, ""}, {"auto/4", "3", 3, 4, ""},
		{"3/3", "", 0, 0, "from 0 to 2"}, {"-1/3", "", 0, 0, "from 0 to 2"}, {"1/0", "", 0, 0, ">= 1"},
		{"1", "", 0, 0, "want i/N"}, {"auto/3", "", 0, 0, "JOB_COMPLETION_INDEX is not set"}, {"auto/3", "7", 0, 0, "from 0 to 2"},
	} {
		i, n, err := ParseShard(c.in, env(c.envv))
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%s (env %q): err %v, want %q", c.in, c.envv, err, c.bad)
			}
			continue
		}
		if err != nil || i != c.i || n != c.n {
			t.Errorf("%s (env %q) = %d/%d %v", c.in, c.envv, i, n, err)
		}
	}
}

func TestPartition_EveryLeverOnceDeterministicAndBalancedByTime(t *testing.T) {
	var specs []string
	secs := map[string]float64{}
	for i := 0; i < 25; i++ {
		sp := fmt.Sprintf("L%02d", i)
		specs = append(specs, sp)
		secs[sp] = float64(60 + (i*37)%120) // 60..179 s
	}
	p := Partition(specs, secs, 4, 0)
	if q := Partition(specs, secs, 4, 0); !reflect.DeepEqual(p, q) {
		t.Fatal("two splits of the same input differ")
	}
	seen := map[string]int{}
	var loads []float64
	for _, part := range p {
		l := 0.0
		for j, sp := range part {
			seen[sp]++
			l += secs[sp]
			if j > 0 && part[j-1] > sp {
				t.Errorf("a shard's levers are not in the nightly's order: %v", part)
			}
		}
		loads = append(loads, l)
	}
	if len(seen) != len(specs) {
		t.Fatalf("split covers %d of %d levers", len(seen), len(specs))
	}
	for sp, c := range seen {
		if c != 1 {
			t.Errorf("%s in %d shards", sp, c)
		}
	}
	lo, hi := loads[0], loads[0]
	for _, l := range loads {
		lo, hi = min(lo, l), max(hi, l)
	}
	// LPT is within 4/3 of the optimum; the longest lever bounds the gap.
	if hi-lo > 179 {
		t.Errorf("shard loads %v: spread %.0f s beyond the longest lever", loads, hi-lo)
	}
	// By count when no time is known: 25 over 4 is 7,6,6,6.
	byCount := Partition(specs, nil, 4, 0)
	for k, want := range []int{7, 6, 6, 6} {
		if len(byCount[k]) != want {
			t.Errorf("by count: shard %d has %d levers, want %d", k, len(byCount[k]), want)
		}
	}
	// Shard 0's other work (the other shards' suites) takes levers off it.
	if pre := Partition(specs, nil, 4, 5); len(pre[0]) >= 6 {
		t.Errorf("shard 0 preloaded with 5 levers' work still has %d levers", len(pre[0]))
	}
}

func shardSum(i, n int, all []string, part [][]string, entries ...NightlyEntry) ShardResult {
	return ShardResult{Path: fmt.Sprintf("s%d/nightly-x-shard-%dof%d.json", i, i, n), Sum: &NightlySummary{
		Date: fmt.Sprintf("2026-12-01T00000%d", i), Machine: "NVIDIA H200", Commit: "abc", ModelSHA256: "m", PP: 512, TG: 128, Threshold: 0.02, Complete: true,
		Shard: &ShardInfo{Index: i, Count: n, All: all, Partition: part, Balance: "by count"}, Entries: entries}}
}

func TestMergeShards_MissingShardIsNamedInconclusiveAndAFailStaysAFail(t *testing.T) {
	all := []string{"A", "B", "C", "D"}
	part := [][]string{{"A", "C"}, {"B"}, {"D"}}
	e := func(sp, v string) NightlyEntry { return NightlyEntry{Spec: sp, Lever: sp, Verdict: v} }
	s0 := shardSum(0, 3, all, part, e("A", VerdictPass), e("C", VerdictFail))
	s1 := shardSum(1, 3, all, part, e("B", VerdictPass))
	s2 := shardSum(2, 3, all, part, e("D", VerdictPass))

	m, err := MergeShards([]ShardResult{s2, s0, s1})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, x := range m.Entries {
		order = append(order, x.Spec)
	}
	if !reflect.DeepEqual(order, all) || m.Date != "2026-12-01T000000" {
		t.Fatalf("merged order %v date %s: want the nightly's order and the first shard's start", order, m.Date)
	}
	m.Decide()
	if m.Verdict != VerdictFail {
		t.Fatalf("all shards, one FAIL: %s", m.Verdict)
	}

	// Shard 1 missing: named, its lever INCONCLUSIVE; shard 0's FAIL still wins.
	m, _ = MergeShards([]ShardResult{s0, s2})
	m.Decide()
	if m.Verdict != VerdictFail || !reflect.DeepEqual(m.Missing, []string{"1/3"}) || m.Entries[1].Verdict != VerdictInconclusive || !strings.Contains(m.Entries[1].Line, "shard 1/3 is missing") {
		t.Fatalf("missing shard 1: verdict %s missing %v entry %+v", m.Verdict, m.Missing, m.Entries[1])
	}
	// Without the failing shard the night cannot pass: INCONCLUSIVE.
	m, _ = MergeShards([]ShardResult{s1, s2})
	m.Decide()
	if m.Verdict != VerdictInconclusive || len(m.Entries) != 4 {
		t.Fatalf("missing shard 0: %s, %d entries", m.Verdict, len(m.Entries))
	}
	// A shard that stopped early: its unreached lever is INCOMPLETE.
	cut := shardSum(0, 3, all, part, e("A", VerdictPass))
	cut.Sum.Complete = false
	m, _ = MergeShards([]ShardResult{cut, s1, s2})
	m.Decide()
	if m.Verdict != VerdictIncomplete || m.Entries[2].Verdict != VerdictIncomplete {
		t.Fatalf("shard stopped early: %s, C %+v", m.Verdict, m.Entries[2])
	}
}

func TestMergeShards_RefusesShardsOfAnotherNightNamingTheField(t *testing.T) {
	all := []string{"A", "B"}
	part := [][]string{{"A"}, {"B"}}
	for field, spoil := range map[string]func(s *NightlySummary){
		"commit":              func(s *NightlySummary) { s.Commit = "def" },
		"machine (GPU model)": func(s *NightlySummary) { s.Machine = "NVIDIA A100" },
		"levers":              func(s *NightlySummary) { s.Shard.All = []string{"A", "B", "C"} },
		"shard count":         func(s *NightlySummary) { s.Shard.Count = 4 },
		"partition":           func(s *NightlySummary) { s.Shard.Partition = [][]string{{"B"}, {"A"}} },
		"shard index":         func(s *NightlySummary) { s.Shard.Index = 0 },
	} {
		a, b := shardSum(0, 2, all, part), shardSum(1, 2, all, part)
		spoil(b.Sum)
		_, err := MergeShards([]ShardResult{a, b})
		var inc *IncompatibleShards
		if !errors.As(err, &inc) || inc.Field != field {
			t.Errorf("%s: err %v", field, err)
		}
	}
	whole := shardSum(0, 2, all, part)
	whole.Sum.Shard = nil
	if _, err := MergeShards([]ShardResult{whole}); err == nil || !strings.Contains(err.Error(), "not a shard's") {
		t.Errorf("a whole night's summary merged: %v", err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/runs"
	"github.com/minfer-go/minfer/report"
)

// fakeGPU makes the fake minfer act as the CUDA backend (auto device) and
// puts a fake nvidia-smi first in PATH, so CUDA levers run.
func fakeGPU(t *testing.T) {
	t.Helper()
	smi := t.TempDir()
	if err := os.WriteFile(filepath.Join(smi, "nvidia-smi"), []byte("#!/bin/sh\necho 'name, driver_version, a, b, c, d, e, f'\necho 'NVIDIA H200, 580, 1980 MHz, 3201 MHz, 1980 MHz, 0x0, 40, 200 W'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", smi+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKEMINFER_GPU", "1")
}

type verdictRow struct{ Spec, Lever, A, B, Backend, Verdict string }

func verdictTable(s *gates.NightlySummary) []verdictRow {
	var rows []verdictRow
	for _, e := range s.Entries {
		rows = append(rows, verdictRow{e.Spec, e.Lever, e.A, e.B, e.Backend, e.Verdict})
	}
	return rows
}

// The done-when of sharding: a 3-shard nightly of six levers (one planted
// slower in arm B) merges to the verdict table of one unsharded run; a
// removed shard is named and makes the night INCONCLUSIVE, and the planted
// FAIL stays a FAIL whichever other shard is missing.
func TestNightly_ThreeShardsMergeToTheUnshardedVerdictTable(t *testing.T) {
	bin := fakeMinfer(t)
	fakeGPU(t)
	t.Setenv("FAKEMINFER_RATES", "4000,400") // exact rates: verdicts do not depend on noise
	t.Setenv("FAKEMINFER_SLOW_WHEN", "MINFER_PDL=1:0.10")
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_MMQ=;MINFER_NO_FUSE_FFN=;MINFER_NO_FUSE_QKV=")
	levers := "MINFER_MMQ,MINFER_NO_FUSE_FFN,MINFER_NO_FUSE_QKV,MINFER_CACHE_TYPE=f16,MINFER_NO_CUDA_GRAPH,MINFER_PDL"
	root := t.TempDir()
	dir := func(n string) string { return filepath.Join(root, n) }
	args := func(out string, extra ...string) []string {
		return append([]string{"nightly", "--minfer", bin, "--out", out, "--levers", levers, "--rounds", "5", "--pp", "16", "--tg", "4",
			"--reps", "1", "--warmup-ms", "10", "--bench-warmup-ms", "10"}, extra...)
	}

	if code := run(args(dir("whole"))); code != 1 {
		t.Fatalf("unsharded nightly with a planted FAIL: exit %d", code)
	}
	_, whole := readNightly(t, dir("whole"))
	if e := entry(whole, "MINFER_PDL"); e == nil || e.Verdict != gates.VerdictFail || !strings.Contains(e.Line, "FAIL: ab") {
		t.Fatalf("the planted lever: %+v", e)
	}

	// Three shards balanced by the unsharded night's times; shard 2 finds
	// its index as a Kubernetes pod does.
	for i, sh := range []string{"0/3", "1/3", "auto/3"} {
		if sh == "auto/3" {
			t.Setenv(gates.ShardEnv, "2")
		}
		code := run(args(dir("s"+string(rune('0'+i))), "--shard", sh, "--balance-from", dir("whole")))
		if code != 1 && code != 3 {
			t.Fatalf("shard %s: exit %d", sh, code)
		}
	}
	var parts [][]string
	for i := 0; i < 3; i++ {
		ms, _ := filepath.Glob(filepath.Join(dir("s"+string(rune('0'+i))), "nightly-*-shard-*of3.json"))
		if len(ms) != 1 {
			t.Fatalf("shard %d wrote %v", i, ms)
		}
		var s gates.NightlySummary
		b, _ := os.ReadFile(ms[0])
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if s.Shard == nil || s.Shard.Index != i || len(s.Shard.All) != 6 || s.Commit != whole.Commit || s.Machine != whole.Machine || !strings.Contains(s.Shard.Balance, "lever times of nightly-") {
			t.Fatalf("shard %d is not self-describing: %+v (commit %q machine %q)", i, s.Shard, s.Commit, s.Machine)
		}
		if parts == nil {
			parts = s.Shard.Partition
		} else if !reflect.DeepEqual(parts, s.Shard.Partition) {
			t.Fatalf("shards split differently: %v vs %v", parts, s.Shard.Partition)
		}
		if len(s.Entries) != len(s.Shard.Levers()) {
			t.Errorf("shard %d ran %d levers, its part has %d", i, len(s.Entries), len(s.Shard.Levers()))
		}
		if (i == 0) != (len(s.Shard.Suites) > 0) {
			t.Errorf("shard %d holds %d other levers' suite gates (shard 0 runs them all)", i, len(s.Shard.Suites))
		}
	}
	if code := run([]string{"merge", "--out", dir("merged"), dir("s0"), dir("s1"), dir("s2")}); code != 1 {
		t.Fatalf("merge: exit %d, want 1 (the planted FAIL)", code)
	}
	_, merged := readNightly(t, dir("merged"))
	if got, want := verdictTable(merged), verdictTable(whole); !reflect.DeepEqual(got, want) {
		t.Fatalf("merged verdict table\n%v\nunsharded\n%v", got, want)
	}
	page, _ := os.ReadFile(filepath.Join(dir("merged"), "nightly-"+merged.Date+".md"))
	if !strings.Contains(string(page), "## History (1 nights") {
		t.Errorf("the merged page has no history section:\n%s", page)
	}
	if _, err := os.Stat(filepath.Join(dir("merged"), "history", "history.md")); err != nil {
		t.Errorf("the merged night's history page: %v", err)
	}
	for _, e := range merged.Entries {
		rec, err := report.ReadJSON(filepath.Join(dir("merged"), strings.TrimSuffix(e.Report, ".md")+".json"))
		if err != nil {
			t.Fatalf("%s: the merged summary's report link: %v", e.Spec, err)
		}
		for _, g := range rec.Gates {
			if g.Gate == gates.GateSuite && g.DeferredTo != "" {
				t.Errorf("%s: suite gate still deferred after the merge: %s", e.Spec, g.Reason)
			}
		}
	}

	// A removed shard: named, never a silent gap.
	owner := map[string]int{}
	for k, p := range parts {
		for _, sp := range p {
			owner[sp] = k
		}
	}
	failing := owner["MINFER_PDL"]
	for k := 0; k < 3; k++ {
		var keep []string
		for j := 0; j < 3; j++ {
			if j != k {
				keep = append(keep, dir("s"+string(rune('0'+j))))
			}
		}
		out := dir("without" + string(rune('0'+k)))
		code := run(append([]string{"merge", "--out", out}, keep...))
		_, m := readNightly(t, out)
		want, wantCode := gates.VerdictFail, 1
		if k == failing {
			want, wantCode = gates.VerdictInconclusive, 3
		}
		if code != wantCode || m.Verdict != want || len(m.Missing) != 1 || m.Missing[0] != string(rune('0'+k))+"/3" {
			t.Errorf("without shard %d: exit %d verdict %s missing %v, want %s", k, code, m.Verdict, m.Missing, want)
		}
		if len(m.Entries) != 6 {
			t.Errorf("without shard %d: %d entries, want every lever once", k, len(m.Entries))
		}
		for _, e := range m.Entries {
			if owner[e.Spec] == k && (e.Verdict != gates.VerdictInconclusive || !strings.Contains(e.Line, "is missing")) {
				t.Errorf("without shard %d: its lever %s is %s: %s", k, e.Spec, e.Verdict, e.Line)
			}
		}
		md, _ := os.ReadFile(filepath.Join(out, "nightly-"+m.Date+".md"))
		if !strings.Contains(string(md), "**Missing: shard "+string(rune('0'+k))+"/3**") {
			t.Errorf("without shard %d: the page does not name it", k)
		}
	}

	// Shards of another commit are refused with exit 2, naming the field.
	ms, _ := filepath.Glob(filepath.Join(dir("s1"), "nightly-*-shard-*.json"))
	b, _ := os.ReadFile(ms[0])
	var s1 gates.NightlySummary
	_ = json.Unmarshal(b, &s1)
	s1.Commit = "0123456789abcdef"
	b, _ = json.Marshal(s1)
	other := dir("other")
	_ = os.MkdirAll(other, 0o755)
	if err := os.WriteFile(filepath.Join(other, filepath.Base(ms[0])), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runs.Merge(context.Background(), dir("refused"), []string{dir("s0"), other, dir("s2")}, "abtest merge")
	if runs.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), "shards differ in commit") {
		t.Fatalf("merge of another commit's shard: %v (exit %d)", err, runs.ExitCode(err))
	}
	if ms, _ := filepath.Glob(filepath.Join(dir("refused"), "nightly-*")); len(ms) != 0 {
		t.Errorf("a refused merge wrote %v", ms)
	}
}

// A control lever runs on every shard besides its part; the merge compares
// its B/A across the shards' GPUs (each named by UUID): alike machines
// agree, a machine that runs the lever's arm B slower does not, and the
// control's line keeps the worst verdict.
func TestNightly_ControlLeverOnEveryShardComparedAcrossTheirGPUs(t *testing.T) {
	bin := fakeMinfer(t)
	smi := t.TempDir()
	if err := os.WriteFile(filepath.Join(smi, "nvidia-smi"), []byte("#!/bin/sh\necho 'name, driver_version, a, b, c, d, e, f, uuid'\necho \"NVIDIA H200, 580, 1980 MHz, 3201 MHz, 1980 MHz, 0x0, 40, 200 W, GPU-fake-${CUDA_VISIBLE_DEVICES:-0}\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", smi+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKEMINFER_GPU", "1")
	t.Setenv("FAKEMINFER_RATES", "4000,400")
	t.Setenv("FAKEMINFER_WORKLOADS", "MINFER_MMQ=")
	root := t.TempDir()
	shard := func(i int, dir string) {
		t.Helper()
		t.Setenv("CUDA_VISIBLE_DEVICES", string(rune('0'+i)))
		run([]string{"nightly", "--minfer", bin, "--out", filepath.Join(root, dir), "--levers", "MINFER_NO_CUDA_GRAPH,MINFER_PDL", "--control", "MINFER_MMQ",
			"--shard", string(rune('0'+i)) + "/2", "--gates", "ab", "--rounds", "5", "--pp", "16", "--tg", "4", "--reps", "1", "--warmup-ms", "10", "--bench-warmup-ms", "10"})
	}
	shard(0, "s0")
	shard(1, "s1")
	t.Setenv("FAKEMINFER_SLOW_WHEN", "MINFER_MMQ=1:0.10") // this machine runs MMQ's arm B 10% slower
	shard(1, "s1slow")

	merge := func(out string, dirs ...string) *gates.NightlySummary {
		t.Helper()
		args := []string{"merge", "--out", filepath.Join(root, out)}
		for _, d := range dirs {
			args = append(args, filepath.Join(root, d))
		}
		run(args)
		_, s := readNightly(t, filepath.Join(root, out))
		return s
	}
	m := merge("alike", "s0", "s1")
	if m.Control == nil || !m.Control.Agree || len(m.Control.Shards) != 2 || len(m.Entries) != 3 {
		t.Fatalf("alike machines: control %+v, %d entries", m.Control, len(m.Entries))
	}
	if m.Merged[0].GPU != "GPU-fake-0" || m.Merged[1].GPU != "GPU-fake-1" {
		t.Errorf("shards' GPUs %+v", m.Merged)
	}
	m = merge("unlike", "s0", "s1slow")
	if m.Control.Agree || m.Control.Entry.Verdict != gates.VerdictFail {
		t.Fatalf("a machine slower on the control: agree %v, control verdict %s", m.Control.Agree, m.Control.Entry.Verdict)
	}
	md, _ := os.ReadFile(filepath.Join(root, "unlike", "nightly-"+m.Date+".md"))
	if !strings.Contains(string(md), "**Control lever MINFER_MMQ**") || !strings.Contains(string(md), "**no**") {
		t.Errorf("the page does not say the machines disagree")
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
)

// fakeBase is a copy of the fake minfer in its own folder with a
// fakeminfer.env beside it (knobs: the base build's own rates or failure
// mode), logging its benches as=base: another build run by --base-minfer.
func fakeBase(t *testing.T, knobs ...string) string {
	t.Helper()
	b, err := os.ReadFile(fakeMinfer(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "minfer")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	env := strings.Join(append([]string{"FAKEMINFER_AS=base"}, knobs...), "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "fakeminfer.env"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin
}

// engineOrder is the order of the timed and warm-up bench processes in the
// fakes' shared log: "minfer" (ours, FAKEMINFER_AS=ours), "base", "peer"
// (llama-bench); the census runs (p=0) left out. lines are the minfer and
// base lines without their as= tag, in order.
func engineOrder(t *testing.T, log string) (order []string, lines map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines = map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch {
		case strings.HasPrefix(l, "llama-bench "):
			order = append(order, "peer")
		case strings.HasPrefix(l, "model=") && !strings.Contains(l, " p=0 "):
			who := "minfer"
			if strings.Contains(l, " as=base ") {
				who = "base"
			}
			order = append(order, who)
			l = strings.Replace(strings.Replace(l, " as=base ", " ", 1), " as=ours ", " ", 1)
			lines[who] = append(lines[who], l)
		}
	}
	return order, lines
}

// Bar (a): a base slower than ours -> every row met, the base columns and
// section filled, the base's path, sha256 and commit in the record and the
// environment, and the base ran with our arguments and environment.
func TestPerfBase_BaseSlowerThanOursEveryRowMetWithTheBaseColumnsFilled(t *testing.T) {
	bin := fakeMinfer(t)
	base := fakeBase(t, "FAKEMINFER_RATES=50000,1000")
	t.Setenv("FAKEMINFER_RATES", "60000,1200")
	t.Setenv("FAKEMINFER_AS", "ours")
	log := filepath.Join(t.TempDir(), "benches")
	t.Setenv("FAKEMINFER_BENCH_LOG", log)
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0,qwen3-0.6b:Q8_0", "--base-minfer", base, "--with", "MINFER_MMQ=0")
	if code != 0 || rec.Verdict != harness.PerfMet || rec.Base == nil {
		t.Fatalf("exit %d %s: %s", code, rec.Verdict, rec.VerdictLine)
	}
	for _, r := range rec.Rows {
		b := r.Base
		if !r.MetAll() || b == nil || b.VsPP == nil || b.VsTG == nil || !b.VsPP.Met || !b.VsTG.Met || !near(b.VsPP.Ratio, 1.2) || !near(b.VsTG.Ratio, 1.2) ||
			!near(b.PP.TokS, 50000) || !near(b.TG.TokS, 1000) || len(b.TG.Samples) != 6 {
			t.Errorf("%s: %+v", r.Row.Name(), b)
		}
	}
	sum, _ := harness.FileSHA256(base)
	commit := "unknown"
	if st, ok := harness.ReadVCSStamp(base); ok {
		commit = st.Revision
	}
	if rec.Base.Path != base || rec.Base.SHA256 != sum || rec.Base.Commit != commit || rec.Base.Rounds != 2 || rec.Base.NotSlower != 1.015 {
		t.Errorf("base %+v, want %s sha256 %s commit %s", rec.Base, base, sum, commit)
	}
	for _, want := range []string{
		"| base pp512 | base tg128 | vs base |",
		"| 50,000 | 1,000.0 | pp 1.200, tg 1.200: met |",
		"## Against the base build",
		"our median >= the base's median / 1.015 (GATES.md gate 3's not-slower bar of 1.5%",
		"| qwen2-0.5b:Q8_0 | 50,000 (50,000 ± 0, 6 samples) | 1,000.0 (1,000.0 ± 0.0, 6 samples) | pp 1.200, tg 1.200: met |",
		"- base minfer: " + base + " (sha256 " + sum + "); commit: " + commit,
		"# the base build, the same arguments and environment",
		"against the base build: 2 of 2 measured row(s) no slower",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// The same bench arguments and MINFER_* environment (--with and the
	// warmup budget included), process for process.
	_, lines := engineOrder(t, log)
	if len(lines["base"]) != 6 || strings.Join(lines["base"], "\n") != strings.Join(lines["minfer"], "\n") {
		t.Errorf("base processes differ from ours:\nours %q\nbase %q", lines["minfer"], lines["base"])
	}
	if !strings.Contains(lines["base"][0], "MINFER_BENCH_WARMUP_MS=10") || !strings.Contains(lines["base"][0], "MINFER_MMQ=0") {
		t.Errorf("base env: %s", lines["base"][0])
	}
}

// Bar (b): ours more than 1.5% slower than the base on one row -> exit 1,
// that row named missed with its ratio; 1.4% slower is within the bar.
// Ours: tg 250 at depth; the base: 254 at depth (250 < 254/1.015 = 250.25:
// 1.6% slower) or 253.5 (250 >= 249.75: met); depth 0 the same as ours.
func TestPerfBase_OursSlowerThanTheBaseBeyond1p5PercentOnOneRowMissesExit1(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1200,250,45000")
	rows := "qwen2-0.5b:Q8_0,qwen2-0.5b:Q8_0@d4096"
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", rows, "--base-minfer", fakeBase(t, "FAKEMINFER_RATES=60000,1200,254,45000"))
	d0, d := rec.Rows[0], rec.Rows[1]
	if code != 1 || rec.Verdict != harness.PerfMissed || !d0.MetAll() || d.MetAll() || d.Base.VsTG.Met || !d.Base.VsPP.Met {
		t.Fatalf("exit %d %s: %s; d0 %+v; d %+v", code, rec.Verdict, rec.VerdictLine, d0.Base, d.Base)
	}
	if !near(d.Base.VsTG.Ratio, 250.0/254) || d.Base.VsTG.Test != "tg128@d4096" {
		t.Errorf("vs base tg: %+v", d.Base.VsTG)
	}
	for _, want := range []string{
		"missed: qwen2-0.5b:Q8_0@d4096",
		"against the base build: 1 of 2 measured row(s) no slower, slower than the base: qwen2-0.5b:Q8_0@d4096 (tg128@d4096 0.984 x the base's, 1.6% slower)",
		"| pp 1.000, tg 0.984: **MISSED** (tg 1.6% slower) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "qwen2-0.5b:Q8_0 (") {
		t.Errorf("the depth-0 row is named slower:\n%s", rec.VerdictLine)
	}
	// 1.4% slower is within GATES.md's 1.5%.
	code, rec, _ = runPerfCmd(t, bin, perfCache(t), "--rows", rows, "--base-minfer", fakeBase(t, "FAKEMINFER_RATES=60000,1200,253.5,45000"))
	if code != 0 || !rec.Rows[1].MetAll() {
		t.Errorf("1.4%% slower: exit %d: %s", code, rec.VerdictLine)
	}
}

// Bar (c): a failing base bench makes the row FAILED (no numbers, never a
// zero) and the run exit 1.
func TestPerfBase_FailingBaseBenchFailsTheRowExit1(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1200")
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0", "--base-minfer", fakeBase(t, "FAKEMINFER_MODE=crash"))
	r := rec.Rows[0]
	if code != 1 || rec.Verdict != harness.PerfFailed || !r.Failed || r.Stage != "base bench (warm-up)" || !strings.Contains(r.StderrTail, "panic: runtime error") {
		t.Fatalf("exit %d %s: failed %v stage %q tail %q", code, rec.Verdict, r.Failed, r.Stage, r.StderrTail)
	}
	if r.PP != nil || r.TG != nil || r.Base.PP != nil || r.Base.VsTG != nil {
		t.Errorf("a failed row carries numbers: %+v %+v %+v", r.PP, r.TG, r.Base)
	}
	for _, want := range []string{"| qwen2-0.5b:Q8_0 | FAILED (base bench (warm-up)) |", "failed: qwen2-0.5b:Q8_0 (base bench (warm-up))", "| - | - | - |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// Bar (d): the order alternates across rounds (ours and the base), and
// rotates with a peer as well; the record and the report say which ran
// first each round.
func TestPerfBase_OrderAlternatesAcrossRoundsAndRotatesWithAPeer(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1200")
	t.Setenv("FAKEMINFER_AS", "ours")
	for _, c := range []struct {
		name   string
		extra  []string
		order  string
		rounds string
	}{
		{"base", nil, "minfer,base,minfer,base,base,minfer,minfer,base", "1: minfer, base; 2: base, minfer; 3: minfer, base"},
		{"base and peer", []string{"--peer", "llama-bench=" + peer}, "minfer,base,peer,minfer,base,peer,base,peer,minfer,peer,minfer,base",
			"1: minfer, base, llama-bench; 2: base, llama-bench, minfer; 3: llama-bench, minfer, base"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "benches")
			t.Setenv("FAKEMINFER_BENCH_LOG", log)
			t.Setenv("FAKELLAMA_LOG", log)
			args := append([]string{"--rows", "qwen2-0.5b:Q8_0", "--base-minfer", fakeBase(t), "--peer-rounds", "3"}, c.extra...)
			code, rec, md := runPerfCmd(t, bin, perfCache(t), args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, rec.VerdictLine)
			}
			if order, _ := engineOrder(t, log); strings.Join(order, ",") != c.order {
				t.Errorf("process order %v, want %s", order, c.order)
			}
			var rounds []string
			for _, rd := range rec.Rows[0].Base.Rounds {
				rounds = append(rounds, fmt.Sprintf("%d: %s", rd.Round, strings.Join(rd.Order, ", ")))
			}
			if got := strings.Join(rounds, "; "); got != c.rounds || !strings.Contains(md, "| "+c.rounds+" |") {
				t.Errorf("rounds %q, want %q; report:\n%s", got, c.rounds, md)
			}
			if n := len(rec.Rows[0].Base.PP.Samples); n != 9 {
				t.Errorf("%d base pp samples, want 3 rounds x -r 3", n)
			}
		})
	}
}

// Bar (f): a --base-minfer that is no executable file could not run (exit
// 2) before anything runs: no process, no report.
func TestPerfBase_NotAnExecutableFileOrNoBenchHelpCouldNotRunExit2BeforeAnythingRuns(t *testing.T) {
	bin := fakeMinfer(t)
	plain := filepath.Join(t.TempDir(), "minfer")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An executable whose `bench --help` fails is no minfer to ask for its
	// CLI: could not run, never a guess at its flags.
	nohelp := filepath.Join(t.TempDir(), "minfer")
	if err := os.WriteFile(nohelp, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"missing": filepath.Join(t.TempDir(), "missing"), "folder": t.TempDir(), "not executable": plain,
		"no help": nohelp} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("FAKEMINFER_BENCH_LOG", filepath.Join(dir, "benches"))
			t.Setenv("FAKEMINFER_SYNTH_LOG", filepath.Join(dir, "synths"))
			out := filepath.Join(dir, "out")
			if code := run([]string{"perf", "--minfer", bin, "--device", "cpu", "--out", out, "--synth-dir", filepath.Join(dir, "cache"),
				"--rows", "qwen2-tiny:Q8_0", "--base-minfer", path}); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			for _, f := range []string{"benches", "synths", "out", "cache"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("%s exists: something ran", f)
				}
			}
		})
	}
}

// One run of --rows issue20-table with a base and a peer judges issue 20's
// Must targets, the pp slope against the peer and no-slower-than-base at
// once, on all 13 rows.
func TestPerfBase_Issue20TableWithBaseAndPeerJudgesTargetsSlopeAndBaseAtOnce(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1000,250,45000")
	t.Setenv("FAKELLAMA_RATES", "50000,900,30000,200")
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "issue20-table", "--peer", "llama-bench="+peer, "--peer-rounds", "1",
		"--base-minfer", fakeBase(t, "FAKEMINFER_RATES=59000,990,248,44500"))
	if code != 0 || rec.Verdict != harness.PerfMet || len(rec.Rows) != 13 || len(rec.Slopes) != 3 {
		t.Fatalf("exit %d %s: %s; %d rows, %d slopes", code, rec.Verdict, rec.VerdictLine, len(rec.Rows), len(rec.Slopes))
	}
	for _, r := range rec.Rows {
		if r.Base == nil || r.Base.VsPP == nil || r.Base.VsTG == nil || !r.MetAll() || len(r.Base.Rounds[0].Order) != 3 {
			t.Errorf("%s: not judged against the base: %+v", r.Row.Name(), r.Base)
		}
	}
	for _, s := range rec.Slopes {
		if s.Met == nil || !*s.Met {
			t.Errorf("slope %+v", s)
		}
	}
	for _, want := range []string{"met (>= 6,800)", "met (>= 245)", "met (>= 12,800)", "against the base build: 13 of 13 measured row(s) no slower"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// A base from before bench --format (715715f's CLI: -o json) runs with -o
// json in its place, every other argument ours, and the page says so; a
// base of today's CLI gets our arguments unchanged.
func TestPerfBase_OlderCLIWithoutFormatRunsWithDashOJSONStated(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1200,250,45000")
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0@d64", "--base-minfer", fakeBase(t, "FAKEMINFER_OLD_CLI=1"))
	r := rec.Rows[0]
	if code != 0 || r.Failed || r.Base.VsTG == nil || !strings.Contains(rec.Base.ArgsNote, "-o json in place of --format json") {
		t.Fatalf("exit %d: %s; %+v; note %q", code, rec.VerdictLine, r.Base, rec.Base.ArgsNote)
	}
	_, ours, _ := strings.Cut(r.BenchCommand, " bench ")
	if want := strings.Replace(ours, "--format json", "-o json", 1); !strings.HasSuffix(r.Base.Command, " bench "+want) || want == ours {
		t.Errorf("base command %q, want ours with -o json: %q", r.Base.Command, want)
	}
	if !strings.Contains(md, "**Base arguments:** its bench has no --format") {
		t.Errorf("report:\n%s", md)
	}
	_, rec, _ = runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0@d64", "--base-minfer", fakeBase(t))
	r = rec.Rows[0]
	if _, ours, _ := strings.Cut(r.BenchCommand, " bench "); rec.Base.ArgsNote != "" || !strings.HasSuffix(r.Base.Command, " bench "+ours) {
		t.Errorf("today's CLI: note %q, base %q, ours %q", rec.Base.ArgsNote, r.Base.Command, r.BenchCommand)
	}
}

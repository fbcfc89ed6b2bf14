package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/internal/gobuild"
)

// fakeLlamaBench builds harness/internal/fakellamabench once per test
// binary: a llama-bench that prints llama-bench's JSON.
func fakeLlamaBench(t *testing.T) string {
	t.Helper()
	bin, err := gobuild.Once("github.com/minfer-go/minfer/harness/internal/fakellamabench", "llama-bench")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// benchOrder is the order of the bench processes both fakes logged to one
// file: "minfer" per timed or warm-up minfer bench (the p=0 census runs
// left out), "peer -r N" per llama-bench, and the models each ran on.
func benchOrder(t *testing.T, log string) (order, models []string) {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		switch {
		case strings.HasPrefix(l, "model=") && !strings.Contains(l, " p=0"):
			order, models = append(order, "minfer"), append(models, strings.TrimPrefix(f[0], "model="))
		case strings.HasPrefix(l, "llama-bench "):
			for i := range f {
				if f[i] == "-r" {
					order = append(order, "peer -r "+f[i+1])
				}
				if f[i] == "-m" {
					models = append(models, f[i+1])
				}
			}
		}
	}
	return order, models
}

func TestPeer_RoundsAlternateWhoGoesFirstAfterOneWarmupOfEachOnTheSameFile(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1200")
	log := filepath.Join(t.TempDir(), "benches")
	t.Setenv("FAKEMINFER_BENCH_LOG", log)
	t.Setenv("FAKELLAMA_LOG", log)
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0", "--peer", "llama-bench="+peer, "--peer-rounds", "3")
	if code != 0 || rec.Rows[0].Failed {
		t.Fatalf("exit %d: %s %+v", code, rec.VerdictLine, rec.Rows[0])
	}
	order, models := benchOrder(t, log)
	want := []string{"minfer", "peer -r 1", "minfer", "peer -r 3", "peer -r 3", "minfer", "minfer", "peer -r 3"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("process order %v, want %v", order, want)
	}
	for _, m := range models {
		if m != rec.Rows[0].Model {
			t.Errorf("a process ran on %s, not the row's file %s", m, rec.Rows[0].Model)
		}
	}
	var firsts []string
	for _, r := range rec.Rows[0].Peer.Rounds {
		firsts = append(firsts, r.First)
	}
	if strings.Join(firsts, ",") != "minfer,llama-bench,minfer" || !strings.Contains(md, "1: minfer first, 2: llama-bench first, 3: minfer first") {
		t.Errorf("rounds %v", rec.Rows[0].Peer.Rounds)
	}
	// Every round's repetitions are pooled: 3 rounds x -r 3.
	if n := len(rec.Rows[0].PP.Samples); n != 9 || len(rec.Rows[0].Peer.TG.Samples) != 9 {
		t.Errorf("%d minfer pp samples, %d peer tg samples; want 9 each", n, len(rec.Rows[0].Peer.TG.Samples))
	}
}

func TestPeer_RatioColumnIsOursOverTheMeasuredPeerWithItsCommandAndSHA256(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1000")
	t.Setenv("FAKELLAMA_RATES", "50000,800")
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0", "--peer", "llama-bench="+peer)
	r := rec.Rows[0]
	if code != 1 || r.Failed || r.Peer == nil {
		t.Fatalf("exit %d: %s %+v", code, rec.VerdictLine, r)
	}
	// pp 60,000 / 50,000 = 1.2 and tg 1,000 / 800 = 1.25, not the stored 59,841 and 901.8.
	if !near(r.PP.Ref, 50000) || !near(r.PP.Ratio, 1.2) || !near(r.TG.Ref, 800) || !near(r.TG.Ratio, 1.25) || r.PP.RefFrom != "llama-bench, measured in this run" {
		t.Errorf("pp %+v tg %+v", r.PP, r.TG)
	}
	sum, _ := harness.FileSHA256(peer)
	if rec.Peer == nil || rec.Peer.SHA256 != sum || rec.Peer.Rounds != 2 {
		t.Errorf("peer %+v, want sha256 %s and the default 2 rounds", rec.Peer, sum)
	}
	for _, want := range []string{
		"| qwen2-0.5b:Q8_0 | 60,000 | 50,000 | 1.200 | met (>= 60,000) | 1,000.0 | 800.0 | 1.250 | **MISSED**",
		"| llama-bench, measured in this run |",
		"sha256 " + sum,
		harness.ShellQuote(peer) + " -m " + r.Model + " -ngl 99 -p 512 -n 128 -r 3 -o json   # the peer, on the same file",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, harness.StoredReference) {
		t.Errorf("a stored constant is labelled where the peer ran:\n%s", md)
	}
}

func TestPeer_WithoutPeerTheStoredConstantIsTheLabelledFallback(t *testing.T) {
	bin := fakeMinfer(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1000")
	_, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0,qwen2-tiny:Q8_0")
	if r := rec.Rows[0]; rec.Peer != nil || r.Peer != nil || r.PP.RefFrom != harness.StoredReference || !near(r.PP.Ref, 59841) {
		t.Fatalf("pp %+v", r.PP)
	}
	for _, want := range []string{"| qwen2-0.5b:Q8_0 | 60,000 | 59,841 | 1.003 |", "| stored reference (issue 6) |", "Reference: stored reference (issue 6): "} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// An ad-hoc row has no reference at all: no label either.
	if r := rec.Rows[1]; r.PP.RefFrom != "" || !strings.Contains(md, "| qwen2-tiny:Q8_0 | 60,000 | - | - |") {
		t.Errorf("ad-hoc row: %+v", r.PP)
	}
}

func TestPeer_MalformedEmptyOrIncompleteJSONFailsTheRowWithOneReasonNeverZero(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1000")
	for _, c := range []struct{ mode, rows, reason string }{
		{"malformed", "qwen2-0.5b:Q8_0", "not a JSON array of tests"},
		{"empty", "qwen2-0.5b:Q8_0", "printed nothing on stdout"},
		{"emptyarray", "qwen2-0.5b:Q8_0", "an empty array (no test ran)"},
		{"nodepth", "qwen2-0.5b:Q8_0@d64", "no test with n_prompt 512, n_gen 0, n_depth 64"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Setenv("FAKELLAMA_MODE", c.mode)
			code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", c.rows, "--peer", "llama-bench="+peer)
			r := rec.Rows[0]
			if code != 1 || rec.Verdict != harness.PerfFailed || !r.Failed || r.Stage != "llama-bench parse (warm-up)" || !strings.Contains(r.Error, c.reason) {
				t.Fatalf("exit %d %s: failed %v stage %q error %q", code, rec.Verdict, r.Failed, r.Stage, r.Error)
			}
			if r.PP != nil || r.TG != nil || r.Peer.PP != nil {
				t.Errorf("a failed row carries numbers: %+v %+v", r.PP, r.TG)
			}
			if !strings.Contains(md, "FAILED (llama-bench parse (warm-up))") || !strings.Contains(md, c.reason) {
				t.Errorf("report:\n%s", md)
			}
		})
	}
}

func TestPeer_NonZeroExitFailsTheRowWithItsStderrTail(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	t.Setenv("FAKEMINFER_RATES", "60000,1000")
	t.Setenv("FAKELLAMA_MODE", "fail")
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-0.5b:Q8_0,qwen3-0.6b:Q8_0", "--peer", "llama-bench="+peer)
	for _, r := range rec.Rows {
		if !r.Failed || r.Stage != "llama-bench (warm-up)" || !strings.Contains(r.Error, "exit 1") || !strings.Contains(r.StderrTail, "CUDA error: out of memory") || r.PP != nil {
			t.Errorf("%s: failed %v stage %q error %q tail %q", r.Row.Name(), r.Failed, r.Stage, r.Error, r.StderrTail)
		}
	}
	if code != 1 || rec.Verdict != harness.PerfFailed || !strings.Contains(md, "CUDA error: out of memory") {
		t.Errorf("exit %d %s:\n%s", code, rec.Verdict, md)
	}
}

func TestPeer_PeakDeviceMemoryIsSampledLikeMinfersBesideIt(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	fakeGPUMem(t, 700)
	t.Setenv("FAKELLAMA_DEVICE_MIB", "900")
	code, rec, md := runPerfCmd(t, bin, t.TempDir(), "--rows", "qwen2-tiny:Q8_0", "--device", "cuda", "--peer", "llama-bench="+peer)
	r := rec.Rows[0]
	if code != 0 || r.Failed || r.DeviceMemory == nil || r.DeviceMemory.PeakBytes != 700<<20 || r.Peer.DeviceMemory == nil || !r.Peer.DeviceMemory.Measured || r.Peer.DeviceMemory.PeakBytes != 900<<20 {
		t.Fatalf("exit %d: %s; ours %+v peer %+v", code, rec.VerdictLine, r.DeviceMemory, r.Peer)
	}
	if !strings.Contains(md, "| ours 0.684 GiB; peer 0.879 GiB |") {
		t.Errorf("memory column:\n%s", md)
	}
}

func TestPeer_DepthRowsRunPPAndTGAtDepthAndTheSlopeComparesTheEngines(t *testing.T) {
	bin, peer := fakeMinfer(t), fakeLlamaBench(t)
	// Ours: pp 8,000 at depth 0 (64 ms a chunk), 4,000 at 8192 (128 ms):
	// 8 ms per 1,024 cached tokens. The peer: 10,000 (51.2 ms) and 8,000
	// (64 ms): 1.6 ms per 1,024. Ours is steeper: a missed target.
	t.Setenv("FAKEMINFER_RATES", "8000,300,250,4000")
	t.Setenv("FAKELLAMA_RATES", "10000,260,8000,240")
	log := filepath.Join(t.TempDir(), "benches")
	t.Setenv("FAKELLAMA_LOG", log)
	code, rec, md := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-tiny:Q8_0,qwen2-tiny:Q8_0@d8192", "--peer", "llama-bench="+peer)
	if code != 1 || rec.Verdict != harness.PerfMissed || len(rec.Slopes) != 1 {
		t.Fatalf("exit %d %s: %s; slopes %+v", code, rec.Verdict, rec.VerdictLine, rec.Slopes)
	}
	d := rec.Rows[1]
	if !strings.Contains(d.BenchCommand, "-p 512 -n 128 -d 8192 -r 3 --format json --ctx 8832") || !strings.Contains(d.Peer.Command, "-p 512 -n 128 -r 3 -o json -d 8192") {
		t.Errorf("commands %q / %q", d.BenchCommand, d.Peer.Command)
	}
	if !near(d.PP.Ratio, 0.5) || !near(d.TG.Ratio, 250.0/240) || !near(d.Long.Ratio, 250.0/300) {
		t.Errorf("depth ratios: pp %+v tg %+v long %+v", d.PP, d.TG, d.Long)
	}
	s := rec.Slopes[0]
	if !near(s.Ours, 8) || !near(s.Peer, 1.6) || s.Met == nil || *s.Met || fmt.Sprint(s.Depths) != "[0 8192]" {
		t.Errorf("slope %+v", s)
	}
	for _, want := range []string{"## pp512 chunk time over the KV depth", "| qwen2-tiny:Q8_0 | 8.000 | 1.600 | **MISSED** (ours above the peer's) | d0: 64.00 / 51.20, d8192: 128.00 / 64.00 |",
		"pp512 chunk-time slope of qwen2-tiny:Q8_0 8.00 ms per 1,024 cached tokens, above the peer's 1.60"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// A flatter slope than the peer's meets the bar.
	t.Setenv("FAKEMINFER_RATES", "8000,300,250,7900")
	if code, rec, _ := runPerfCmd(t, bin, perfCache(t), "--rows", "qwen2-tiny:Q8_0,qwen2-tiny:Q8_0@d8192", "--peer", "llama-bench="+peer); code != 0 || rec.Slopes[0].Met == nil || !*rec.Slopes[0].Met {
		t.Errorf("exit %d: slope %+v", code, rec.Slopes)
	}
}

func TestPeer_BadPeerFlagsCannotRunExit2(t *testing.T) {
	bin := fakeMinfer(t)
	for _, args := range [][]string{
		{"--peer", "vllm=/bin/true"},
		{"--peer", "llama-bench=" + filepath.Join(t.TempDir(), "missing")},
		{"--peer", "llama-bench=" + t.TempDir()},
		{"--peer", "llama-bench=" + fakeLlamaBench(t), "--peer-rounds", "0"},
	} {
		if code := run(append([]string{"perf", "--minfer", bin, "--device", "cpu", "--out", t.TempDir(), "--rows", "qwen2-tiny:Q8_0"}, args...)); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

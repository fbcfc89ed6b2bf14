package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/report"
)

// --depth N runs every bench process of gates 3 and 5 at that KV depth
// (minfer bench -d N with a context that holds it): the metrics carry the
// depth in their names and the calibration it writes is its own; a minfer
// that ignores -d (it would time depth 0 under the run's name) is refused.
func TestRun_DepthBenchesAtThatDepthAndAMinferIgnoringItIsRefused(t *testing.T) {
	bin := fakeMinfer(t)
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "ab,profile", "--depth", "4096", "--rounds", "5")
	if rec.Config.Depth != 4096 || code == 2 {
		t.Fatalf("exit %d, depth %d: %s", code, rec.Config.Depth, rec.VerdictLine)
	}
	var names []string
	for _, g := range rec.Gates {
		if g.Gate == gates.GateAB && g.AB != nil {
			for _, m := range g.AB.Metrics {
				names = append(names, m.Name)
			}
		}
	}
	if strings.Join(names, ",") != "pp16@d4096,tg4@d4096" {
		t.Errorf("metrics %v, want pp16@d4096 and tg4@d4096", names)
	}
	benches, deep := 0, 0
	for _, c := range rec.Reproduce {
		if strings.Contains(c, " bench ") {
			benches++
			if strings.Contains(c, "-d 4096 --fill zeros --ctx 4116") {
				deep++
			}
		}
	}
	if benches == 0 || deep != benches {
		t.Errorf("%d of %d bench commands at depth 4096:\n%s", deep, benches, strings.Join(rec.Reproduce, "\n"))
	}

	t.Setenv("FAKEMINFER_MODE", "nodepth")
	code, rec = runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "ab", "--depth", "4096", "--rounds", "5")
	if code == 0 || rec.Verdict == gates.VerdictPass || !strings.Contains(gateOf(rec, gates.GateAB).Reason, "does not take bench -d") {
		t.Errorf("a minfer ignoring -d: exit %d %s: %s", code, rec.Verdict, gateOf(rec, gates.GateAB).Reason)
	}
}

// abtest calibrate --depth writes a calibration of its own (-d<N> in the
// name, depth in the JSON) that a run at that depth finds and a run at
// depth 0 does not.
func TestCalibrate_DepthIsPartOfTheWorkload(t *testing.T) {
	bin := fakeMinfer(t)
	out := t.TempDir()
	base := []string{"--minfer", bin, "--out", out, "--pp", "16", "--tg", "4", "--warmup-ms", "10", "--bench-warmup-ms", "10", "--rounds", "5"}
	if c := run(append([]string{"calibrate", "--workload", "default", "--depth", "512"}, base...)); c != 0 {
		t.Fatalf("calibrate --depth 512: exit %d", c)
	}
	files, _ := filepath.Glob(filepath.Join(out, "calibration", "*", "*-pp16-tg4-d512-r3.json"))
	if len(files) != 1 {
		all, _ := filepath.Glob(filepath.Join(out, "calibration", "*", "*"))
		t.Fatalf("calibration files %v", all)
	}
	b, _ := os.ReadFile(files[0])
	if !strings.Contains(string(b), `"depth": 512`) {
		t.Errorf("calibration JSON without its depth:\n%.400s", b)
	}
	for _, c := range []struct {
		depth string
		found bool
	}{{"512", true}, {"0", false}} {
		code := run(append([]string{"run", "--lever", "MINFER_NO_FUSE_QKV", "--gates", "ab", "--depth", c.depth, "--calibration", out, "--gen-n", "8"}, base[:len(base)-2]...))
		ms, _ := filepath.Glob(filepath.Join(out, "MINFER_NO_FUSE_QKV", "*.json"))
		if len(ms) == 0 || code == 2 {
			t.Fatalf("depth %s: exit %d, %d reports", c.depth, code, len(ms))
		}
		if len(ms) != 1 {
			t.Fatalf("depth %s: reports %v", c.depth, ms)
		}
		rec, err := report.ReadJSON(ms[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Config.Power != nil; got != c.found {
			t.Errorf("run at depth %s: calibration found %v, want %v", c.depth, got, c.found)
		}
		for _, m := range ms {
			os.Remove(m)
		}
	}
}

package gates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
)

// An arm on the device that misses the activation-quantization bar against
// the CPU reference only because both backends round activations, each its
// own way, passes against the exact evaluation (MINFER_CPU_EXACT=1) when it
// is no further from it than the reference is (x1.25); a device worse than
// that fails, and where nothing misses the exact reference never runs.
// (tiny-code at Q4_K_M on the H200: both arms rel L2 0.0514 from the CPU
// reference, which is itself 0.0512 from the exact evaluation.)
func TestParity_ActQuantMissIsJudgedAgainstTheExactEvaluationAndAWorseDeviceFails(t *testing.T) {
	cfg := leverCfg(t, "MINFER_MMQ")
	cfg.Device = "cuda"
	cfg.Tol = harness.Tolerance{Bitwise: true, Bounded: true, Top1Equal: true, Class: "bitwise"}
	m := fake(t)
	m.Device = "cuda"
	for _, tc := range []struct {
		noise      string
		pass, miss bool
	}{
		{"cpu=0.05,cuda=0.035", true, true},  // vs CPU ~0.061; vs exact 0.035 <= 1.25 x 0.05
		{"cpu=0.05,cuda=0.09", false, true},  // vs exact 0.09 > 0.0625: less exact than the reference
		{"cpu=0.02,cuda=0.02", true, false},  // within 0.05 of the CPU reference: no exact run
		{"cpu=0.004,cuda=0.07", false, true}, // a good reference: the bar stays 0.05
		{"cpu=0.2,cuda=0.035", false, true},  // a reference 0.2 from exact widens nothing: the misses stand
	} {
		t.Run(tc.noise, func(t *testing.T) {
			t.Setenv("FAKEMINFER_ACTQ_NOISE", tc.noise)
			cfg.TmpDir = t.TempDir()
			env := &Env{M: m, HasGPU: true}
			r := Parity(context.Background(), cfg, env)
			d := r.Parity
			if d == nil || len(d.Graph) == 0 {
				t.Fatalf("%s: %s", r.Status, r.Reason)
			}
			if got := r.Status != Fail; got != tc.pass {
				t.Fatalf("pass %v, want %v: %s: %s", got, tc.pass, r.Status, r.Reason)
			}
			ran := false
			for _, c := range env.Commands() {
				ran = ran || strings.Contains(c, "MINFER_CPU_EXACT=1")
			}
			if ran != tc.miss || (len(d.Exact) > 0) != tc.miss {
				t.Fatalf("exact reference ran %v (%d comparisons), want %v", ran, len(d.Exact), tc.miss)
			}
			if !tc.miss {
				return
			}
			if d.Exact[0].Label != "CPU ref vs exact" {
				t.Errorf("first exact comparison %q", d.Exact[0].Label)
			}
			judged := !strings.HasPrefix(tc.noise, "cpu=0.2,")
			for _, c := range d.Graph {
				if strings.Contains(c.Why, "judged there") != judged || !judged && !strings.Contains(c.Why, "the reference is in question") {
					t.Errorf("%s nt=%d: %s", c.Label, c.NT, c.Why)
				}
			}
			if !tc.pass && !strings.Contains(r.Reason, "rel L2") {
				t.Errorf("reason %q", r.Reason)
			}
		})
	}
}

// abtest pr's reference is the base build, which may predate
// MINFER_CPU_EXACT (the H200's pr of 12e40ba: "unknown lever"): its misses
// then stand, and with ExactBin (the head's minfer) they are judged.
func TestParity_ExactBinComputesTheExactReferenceABaseCannot(t *testing.T) {
	cfg := leverCfg(t, "MINFER_MMQ")
	cfg.Device = "cuda"
	cfg.Tol = harness.Tolerance{Bitwise: true, Bounded: true, Top1Equal: true, Class: "bitwise"}
	head := fake(t)
	old := filepath.Join(t.TempDir(), "minfer")
	script := "#!/bin/sh\nif [ -n \"$MINFER_CPU_EXACT\" ]; then echo 'minfer: unknown lever MINFER_CPU_EXACT' >&2; exit 2; fi\nexec " + head.R.Bin + " \"$@\"\n"
	if err := os.WriteFile(old, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	base := head
	base.R = &harness.Runner{Bin: old}
	base.Device = "cuda"
	t.Setenv("FAKEMINFER_ACTQ_NOISE", "cpu=0.05,cuda=0.035")
	for _, exactBin := range []string{"", head.R.Bin} {
		cfg.TmpDir, cfg.ExactBin = t.TempDir(), exactBin
		r := Parity(context.Background(), cfg, &Env{M: base, HasGPU: true})
		switch {
		case exactBin == "" && (r.Status != Fail || !strings.Contains(r.Reason, "could not run") || !strings.Contains(r.Reason, "unknown lever")):
			t.Errorf("base alone: %s: %s", r.Status, r.Reason)
		case exactBin != "" && (r.Status == Fail || r.Parity == nil || len(r.Parity.Exact) == 0 || !strings.Contains(r.Parity.Exact[0].Why, "computed by "+exactBin)):
			t.Errorf("with the head's minfer: %s: %s (%+v)", r.Status, r.Reason, r.Parity)
		}
	}
}

// The CPU reference and the exact reference run with arm A's settings less
// the mutation seam, so a pin of both arms (a Requires entry, the KV cache
// format the lever's path reads: MINFER_CACHE_TYPE=f16) holds for them too:
// the reference computes the same cache as the arms it judges.
func TestRefEnv_InheritsArmAsPinsWithoutTheMutation(t *testing.T) {
	cfg := Config{A: Arm{Name: "A", Value: "0", Env: map[string]string{"MINFER_ATTN_DECODE_TC": "0", "MINFER_CACHE_TYPE": "f16", "MINFER_NO_SPLITK_ATTN": "0", "MINFER_TEST_MUTATE": "skip_bias"}}}
	for name, m := range map[string]map[string]string{"ref": refEnv(cfg), "exact": exactEnv(cfg)} {
		if m["MINFER_CACHE_TYPE"] != "f16" || m["MINFER_NO_SPLITK_ATTN"] != "0" || m["MINFER_ATTN_DECODE_TC"] != "0" {
			t.Errorf("%s env %v: want arm A's pins", name, m)
		}
		if _, ok := m["MINFER_TEST_MUTATE"]; ok {
			t.Errorf("%s env %v carries the mutation", name, m)
		}
	}
}

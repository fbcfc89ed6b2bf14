package levers

import (
	"strings"
	"testing"
)

func TestParse_UnknownLeverIsAnErrorNamingIt(t *testing.T) {
	_, err := Parse([]string{"MINFER_NO_SUCH_THING=1"})
	if err == nil || !strings.Contains(err.Error(), "MINFER_NO_SUCH_THING") {
		t.Fatalf("err = %v, want an error naming the lever", err)
	}
}

func TestParse_ValueTheLeverDoesNotKnowIsAnError(t *testing.T) {
	for _, kv := range []string{"MINFER_MMQ=2", "MINFER_NO_CUDA_GRAPH=yes", "MINFER_CACHE_TYPE=q4_0", "MINFER_BENCH_WARMUP_MS=-1", "MINFER_TEST_MUTATE=typo"} {
		if _, err := Parse([]string{kv}); err == nil {
			t.Errorf("%s: accepted, want an error", kv)
		}
	}
}

func TestParse_OptOutOptInAndPresenceSemantics(t *testing.T) {
	def := Default()
	if !def.MMQ || def.NoCUDAGraph || def.DisableCUDA || def.CacheType != "auto" || def.BenchWarmupMS != 2000 {
		t.Fatalf("defaults: %+v", def)
	}
	c, err := Parse([]string{"MINFER_MMQ=0", "MINFER_NO_CUDA_GRAPH=1", "MINFER_DISABLE_CUDA=", "MINFER_CACHE_TYPE=q8_0", "MINFER_BENCH_WARMUP_MS=5", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MMQ || !c.NoCUDAGraph || !c.DisableCUDA || c.CacheType != "q8_0" || c.BenchWarmupMS != 5 {
		t.Fatalf("parsed: %+v", c)
	}
	if got := c.Set(); len(got) != 5 || got["MINFER_MMQ"] != "0" {
		t.Fatalf("Set() = %v, want the 5 MINFER_* values only", got)
	}
	on, err := Parse([]string{"MINFER_MMQ=1"})
	if err != nil || !on.MMQ {
		t.Fatalf("MINFER_MMQ=1: %+v %v", on, err)
	}
}

func TestRegistry_EveryLeverIsDocumentedAndItsArmsValidate(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range All() {
		if seen[l.Name] {
			t.Errorf("%s registered twice", l.Name)
		}
		seen[l.Name] = true
		if !strings.HasPrefix(l.Name, "MINFER_") || l.Doc == "" || l.Path == "" || l.Backend == "" || l.Issue == "" {
			t.Errorf("%s: incomplete entry %+v", l.Name, l)
		}
		for _, arm := range []string{l.ArmA, l.ArmB} {
			if arm != "" {
				if err := l.Validate(arm); err != nil {
					t.Errorf("%s: arm %q does not validate: %v", l.Name, arm, err)
				}
			}
		}
	}
	// The names users know (LEVERS.md) are all here.
	for _, n := range []string{"MINFER_DISABLE_CUDA", "MINFER_CACHE_TYPE", "MINFER_NO_CUDA_GRAPH", "MINFER_NO_PREFILL_CAPTURE",
		"MINFER_NO_PINNED_READBACK", "MINFER_MMQ", "MINFER_NO_PREFILL_GEMM", "MINFER_NO_KQ_MMVQ",
		"MINFER_NO_Q40_MMVQ", "MINFER_NO_Q80_MMVQ", "MINFER_NO_FA_PREFILL", "MINFER_NO_FUSE_FFN", "MINFER_NO_FUSE_QKV",
		"MINFER_BENCH_WARMUP_MS", "MINFER_OP_TIMING", "MINFER_LAUNCH_CENSUS", "MINFER_GRAPH_DUMP",
		"MINFER_DUMP_DIR", "MINFER_TEST_MUTATE", "MINFER_TEST_CALL_FAIL"} {
		if !seen[n] {
			t.Errorf("%s missing from the registry", n)
		}
	}
}

package runs

import (
	"errors"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
)

// A kill switch named with its baseline value (--lever MINFER_NO_X=1, arm A
// already 1) cannot run, and the message says which spelling measures the
// path; an explicit --baseline equal to the candidate gets no such hint.
func TestRun_KillSwitchAtItsBaselineValueSaysHowToNameIt(t *testing.T) {
	s := &setup{levers: []harness.Lever{{Lever: levers.Lever{Name: "MINFER_NO_KQ_MMVQ", Values: []string{"0", "1"}, ArmA: "1", ArmB: "0"}}}}
	_, err := s.config(&Options{}, "MINFER_NO_KQ_MMVQ=1", "")
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(err.Error(), "arms A and B are both MINFER_NO_KQ_MMVQ=1") ||
		!strings.Contains(err.Error(), "run --lever MINFER_NO_KQ_MMVQ to measure") {
		t.Fatalf("err %v", err)
	}
	_, err = s.config(&Options{}, "MINFER_NO_KQ_MMVQ=0", "0")
	if err == nil || strings.Contains(err.Error(), "to measure") {
		t.Fatalf("explicit baseline: err %v", err)
	}
}

// registrySetup is a setup over the engine's own registry (what `minfer
// levers --json` prints), on a machine with a GPU.
func registrySetup() *setup {
	var ls []harness.Lever
	for _, l := range levers.All() {
		ls = append(ls, harness.Lever{Lever: l})
	}
	return &setup{levers: ls, hasGPU: true}
}

// validOptions passes Options.Check.
func validOptions(device string, with ...string) *Options {
	return &Options{Device: device, With: with, Rounds: 9, PP: 16, TG: 4, Reps: 1, GenN: 8, WarmupMS: 10, BenchWarm: 10,
		BarPP: 1.015, BarTG: 1.015, ClaimBar: 0.015, GraphTol: 0.5, Gates: "parity,greedy"}
}

// A lever whose path reads one KV cache format (its rule's Needs.KVCache:
// MINFER_ATTN_DECODE_TC, f16) runs both arms with MINFER_CACHE_TYPE pinned
// to it, beside its Requires pin, so that the parity and greedy gates' arm
// processes (and the CPU reference, arm A's settings) run the path on a
// model whose auto cache is f32. A lever without the need gets no cache
// pin, nor one whose need is declared for another backend than the run's.
func TestConfig_KVCacheNeedPinsTheCacheInBothArms(t *testing.T) {
	s := registrySetup()
	cfg, err := s.config(validOptions("cuda"), "MINFER_ATTN_DECODE_TC", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, arm := range []gates.Arm{cfg.A, cfg.B} {
		if arm.Env["MINFER_CACHE_TYPE"] != "f16" || arm.Env["MINFER_NO_SPLITK_ATTN"] != "0" {
			t.Errorf("arm %s env %v: want MINFER_CACHE_TYPE=f16 and MINFER_NO_SPLITK_ATTN=0 pinned", arm.Name, arm.Env)
		}
	}
	if cfg.A.Env["MINFER_ATTN_DECODE_TC"] != "0" || cfg.B.Env["MINFER_ATTN_DECODE_TC"] != "1" || len(cfg.Deviations) != 0 || len(cfg.With) != 0 {
		t.Errorf("arms %v / %v, deviations %v, with %v: the pins are the declaration, not a deviation", cfg.A.Env, cfg.B.Env, cfg.Deviations, cfg.With)
	}
	plain, err := s.config(validOptions("cuda"), "MINFER_FUSE_ATTN_Q8", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.A.Env["MINFER_CACHE_TYPE"]; ok || plain.B.Env["MINFER_CACHE_TYPE"] != "" {
		t.Errorf("a lever without a KV cache need: arms %v / %v, want no MINFER_CACHE_TYPE", plain.A.Env, plain.B.Env)
	}
	// The need is the CUDA rule's: a lever of both backends whose CUDA rule
	// alone declares it is pinned on CUDA and left alone on the CPU.
	both := registrySetup()
	withCUDAKVCache(both, "MINFER_NO_FUSE_FFN", "q8_0")
	if c, err := both.config(validOptions("cuda"), "MINFER_NO_FUSE_FFN", ""); err != nil || c.A.Env["MINFER_CACHE_TYPE"] != "q8_0" || c.B.Env["MINFER_CACHE_TYPE"] != "q8_0" {
		t.Errorf("cuda: arms %v / %v, %v; want MINFER_CACHE_TYPE=q8_0", c.A.Env, c.B.Env, err)
	}
	if c, err := both.config(validOptions("cpu"), "MINFER_NO_FUSE_FFN", ""); err != nil || c.A.Env["MINFER_CACHE_TYPE"] != "" || c.B.Env["MINFER_CACHE_TYPE"] != "" {
		t.Errorf("cpu: arms %v / %v, %v; want no cache pin", c.A.Env, c.B.Env, err)
	}
}

// withCUDANeeds changes the named lever's CUDA rule's needs in s's
// registry copy (the rule is copied, not shared with other setups).
func withCUDANeeds(s *setup, name string, set func(*levers.Needs)) {
	for i := range s.levers {
		if l := &s.levers[i]; l.Name == name {
			lv := *l.Liveness
			r := *lv.CUDA
			set(&r.Needs)
			lv.CUDA = &r
			l.Liveness = &lv
		}
	}
}

// withCUDAKVCache sets the named lever's CUDA rule's KV cache need.
func withCUDAKVCache(s *setup, name, format string) {
	withCUDANeeds(s, name, func(n *levers.Needs) { n.KVCache = format })
}

// --with MINFER_CACHE_TYPE=X with another X than the format the path reads
// cannot run (exit 2, before anything runs), as a --with against a Requires
// pin cannot; the same format is accepted (a deviation-free repeat of the
// pin, stated as a --with). A declared need that is no format (auto) cannot
// run either.
func TestConfig_WithAnotherKVCacheThanThePathNeedsCannotRun(t *testing.T) {
	s := registrySetup()
	for _, x := range []string{"f32", "q8_0", "auto"} {
		_, err := s.config(validOptions("cuda", "MINFER_CACHE_TYPE="+x), "MINFER_ATTN_DECODE_TC", "")
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != gates.ExitCannotRun || !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_TC's path runs only over a KV cache of f16") {
			t.Errorf("--with MINFER_CACHE_TYPE=%s: %v, want could not run (exit 2) naming the need", x, err)
		}
	}
	_, err := s.config(validOptions("cuda", "MINFER_NO_SPLITK_ATTN=1"), "MINFER_ATTN_DECODE_TC", "")
	if ExitCode(err) != 2 || !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_TC requires MINFER_NO_SPLITK_ATTN=0") {
		t.Errorf("--with against a Requires pin: %v", err)
	}
	cfg, err := s.config(validOptions("cuda", "MINFER_CACHE_TYPE=f16"), "MINFER_ATTN_DECODE_TC", "")
	if err != nil || cfg.B.Env["MINFER_CACHE_TYPE"] != "f16" {
		t.Errorf("--with the pinned format: %v, arm B %v", err, cfg.B.Env)
	}
	withCUDAKVCache(s, "MINFER_ATTN_DECODE_TC", "auto")
	if _, err := s.config(validOptions("cuda"), "MINFER_ATTN_DECODE_TC", ""); ExitCode(err) != 2 || !strings.Contains(err.Error(), "auto names no KV cache format") {
		t.Errorf("a need of kv_cache auto: %v, want could not run", err)
	}
}

// withCUDAAnyDepth sets the named lever's CUDA rule's any_depth setting.
func withCUDAAnyDepth(s *setup, name, setting string) {
	withCUDANeeds(s, name, func(n *levers.Needs) { n.AnyDepth = setting })
}

// MINFER_ATTN_DECODE_TC's any_depth setting (MINFER_ATTN_DECODE_TC_FROM=0)
// is checked like the other pins but kept out of both arms' settings: the
// gates apply it in the correctness gates alone (gates.AnyDepthGate), so
// the A/B runs the route at its default. One that names no lever, a value
// its lever refuses or the lever under test cannot run (exit 2), before
// anything runs.
func TestConfig_AnyDepthPinIsCheckedButKeptOutOfTheArms(t *testing.T) {
	s := registrySetup()
	cfg, err := s.config(validOptions("cuda"), "MINFER_ATTN_DECODE_TC", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, arm := range []gates.Arm{cfg.A, cfg.B} {
		if v, ok := arm.Env["MINFER_ATTN_DECODE_TC_FROM"]; ok || arm.Env["MINFER_CACHE_TYPE"] != "f16" {
			t.Errorf("arm %s env %v (from %q): want the cache pinned and no any_depth setting", arm.Name, arm.Env, v)
		}
	}
	if len(cfg.Deviations) != 0 {
		t.Errorf("deviations %v", cfg.Deviations)
	}
	for _, bad := range []string{"MINFER_ATTN_DECODE_TC_FROM=-1", "MINFER_NOPE=0", "MINFER_ATTN_DECODE_TC=1"} {
		x := registrySetup()
		withCUDAAnyDepth(x, "MINFER_ATTN_DECODE_TC", bad)
		if _, err := x.config(validOptions("cuda"), "MINFER_ATTN_DECODE_TC", ""); ExitCode(err) != 2 {
			t.Errorf("any_depth %s: %v, want could not run", bad, err)
		}
	}
}

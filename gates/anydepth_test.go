package gates

import (
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
)

// TestForGate_AnyDepthPinInTheCorrectnessGatesNotTheABOrProfile: a lever
// whose CUDA rule declares an any_depth setting runs parity, greedy and the
// suite with it in both arms (over arm B's own value of that lever: the
// path must run there), and the A/B and the profile gate with the arms as
// the run set them; the config the run holds is not changed. The CPU
// (no any_depth on its rule), a run between builds and a lever without
// the need pin nothing; the suite's settings keep the pin.
func TestForGate_AnyDepthPinInTheCorrectnessGatesNotTheABOrProfile(t *testing.T) {
	lv := harness.Lever{Lever: levers.Lever{Name: "MINFER_X", Liveness: &harness.Liveness{
		CUDA: &harness.PathRule{Needs: harness.Needs{AnyDepth: "MINFER_X_FROM=0"}}, CPU: &harness.PathRule{}}}}
	cfg := Config{Lever: lv, Backend: "cuda",
		A: Arm{Name: "A", Env: map[string]string{"MINFER_X": "0"}},
		B: Arm{Name: "B", Env: map[string]string{"MINFER_X": "1", "MINFER_X_FROM": "4096"}}}
	for _, g := range AllGates {
		got := forGate(cfg, g)
		want := ""
		if g == GateParity || g == GateGreedy || g == GateSuite {
			want = "0"
		}
		if a, b := got.A.Env["MINFER_X_FROM"], got.B.Env["MINFER_X_FROM"]; want != "" && (a != want || b != want) {
			t.Errorf("%s: arms %v / %v, want MINFER_X_FROM=0 in both", g, got.A.Env, got.B.Env)
		} else if want == "" && (a != "" || b != "4096") {
			t.Errorf("%s: arms %v / %v, want them as the run set them", g, got.A.Env, got.B.Env)
		}
		if AnyDepthGate(g) != (want != "") {
			t.Errorf("AnyDepthGate(%s) = %v", g, AnyDepthGate(g))
		}
	}
	if _, ok := cfg.A.Env["MINFER_X_FROM"]; ok || cfg.B.Env["MINFER_X_FROM"] != "4096" {
		t.Errorf("forGate changed the run's own arms: %v / %v", cfg.A.Env, cfg.B.Env)
	}
	if e := suiteEnv(forGate(cfg, GateSuite), forGate(cfg, GateSuite).B.Env); e["MINFER_X_FROM"] != "0" || e["MINFER_X"] != "1" {
		t.Errorf("suite env %v, want the lever and the pin", e)
	}
	cpuCfg, between, plain := cfg, cfg, cfg
	cpuCfg.Backend, between.Between = "cpu", true
	plain.Lever = harness.Lever{Lever: levers.Lever{Name: "MINFER_X"}}
	for name, c := range map[string]Config{"cpu": cpuCfg, "between builds": between, "no need": plain} {
		if got := forGate(c, GateParity); got.A.Env["MINFER_X_FROM"] != "" || got.B.Env["MINFER_X_FROM"] != "4096" {
			t.Errorf("%s: parity arms %v / %v, want no pin", name, got.A.Env, got.B.Env)
		}
	}
}

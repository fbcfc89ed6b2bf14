package gates

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness/stats"
)

// calibratedTGSD is the decode noise the seed test runs at: the committed
// H200 calibration of the default workload when there is one (its deciding
// basis), else the sd of the per-round log ratio seen in the committed H200
// lever reports before calibration existed (about 2.5%).
func calibratedTGSD(t *testing.T) (float64, string) {
	ms, _ := filepath.Glob("../reports/calibration/NVIDIA-H200/qwen2-0.5b-Q8_0-seed1-pp512-tg128-r3.json")
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var c Calibration
		if json.Unmarshal(b, &c) == nil {
			for _, k := range []string{"tg_" + BasisDevice, "tg_" + BasisWall} {
				if sd, ok := c.SD[k]; ok && sd > 0 {
					return sd, m + " " + k
				}
			}
		}
	}
	return 0.025, "the committed H200 reports' decode noise"
}

// Issue 13, hole 4: at the calibrated noise, gate 3 with its pre-registered
// rounds refuses a decode slowdown of twice its bar (slow_decode=0.03) in at
// least 80% of seeds. The fake minfer draws each process's speed with that
// noise (deterministic per seed), arm B carries the mutation.
func TestAB_RefusesTwiceTheBarAtTheCalibratedNoiseInAtLeast80PercentOfSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few thousand fake processes")
	}
	sd, from := calibratedTGSD(t)
	cal := &Calibration{Rounds: 21, SD: map[string]float64{"pp_wall": 0.003, "tg_wall": sd}}
	plan := cal.PlanFor("test", 1.015, 1.015, false, stats.MaxRounds)
	if !plan.OK {
		t.Fatalf("sd %.4f (%s) cannot be powered within %d rounds: %s", sd, from, stats.MaxRounds, plan.Why)
	}
	const seeds = 25
	refused := 0
	for seed := 1; seed <= seeds; seed++ {
		r := seededAB(t, sd, plan, seed, "slow_decode=0.03")
		if r.Status == Fail && strings.Contains(r.Reason, "tg4") {
			refused++
		}
	}
	rate := float64(refused) / seeds
	t.Logf("sd %.4f (%s): %d rounds pre-registered (power %.2f); refused %d of %d seeds", sd, from, plan.N, plan.Need["tg_wall"].Power, refused, seeds)
	if rate < stats.TargetPower {
		t.Fatalf("refused %.2f of seeds, want >= %.1f", rate, stats.TargetPower)
	}
}

// The same seeds without the mutation: the gate passes at its power (no
// refusals beyond the test's alpha), so the refusals above are the
// mutation's.
func TestAB_NoMutationAtTheCalibratedNoiseRarelyRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few thousand fake processes")
	}
	sd, _ := calibratedTGSD(t)
	cal := &Calibration{Rounds: 21, SD: map[string]float64{"pp_wall": 0.003, "tg_wall": sd}}
	plan := cal.PlanFor("test", 1.015, 1.015, false, stats.MaxRounds)
	refused := 0
	const seeds = 6
	for seed := 1; seed <= seeds; seed++ {
		if r := seededAB(t, sd, plan, 100+seed, ""); r.Status == Fail {
			refused++
		}
	}
	if refused > 1 {
		t.Fatalf("refused %d of %d seeds without a mutation", refused, seeds)
	}
}

// seededAB runs gate 3 of MINFER_NO_FUSE_FFN on the fake minfer with the
// rounds of plan, every process's speed drawn at log-ratio sd from seed,
// and mutate ("" none) in arm B.
func seededAB(t *testing.T, sd float64, plan *PowerPlan, seed int, mutate string) Result {
	t.Helper()
	t.Setenv("FAKEMINFER_NOISE_SD", strconv.FormatFloat(sd, 'g', -1, 64))
	t.Setenv("FAKEMINFER_SEED", strconv.Itoa(seed))
	t.Setenv("FAKEMINFER_COUNTER", filepath.Join(t.TempDir(), "counter"))
	cfg := leverCfg(t, "MINFER_NO_FUSE_FFN")
	cfg.Backend, cfg.Device = "cpu", "cpu"
	cfg.Power, cfg.Rounds = plan, plan.N
	cfg.WarmupMS, cfg.BenchWarm, cfg.Reps = 1, 1, 1
	if mutate != "" {
		cfg.B.Env["MINFER_TEST_MUTATE"] = mutate
	}
	return AB(context.Background(), cfg, &Env{M: fake(t)})
}

package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// At the decode noise of the committed H200 reports (log-ratio sd 2.5%),
// 9 rounds refuse a true 3% slowdown only about half the time (issue 13
// measured 44% passes by simulation; this model gives 48%).
func TestNotSlowerPower_NineRoundsAtTwoPointFivePercentNoiseIsAboutAHalf(t *testing.T) {
	p := NotSlowerPower(9, 0.025, 1.015, 1.03)
	if math.Abs(p-0.52) > 0.03 {
		t.Fatalf("power %.3f, want ~0.52", p)
	}
}

// At a slowdown equal to the bar the refusal rate is the test's alpha.
func TestNotSlowerPower_AtTheBarIsAtMostAlpha(t *testing.T) {
	for n := 4; n <= 45; n++ {
		if p := NotSlowerPower(n, 0.02, 1.015, 1.015); p > NotSlowerAlpha+1e-12 {
			t.Errorf("n=%d: refusal rate %.4f at the bar > alpha %v", n, p, NotSlowerAlpha)
		}
	}
}

// The closed form agrees with simulating the rule itself.
func TestNotSlowerPower_MatchesMonteCarloOfNotSlowerWithin2Points(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		n      int
		sd, s  float64
		bar    float64
		trials int
	}{{9, 0.025, 1.03, 1.015, 4000}, {21, 0.02, 1.03, 1.015, 4000}, {9, 0.1, 1.5, 1.25, 4000}} {
		refused := 0
		r := make([]float64, c.n)
		for range c.trials {
			for i := range r {
				r[i] = math.Exp(-math.Log(c.s) + c.sd*rng.NormFloat64())
			}
			if !NotSlower(r, c.bar).Pass {
				refused++
			}
		}
		mc := float64(refused) / float64(c.trials)
		if want := NotSlowerPower(c.n, c.sd, c.bar, c.s); math.Abs(mc-want) > 0.02 {
			t.Errorf("%+v: simulated %.3f, formula %.3f", c, mc, want)
		}
	}
}

func TestRoundsFor_SmallestRoundsReachingEightyPercentOrUnderpowered(t *testing.T) {
	r := RoundsFor(0.025, 1.015, TargetPower, MinRounds, MaxRounds)
	if !r.OK || r.Power < TargetPower || r.N <= 9 || r.N > 45 {
		t.Fatalf("%+v", r)
	}
	for n := MinRounds; n < r.N; n++ {
		if NotSlowerPower(n, 0.025, 1.015, 1.03) >= TargetPower {
			t.Errorf("n=%d already reaches the target, RoundsFor said %d", n, r.N)
		}
	}
	if quiet := RoundsFor(0.003, 1.015, TargetPower, MinRounds, MaxRounds); !quiet.OK || quiet.N != MinRounds {
		t.Errorf("low noise needs the minimum: %+v", quiet)
	}
	under := RoundsFor(0.2, 1.015, TargetPower, MinRounds, 45)
	if under.OK || under.N != 45 || !(under.MinDetectable > 1.03) || under.Power >= TargetPower {
		t.Errorf("noisy: %+v", under)
	}
	if capped := RoundsFor(0.025, 1.015, TargetPower, MinRounds, 12); capped.OK {
		t.Errorf("a cap of 12 cannot reach 0.8 at sd 2.5%%: %+v", capped)
	}
}

func TestMinDetectableSlowdown_IsWherePowerCrossesTheTarget(t *testing.T) {
	for _, sd := range []float64{0.005, 0.025, 0.06} {
		s := MinDetectableSlowdown(15, sd, 1.015, TargetPower)
		if p := NotSlowerPower(15, sd, 1.015, s*1.0001); p < TargetPower-1e-6 {
			t.Errorf("sd %v: power %.4f just above the MDS %.4f", sd, p, s)
		}
		if p := NotSlowerPower(15, sd, 1.015, s*0.999); p >= TargetPower {
			t.Errorf("sd %v: power %.4f below the MDS %.4f already reaches the target", sd, p, s)
		}
	}
	if s := MinDetectableSlowdown(3, 0.01, 1.015, TargetPower); !math.IsInf(s, 1) {
		t.Errorf("3 rounds can never refuse, MDS %v", s)
	}
}

func TestNoisierThan_FlagsARunTwiceAsNoisyAsItsCalibration(t *testing.T) {
	if p := NoisierThan(0.01, 15, 0.01); p < 0.3 || p > 0.6 {
		t.Errorf("as noisy as calibrated: p %.3f", p)
	}
	if p := NoisierThan(0.02, 15, 0.01); p > 1e-4 {
		t.Errorf("twice as noisy: p %.3g", p)
	}
	if p := NoisierThan(0.01, 1, 0.01); !math.IsNaN(p) {
		t.Errorf("one round: %v", p)
	}
}

func TestClaimFalsePositiveRate_ZeroOnTightAAOneOnAShiftedSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	aa := make([]float64, 30)
	for i := range aa {
		aa[i] = math.Exp(0.002 * rng.NormFloat64())
	}
	if fp := ClaimFalsePositiveRate(aa, 9, 0.015, 2000, 1); fp != 0 {
		t.Errorf("A/A within 0.2%%: claim fires %.3f of the time", fp)
	}
	shifted := []float64{1.03, 1.04, 1.05, 1.02, 1.03}
	if fp := ClaimFalsePositiveRate(shifted, 9, 0.015, 500, 1); fp < 0.99 {
		t.Errorf("every ratio above the bar: fires %.3f", fp)
	}
	if fp := ClaimFalsePositiveRate(shifted, 9, 0.015, 500, 1); fp != ClaimFalsePositiveRate(shifted, 9, 0.015, 500, 1) {
		t.Error("not deterministic for a seed")
	}
}

func TestLogSD_OfKnownRatios(t *testing.T) {
	r := []float64{math.Exp(0.01), math.Exp(-0.01), math.Exp(0.01), math.Exp(-0.01)}
	if sd := LogSD(r); math.Abs(sd-0.011547) > 1e-5 {
		t.Fatalf("sd %v", sd)
	}
	if !math.IsNaN(LogSD([]float64{1})) || !math.IsNaN(LogSD([]float64{1, -1})) {
		t.Error("invalid input not NaN")
	}
}

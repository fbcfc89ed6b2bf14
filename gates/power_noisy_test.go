package gates

import (
	"math"
	"testing"
)

// A run noisier than its calibration is judged at its own sd (GATES.md:
// the not-slower check must refuse twice its bar with probability >= 0.8):
// still powered when that sd allows it, underpowered when it does not.
// Seen on the H200 (2026-12-02, MINFER_KERNELS): pp512 sd 0.0017 against a
// calibrated 0.0010 left power 1.00 at 9 rounds, yet the gate said
// "underpowered".
func TestMetricPower_ANoisierRunIsJudgedAtItsOwnSD(t *testing.T) {
	cfg := Config{Power: &PowerPlan{File: "cal.json", Rounds: 11, SD: map[string]float64{"pp_device": 0.001}}}
	ratios := func(sd float64) []float64 {
		// 9 ratios whose logs have mean 0 and sd sd: +-sd alternating, one 1.
		r := []float64{1}
		for i := range 8 {
			r = append(r, math.Exp(sd*float64(1-2*(i%2))*math.Sqrt(9.0/8.0)))
		}
		return r
	}
	p := metricPower(cfg, "pp", "device", 1.015, ratios(0.0017))
	if !p.Noisy || float64(p.SD) < 0.0016 || p.Underpowered {
		t.Errorf("sd 0.0017 against a calibrated 0.0010: noisy %v, power at sd %.4f, underpowered %v; want noisy, judged at the run's sd, powered",
			p.Noisy, float64(p.SD), p.Underpowered)
	}
	p = metricPower(cfg, "pp", "device", 1.015, ratios(0.02))
	if !p.Noisy || !p.Underpowered {
		t.Errorf("sd 0.02 against a calibrated 0.0010: noisy %v, underpowered %v (power %.2f at sd %.4f); want both", p.Noisy, p.Underpowered, float64(p.Power), float64(p.SD))
	}
	p = metricPower(cfg, "pp", "device", 1.015, ratios(0.0009))
	if p.Noisy || float64(p.SD) != 0.001 {
		t.Errorf("sd 0.0009 against a calibrated 0.0010: noisy %v, sd %.4f; want the calibration's", p.Noisy, float64(p.SD))
	}
}

package gates

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/harness/stats"
)

// Incomparable says why two stored lever results cannot be compared: the
// first field that differs, with both values.
type Incomparable struct {
	Field, Old, New string
}

func (e *Incomparable) Error() string {
	return fmt.Sprintf("not comparable: %s differs (%s in the old result, %s in the new one)", e.Field, e.Old, e.New)
}

// Comparable checks that two lever results ran the same experiment: the
// same lever and arms (and mutation), workload (model by sha256, its file
// type where both recorded it, pp and tg), backend and GPU model. Only then
// do their B/A ratios measure the same thing.
func Comparable(old, new *Record) error {
	gpu := func(r *Record) string {
		if r.Env.GPU != nil {
			return r.Env.GPU.Name
		}
		return "no GPU"
	}
	ft := func(r *Record) string {
		if r.Env.ModelFileType == "" {
			return "?"
		}
		return r.Env.ModelFileType
	}
	checks := []struct{ field, o, n string }{
		{"lever", old.Lever, new.Lever},
		{"arms (A -> B)", old.A + " -> " + old.B, new.A + " -> " + new.B},
		{"mutation", old.Mutate, new.Mutate},
		{"model sha256", old.Env.ModelSHA256, new.Env.ModelSHA256},
		{"pp", fmt.Sprint(old.Config.PP), fmt.Sprint(new.Config.PP)},
		{"tg", fmt.Sprint(old.Config.TG), fmt.Sprint(new.Config.TG)},
		{"backend", backendOf(old), backendOf(new)},
		{"GPU model", gpu(old), gpu(new)},
	}
	if ft(old) != "?" && ft(new) != "?" {
		checks = append(checks, struct{ field, o, n string }{"weight type", ft(old), ft(new)})
	}
	for _, c := range checks {
		if c.o != c.n {
			return &Incomparable{Field: c.field, Old: c.o, New: c.n}
		}
	}
	return nil
}

// backendOf is where a record's arms ran (records from before the field:
// what the bench said).
func backendOf(r *Record) string {
	if r.Config.Backend != "" {
		return r.Config.Backend
	}
	return r.Env.Backend
}

// MetricChange is one metric of two comparable lever results.
type MetricChange struct {
	Key, Name, Basis string
	// Ratios are each run's per-round B/A ratios.
	OldRatios, NewRatios []float64
	stats.RatioChange
	// OldB, NewB: arm B's median tok/s of each run (information only:
	// absolute speeds of separate runs carry the machine's drift).
	OldB, NewB float64
}

// RecordChange is the comparison of two stored lever results.
type RecordChange struct {
	Lever, A, B string
	Threshold   float64
	Alpha       float64
	Metrics     []MetricChange
	// GeoMean is the geometric mean of the metrics' changes.
	GeoMean float64
	// Regressed: some metric significantly slower beyond the threshold.
	Regressed bool
	// OldClocks / NewClocks are the GPU readings before each run.
	OldClocks, NewClocks string
}

// CompareRecords compares two comparable lever results metric by metric:
// the per-round B/A ratios of each run (drift cancels inside each run,
// which interleaved its arms), by CompareRatios at stats.CompareAlpha.
// threshold is a fraction (0.02). Results that are not comparable are an
// *Incomparable.
func CompareRecords(old, new *Record, threshold float64) (*RecordChange, error) {
	if err := Comparable(old, new); err != nil {
		return nil, err
	}
	oa, na := abOf(old), abOf(new)
	if oa == nil || na == nil {
		return nil, fmt.Errorf("compare: both results need gate 3 (ab)")
	}
	c := &RecordChange{Lever: new.Lever, A: new.A, B: new.B, Threshold: threshold, Alpha: stats.CompareAlpha,
		OldClocks: clocksOf(old), NewClocks: clocksOf(new)}
	var changes []float64
	for _, key := range []string{"pp", "tg"} {
		om, nm, ok := sameBasis(oa, na, key)
		if !ok {
			continue
		}
		mc := MetricChange{Key: key, Name: nm.Name, Basis: basisName(nm.Basis), OldRatios: om.Ratios, NewRatios: nm.Ratios,
			RatioChange: stats.CompareRatios(om.Ratios, nm.Ratios, threshold), OldB: om.SummaryB.Median, NewB: nm.SummaryB.Median}
		c.Regressed = c.Regressed || mc.Verdict == stats.VerdictSlower && mc.Beyond
		if !math.IsNaN(mc.Change) {
			changes = append(changes, mc.Change)
		}
		c.Metrics = append(c.Metrics, mc)
	}
	if len(c.Metrics) == 0 {
		return nil, fmt.Errorf("compare: no metric of both results on one timing basis")
	}
	c.GeoMean = stats.GeoMean(changes)
	return c, nil
}

// abOf is a record's gate 3 detail (nil without one).
func abOf(r *Record) *ABDetail {
	for _, g := range r.Gates {
		if g.AB != nil {
			return g.AB
		}
	}
	return nil
}

// sameBasis finds metric key in both runs on one timing basis: the
// deciding metrics when their bases agree, else both runs' wall-time view.
func sameBasis(o, n *ABDetail, key string) (Metric, Metric, bool) {
	find := func(d *ABDetail, basis string) (Metric, bool) {
		for _, m := range append(append([]Metric{}, d.Metrics...), d.Wall...) {
			if m.Key == key && basisName(m.Basis) == basis && len(m.Ratios) > 0 {
				return m, true
			}
		}
		return Metric{}, false
	}
	for _, b := range []string{BasisDevice, BasisWall} {
		om, ok1 := find(o, b)
		nm, ok2 := find(n, b)
		if ok1 && ok2 {
			return om, nm, true
		}
	}
	return Metric{}, Metric{}, false
}

// basisName: records from before the timing basis decided on wall time.
func basisName(b string) string {
	if b == "" {
		return BasisWall
	}
	return b
}

func clocksOf(r *Record) string {
	if r.Env.GPU != nil {
		return r.Env.GPU.String()
	}
	return "n/a (no GPU)"
}

package gates

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// The search is git bisect's: the untried commit nearest the middle, the
// older on a tie; a skipped commit leaves the range open around it.
func TestBisection_NarrowsToTheFirstBadAndKeepsSkippedCommitsInTheRange(t *testing.T) {
	commits := []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"}
	firstBad := 5
	b := NewBisection(commits)
	var probed []int
	for {
		i, ok := b.Next()
		if !ok {
			break
		}
		probed = append(probed, i)
		switch {
		case i == 3:
			b.Record(i, Untestable)
		case i >= firstBad:
			b.Record(i, LikeBad)
		default:
			b.Record(i, LikeGood)
		}
	}
	lg, fb, between := b.Range()
	if lg != 4 || fb != 5 || len(between) != 0 || !reflect.DeepEqual(probed, []int{3, 4, 5}) {
		t.Fatalf("probed %v: last good %d first bad %d between %v", probed, lg, fb, between)
	}
	// The commit just before the first bad cannot be judged: a range of two.
	b = NewBisection(commits)
	for {
		i, ok := b.Next()
		if !ok {
			break
		}
		switch {
		case i == 4:
			b.Record(i, Unknown)
		case i >= firstBad:
			b.Record(i, LikeBad)
		default:
			b.Record(i, LikeGood)
		}
	}
	if lg, fb, between := b.Range(); lg != 3 || fb != 5 || !reflect.DeepEqual(between, []int{4}) {
		t.Fatalf("with 4 unknown: %d %d %v", lg, fb, between)
	}
}

// A probe is judged by where its per-round speed sits between the ends':
// near good, near bad, or (an interval across the midpoint) unknown; a
// speed-up is judged the same way with the direction turned.
func TestSpeedPosition_JudgesBySideOfTheMidpointEitherDirection(t *testing.T) {
	round := func(v float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v * (1 + 0.002*float64(i%3-1))
		}
		return out
	}
	good, bad := round(100, 9), round(90, 9)
	for _, c := range []struct {
		probe float64
		want  Outcome
	}{{99.8, LikeGood}, {90.3, LikeBad}} {
		p := SpeedPosition(good, round(c.probe, 9), bad)
		if got := p.Judge(); got != c.want {
			t.Errorf("probe %.1f between 100 and 90: %s, want %s (median %+.4f [%+.4f, %+.4f])", c.probe, got, c.want, p.Median, p.Lo, p.Hi)
		}
	}
	// At the midpoint with noise either side: unknown.
	mid := []float64{95.5, 94.4, 95.6, 94.3, 95.4, 94.6, 95.7, 94.5, 95.0}
	if p := SpeedPosition(good, mid, bad); p.Judge() != Unknown {
		t.Errorf("a probe at the midpoint: %s", p.Judge())
	}
	// A speed-up: bad faster than good.
	if p := SpeedPosition(round(90, 9), round(110, 9), round(110, 9)); p.Judge() != LikeBad {
		t.Errorf("speed-up, probe like the fast end: %s", p.Judge())
	}
	// A lever's gain: the ends' log ratios +10% and 0%.
	if p := RatioPosition(math.Log(1.10), 0, round(1.095, 9)); p.Judge() != LikeGood {
		t.Errorf("gain kept: %s", p.Judge())
	}
	if p := RatioPosition(math.Log(1.10), 0, round(1.002, 9)); p.Judge() != LikeBad {
		t.Errorf("gain gone: %s", p.Judge())
	}
}

// A bisect's old build predates `bench --format`: its profile bench must
// give the format as -o, or the per-kernel difference goes missing (the
// first H200 bisect, 2026-12-02: "unknown flag: --format").
func TestProfileBench_LegacyArmTakesTheFormatAsO(t *testing.T) {
	cfg := Config{PP: 16, TG: 4, Device: "cuda", Model: "m.gguf"}
	old := strings.Join(profileBench(cfg, Arm{LegacyBench: true}), " ")
	now := strings.Join(profileBench(cfg, Arm{}), " ")
	if !strings.Contains(old, "-o json") || strings.Contains(old, "--format") {
		t.Errorf("legacy arm: %s", old)
	}
	if !strings.Contains(now, "--format json") {
		t.Errorf("current arm: %s", now)
	}
}

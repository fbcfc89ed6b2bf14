package gates

import (
	"math"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/harness"
)

const actQuantTol = "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"

func mustTol(t *testing.T, s string) harness.Tolerance {
	t.Helper()
	tol, err := harness.ParseTolerance(s)
	if err != nil {
		t.Fatal(err)
	}
	return tol
}

// armsAtRelL2 returns A (synthLogits: std ~8, top-1 margin 2) and B = A plus a
// difference of exactly maxd at one logit and +-e elsewhere, e chosen so that
// B's rel L2 from A is rel; top-1 is unchanged (maxd + e < 2).
func armsAtRelL2(t *testing.T, positions, vocab int, rel, maxd float64) ([]float32, []float32) {
	t.Helper()
	a := synthLogits(positions, vocab)
	var den float64
	for _, v := range a {
		den += float64(v) * float64(v)
	}
	e := math.Sqrt((rel*rel*den - maxd*maxd) / float64(len(a)-1))
	if !(e < maxd) || maxd+e >= 2 {
		t.Fatalf("fixture: e %.3f", e)
	}
	b := make([]float32, len(a))
	for i, v := range a {
		d := e
		if i%2 == 1 {
			d = -e
		}
		if i == 1 {
			d = maxd
		}
		b[i] = float32(float64(v) + d)
	}
	return a, b
}

func TestAvsB_RelL2ClassPassesRel003Diff074AndMaxDiffBarFailsIt(t *testing.T) {
	const positions, vocab = 4, 2048
	a, b := armsAtRelL2(t, positions, vocab, 0.03, 0.74)
	c := CompareAvsB(a, b, vocab, mustTol(t, actQuantTol))
	if math.Abs(float64(c.RelL2)-0.03) > 1e-4 || math.Abs(float64(c.MaxAbsDiff)-0.74) > 1e-4 || c.Top1Agree != positions {
		t.Fatalf("fixture: rel L2 %.5f max|diff| %.5f top-1 %d/%d", float64(c.RelL2), float64(c.MaxAbsDiff), c.Top1Agree, positions)
	}
	if !c.Pass || !strings.Contains(c.Why, "rel L2 0.03 <= 0.05") || !strings.Contains(c.Why, actQuantTol) {
		t.Errorf("rel L2 0.03, max|diff| 0.74 under %q: pass %v: %s", actQuantTol, c.Pass, c.Why)
	}

	abs := "activation-quantization: max|diff| <= 0.5, top-1 equal at every position"
	c = CompareAvsB(a, b, vocab, mustTol(t, abs))
	if c.Pass || !strings.Contains(c.Why, "max|diff| 0.74 > 0.5") || !strings.Contains(c.Why, abs) {
		t.Errorf("the same logits under %q: pass %v: %s", abs, c.Pass, c.Why)
	}
	// Both bounds declared: both must hold.
	both := "x: max|diff| <= 0.5, rel L2 <= 0.05, top-1 equal at every position"
	if c = CompareAvsB(a, b, vocab, mustTol(t, both)); c.Pass || !strings.Contains(c.Why, "max|diff| 0.74 > 0.5") {
		t.Errorf("under %q: pass %v: %s", both, c.Pass, c.Why)
	}
	// No class: bitwise.
	if c = CompareAvsB(a, b, vocab, mustTol(t, "")); c.Pass || !strings.Contains(c.Why, "not bitwise equal") {
		t.Errorf("bitwise: pass %v: %s", c.Pass, c.Why)
	}
	if c = CompareAvsB(a, a, vocab, mustTol(t, actQuantTol)); !c.Pass || c.Why != "bitwise equal" {
		t.Errorf("identical arms: pass %v: %s", c.Pass, c.Why)
	}
}

func TestAvsB_RelL2ClassFailsRel02(t *testing.T) {
	const positions, vocab = 4, 2048
	a := synthLogits(positions, vocab)
	b := make([]float32, len(a))
	for i, v := range a {
		b[i] = v * 1.2 // rel L2 exactly 0.2; the argmax is unchanged
	}
	c := CompareAvsB(a, b, vocab, mustTol(t, actQuantTol))
	if math.Abs(float64(c.RelL2)-0.2) > 1e-4 || c.Top1Agree != positions {
		t.Fatalf("fixture: rel L2 %.5f top-1 %d/%d", float64(c.RelL2), c.Top1Agree, positions)
	}
	if c.Pass || !strings.Contains(c.Why, "rel L2 0.2 > 0.05") || strings.Contains(c.Why, "top-1 differs") {
		t.Errorf("rel L2 0.2: pass %v: %s", c.Pass, c.Why)
	}
}

// flipAt returns A and B (synthLogits) where position 0's runner-up in A sits
// margin below the top and B ranks it first; the rest is identical.
func flipAt(positions, vocab int, margin float64) ([]float32, []float32) {
	a := synthLogits(positions, vocab)
	top := 11 // synthLogits: position 0's top-1 id is (0*37+11) % vocab
	a[0] = a[top] - float32(margin)
	b := append([]float32(nil), a...)
	b[0] = a[top] + 0.01
	return a, b
}

func TestAvsB_Top1FlipExemptAtMargin015FailsAtMargin03(t *testing.T) {
	const positions, vocab = 3, 1024
	tol := mustTol(t, actQuantTol)

	a, b := flipAt(positions, vocab, 0.15)
	c := CompareAvsB(a, b, vocab, tol)
	if p := c.PerPos[0]; p.Agree || !p.Exempt || math.Abs(float64(p.RefMargin)-0.15) > 1e-3 {
		t.Fatalf("fixture: %+v", p)
	}
	if !c.Pass || c.Top1Agree != positions-1 || !strings.Contains(c.Why, "1 top-1 flip(s) exempt") {
		t.Errorf("flip at margin 0.15 under %q: pass %v: %s", actQuantTol, c.Pass, c.Why)
	}

	a, b = flipAt(positions, vocab, 0.3)
	c = CompareAvsB(a, b, vocab, tol)
	if c.Pass || c.PerPos[0].Exempt || !strings.Contains(c.Why, "top-1 differs at pos 0") {
		t.Errorf("flip at margin 0.3 under %q: pass %v: %s", actQuantTol, c.Pass, c.Why)
	}

	// Without a margin clause no flip is exempt, however small the margin.
	a, b = flipAt(positions, vocab, 0.15)
	c = CompareAvsB(a, b, vocab, mustTol(t, "x: rel L2 <= 0.05, top-1 equal at every position"))
	if c.Pass || !strings.Contains(c.Why, "top-1 differs at pos 0") {
		t.Errorf("flip without a margin clause: pass %v: %s", c.Pass, c.Why)
	}
}

// MINFER_DRAFT's class (levers.TolVerifyChunk) takes the H200's synthetic
// 7B pair (rel L2 0.025 with a max|diff| of 1.06, a flip at margin 0.17)
// and refuses rel L2 0.06 or a flip at margin 0.3.
func TestAvsB_VerifyChunkClassPassesThe7BPairRefusesRel006AndAFlipAt03(t *testing.T) {
	const positions, vocab = 4, 2048
	tol := mustTol(t, levers.TolVerifyChunk)
	a, b := armsAtRelL2(t, positions, vocab, 0.025, 1.06)
	if c := CompareAvsB(a, b, vocab, tol); !c.Pass {
		t.Errorf("rel L2 0.025, max|diff| 1.06: %s", c.Why)
	}
	a, b = armsAtRelL2(t, positions, vocab, 0.06, 1.06)
	if c := CompareAvsB(a, b, vocab, tol); c.Pass || !strings.Contains(c.Why, "rel L2 0.06 > 0.05") {
		t.Errorf("rel L2 0.06: pass %v: %s", c.Pass, c.Why)
	}
	a, b = flipAt(positions, vocab, 0.17)
	if c := CompareAvsB(a, b, vocab, tol); !c.Pass {
		t.Errorf("a flip at margin 0.17: %s", c.Why)
	}
	a, b = flipAt(positions, vocab, 0.3)
	if c := CompareAvsB(a, b, vocab, tol); c.Pass {
		t.Errorf("a flip at margin 0.3 passes: %s", c.Why)
	}
}

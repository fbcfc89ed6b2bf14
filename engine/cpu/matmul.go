package cpu

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/quant"
)

// matmulJob computes rows of up to three weights against the same
// activations (three for the fused QKV node). Row r of the concatenation
// belongs to weight w; its outputs go to y[off[w] + j*m[w] + local row].
type matmulJob struct {
	nt, k int
	nw    int
	ws    [3]*weight
	bias  [3][]float32
	act   [3][]byte // quantized activation rows of weight w, nt rows of arb[w]
	arb   [3]int
	off   [3]int
	y     []float32
}

func (j *matmulJob) run(_, lo, hi int) {
	base := 0
	for w := 0; w < j.nw; w++ {
		wt := j.ws[w]
		m := wt.rows
		a, e := max(lo, base), min(hi, base+m)
		for r := a; r < e; r++ {
			lr := r - base
			row := wt.data[lr*wt.rowBytes : (lr+1)*wt.rowBytes]
			for t := 0; t < j.nt; t++ {
				v := wt.tr.Dot(j.k, row, j.act[w][t*j.arb[w]:(t+1)*j.arb[w]])
				if j.bias[w] != nil {
					v += j.bias[w][lr]
				}
				j.y[j.off[w]+t*m+lr] = v
			}
		}
		base += m
	}
}

// quantJob quantizes activation rows to one VecDot format.
type quantJob struct {
	x   []float32
	k   int
	q   func(src []float32, dst []byte)
	dst []byte
	rb  int
}

func (j *quantJob) run(_, lo, hi int) {
	for t := lo; t < hi; t++ {
		j.q(j.x[t*j.k:(t+1)*j.k], j.dst[t*j.rb:(t+1)*j.rb])
	}
}

// matmul computes y = x * W (+ bias) for each weight in ws (up to three, all
// with row length k = len(x)/nt); the outputs are laid out one after another.
// Each activation row is quantized once per distinct VecDot format.
func (b *Backend) matmul(x []float32, nt int, ws [3]*weight, bias [3][]float32, y []float32) error {
	j := &b.mm
	*j = matmulJob{nt: nt, y: y}
	if nt <= 0 || len(x)%nt != 0 {
		return fmt.Errorf("input of %d elements for %d tokens", len(x), nt)
	}
	k := len(x) / nt
	j.k = k
	total := 0
	for w, wt := range ws {
		if wt == nil {
			break
		}
		if wt.rowLen != k || wt.f32 != nil {
			return fmt.Errorf("weight %s has dims %v, input rows of %d", wt.name, wt.dims, k)
		}
		j.nw = w + 1
		j.ws[w], j.bias[w], j.off[w] = wt, bias[w], total
		total += wt.rows * nt
	}
	if total != len(y) {
		return fmt.Errorf("output of %d elements, weights give %d", len(y), total)
	}
	// Quantize the activations once per VecDot format.
	need := 0
	var rbs [3]int
	for w := 0; w < j.nw; w++ {
		vt := j.ws[w].tr.VecDot
		if vt == quant.F32 {
			continue
		}
		rb, err := vt.RowBytes(k)
		if err != nil {
			return fmt.Errorf("weight %s: activation rows of %d as %s: %w", j.ws[w].name, k, vt, err)
		}
		rbs[w] = rb
		need += rb * nt
	}
	if cap(b.act) < need {
		b.act = make([]byte, need)
	}
	act := b.act[:need]
	at := 0
	for w := 0; w < j.nw; w++ {
		vt := j.ws[w].tr.VecDot
		if vt == quant.F32 {
			j.act[w], j.arb[w] = f32bytes(x), 4*k
			continue
		}
		shared := false
		for v := 0; v < w; v++ {
			if j.ws[v].tr.VecDot == vt {
				j.act[w], j.arb[w], shared = j.act[v], j.arb[v], true
				break
			}
		}
		if shared {
			continue
		}
		tr, err := quant.TraitsOf(vt)
		if err != nil || tr.Quantize == nil {
			return fmt.Errorf("weight %s: no quantizer for activation format %s", j.ws[w].name, vt)
		}
		dst := act[at : at+rbs[w]*nt]
		at += rbs[w] * nt
		b.qj = quantJob{x: x, k: k, q: tr.Quantize, dst: dst, rb: rbs[w]}
		b.pool.parallel(nt, 1, &b.qj)
		j.act[w], j.arb[w] = dst, rbs[w]
	}
	rows := total / nt
	b.pool.parallel(rows, 16, j)
	return nil
}

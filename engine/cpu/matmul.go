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

	// Multi-token path (nt > 1, the integer block types): md[w] the
	// kernels of weight w, packed[w] the lanes of act[w]; scr holds one
	// scratch per chunk.
	md     [3]*quant.MultiDot
	packed [3][]int64
	scr    []*mmScratch
}

// mmScratch is the scratch of one chunk of the multi-token matmul.
type mmScratch struct {
	lev  []int8 // levels of a row tile
	acts [3][]byte
	out  [3]float32
}

// mmRowTile is the number of weight rows decoded together in the
// multi-token path: their levels and one packed token group stay in L1/L2
// while the group is dotted against each of them.
const mmRowTile = 8

func (j *matmulJob) run(part, lo, hi int) {
	base := 0
	for w := 0; w < j.nw; w++ {
		wt := j.ws[w]
		m := wt.rows
		a, e := max(lo, base), min(hi, base+m)
		switch {
		case a >= e:
		case j.md[w] != nil:
			j.runMulti(part, w, a-base, e-base)
		default:
			j.runDot(w, a-base, e-base)
		}
		base += m
	}
}

// runDot computes rows [a, e) of weight w with one Dot per (row, token).
func (j *matmulJob) runDot(w, a, e int) {
	wt, m, arb := j.ws[w], j.ws[w].rows, j.arb[w]
	for lr := a; lr < e; lr++ {
		row := wt.data[lr*wt.rowBytes : (lr+1)*wt.rowBytes]
		for t := 0; t < j.nt; t++ {
			v := wt.tr.Dot(j.k, row, j.act[w][t*arb:(t+1)*arb])
			if j.bias[w] != nil {
				v += j.bias[w][lr]
			}
			j.y[j.off[w]+t*m+lr] = v
		}
	}
}

// runMulti computes rows [a, e) of weight w with the multi-token dots: a
// tile of rows is decoded once to integer levels, then every group of three
// tokens (packed into lanes) is dotted against each row of the tile. Each
// output is Dot's value bit for bit (see quant.MultiDot).
func (j *matmulJob) runMulti(part, w, a, e int) {
	wt, m, arb, k := j.ws[w], j.ws[w].rows, j.arb[w], j.k
	md, act, bias := j.md[w], j.act[w], j.bias[w]
	sc := j.scr[part]
	q := sc.lev[:mmRowTile*k]
	acts, out := &sc.acts, &sc.out // not locals: the kernels are func values, locals would escape
	for r0 := a; r0 < e; r0 += mmRowTile {
		r1 := min(r0+mmRowTile, e)
		for lr := r0; lr < r1; lr++ {
			md.Decode(k, wt.data[lr*wt.rowBytes:(lr+1)*wt.rowBytes], q[(lr-r0)*k:(lr-r0+1)*k])
		}
		for t0 := 0; t0 < j.nt; t0 += 3 {
			nl := min(3, j.nt-t0)
			for l := range acts {
				t := t0 + min(l, nl-1) // a zero lane pairs with a valid row
				acts[l] = act[t*arb : (t+1)*arb]
			}
			p := j.packed[w][t0/3*k : (t0/3+1)*k]
			for lr := r0; lr < r1; lr++ {
				md.Dot3(k, wt.data[lr*wt.rowBytes:(lr+1)*wt.rowBytes], q[(lr-r0)*k:(lr-r0+1)*k], p, acts, out)
				for l := 0; l < nl; l++ {
					v := out[l]
					if bias != nil {
						v += bias[lr]
					}
					j.y[j.off[w]+(t0+l)*m+lr] = v
				}
			}
		}
	}
}

// packJob packs the quantized activation rows of one format into lanes of
// three tokens (quant.PackLanes), one token group per index.
type packJob struct {
	vt  quant.Type
	k   int
	act []byte
	rb  int
	nt  int
	dst []int64
}

func (j *packJob) run(_, lo, hi int) {
	for g := lo; g < hi; g++ {
		var rows [3][]byte
		for l := range rows {
			if t := 3*g + l; t < j.nt {
				rows[l] = j.act[t*j.rb : (t+1)*j.rb]
			}
		}
		quant.PackLanes(j.vt, j.k, rows[0], rows[1], rows[2], j.dst[g*j.k:(g+1)*j.k])
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
	if nt > 1 {
		b.prepareMulti(nt, k)
	}
	rows := total / nt
	b.pool.parallel(rows, 16, j)
	return nil
}

// prepareMulti sets up the multi-token path of the job in b.mm: the
// per-weight kernels, the packed activation lanes (once per activation
// format) and the per-chunk scratch. It is for nt > 1 only: with one token
// there is nothing to share, and the type's Dot (decode fused into the dot,
// one pass over the weights) is faster than decode-then-dot.
func (b *Backend) prepareMulti(nt, k int) {
	j := &b.mm
	groups := (nt + 2) / 3
	need := 0
	for w := 0; w < j.nw; w++ {
		if md := quant.MultiDotOf(j.ws[w].typ); md != nil {
			j.md[w] = md
			need += groups * k
		}
	}
	if need == 0 {
		return // F32, F16, BF16: their Dot per token (expanding F16 rows once measured no faster)
	}
	if cap(b.packed) < need {
		b.packed = make([]int64, need)
	}
	for len(b.scr) < b.threads {
		b.scr = append(b.scr, &mmScratch{})
	}
	for _, sc := range b.scr {
		if len(sc.lev) < mmRowTile*k {
			sc.lev = make([]int8, mmRowTile*k)
		}
	}
	j.scr = b.scr
	at := 0
	for w := 0; w < j.nw; w++ {
		if j.md[w] == nil {
			continue
		}
		shared := false
		for v := 0; v < w; v++ {
			if j.md[v] != nil && j.ws[v].tr.VecDot == j.ws[w].tr.VecDot {
				j.packed[w], shared = j.packed[v], true
				break
			}
		}
		if shared {
			continue
		}
		j.packed[w] = b.packed[at : at+groups*k]
		at += groups * k
		b.pj = packJob{vt: j.ws[w].tr.VecDot, k: k, act: j.act[w], rb: j.arb[w], nt: nt, dst: j.packed[w]}
		b.pool.parallel(groups, 1, &b.pj)
	}
}

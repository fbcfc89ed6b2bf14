package cpu

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
)

// loadJob expands KV cells [lo, hi) of one layer to f32 (kv.LoadRow).
type loadJob struct {
	format kv.Format
	k, v   []byte
	kf, vf []float32
	rb, rl int
}

func (j *loadJob) run(_, lo, hi int) {
	for c := lo; c < hi; c++ {
		kv.LoadRow(j.format, j.k[c*j.rb:(c+1)*j.rb], j.kf[c*j.rl:(c+1)*j.rl])
		kv.LoadRow(j.format, j.v[c*j.rb:(c+1)*j.rb], j.vf[c*j.rl:(c+1)*j.rl])
	}
}

// attnJob computes attention for (token, head) pairs [lo, hi).
type attnJob struct {
	q, y              []float32
	kf, vf            []float32
	score             [][]float32
	hd, nh, group, rl int
	start, window     int
	scale             float32
}

func (j *attnJob) run(part, lo, hi int) {
	hd := j.hd
	for task := lo; task < hi; task++ {
		t, h := task/j.nh, task%j.nh
		kvh := h / j.group
		cell := j.start + t
		first := 0
		if j.window > 0 {
			first = max(0, cell-j.window+1)
		}
		q := j.q[task*hd : (task+1)*hd]
		sc := j.score[part][:cell+1-first]
		mx := float32(math.Inf(-1))
		for i := range sc {
			o := (first+i)*j.rl + kvh*hd
			k := j.kf[o : o+hd]
			var s float32
			for d, qv := range q {
				s += float32(qv * k[d])
			}
			s *= j.scale
			sc[i] = s
			mx = max(mx, s)
		}
		var sum float32
		for i, s := range sc {
			e := float32(math.Exp(float64(s - mx)))
			sc[i] = e
			sum += e
		}
		inv := 1 / sum
		out := j.y[task*hd : (task+1)*hd]
		clear(out)
		for i, e := range sc {
			p := e * inv
			o := (first+i)*j.rl + kvh*hd
			v := j.vf[o : o+hd]
			for d := range out {
				out[d] += float32(p * v[d])
			}
		}
	}
}

// attn is causal GQA attention of q [hd, nh, nt] over the layer's KV cells:
// the query of token t sits at cell start+t and attends to cells
// [max(0, cell-window+1), cell]. Scores and softmax are f32 (max-subtracted);
// probabilities are normalised before the weighted sum of V rows, summed in
// cell order.
func (b *Backend) attn(n *graph.Node, q []float32, w []int32, y []float32) error {
	hd, nh, nkv := n.P.HeadDim, n.P.NHead, n.P.NHeadKV
	if hd <= 0 || nh <= 0 || nkv <= 0 || nh%nkv != 0 {
		return fmt.Errorf("bad heads: head_dim %d, %d heads over %d kv heads", hd, nh, nkv)
	}
	if b.cache == nil || nkv*hd != b.kvSpec.RowLen {
		return fmt.Errorf("KV rows of %d values, node wants %d kv heads of %d", b.kvSpec.RowLen, nkv, hd)
	}
	if len(q)%(hd*nh) != 0 || len(y) != len(q) {
		return fmt.Errorf("q of %d and output of %d elements for %d heads of %d", len(q), len(y), nh, hd)
	}
	nt := len(q) / (hd * nh)
	start, kvLen, err := b.window(w, nt)
	if err != nil {
		return err
	}
	first := 0
	if n.P.Window > 0 {
		first = max(0, start-n.P.Window+1)
	}
	if n.P.Layer < 0 || n.P.Layer >= b.kvSpec.NLayer {
		return fmt.Errorf("no KV region for layer %d", n.P.Layer)
	}
	b.load = loadJob{format: b.kvSpec.Format, k: b.cache.K(n.P.Layer), v: b.cache.V(n.P.Layer), kf: b.kf, vf: b.vf, rb: b.cache.RowBytes(), rl: b.kvSpec.RowLen}
	b.offj = offsetJob{&b.load, first}
	b.pool.parallel(kvLen-first, 64, &b.offj)
	scale := n.P.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(hd)))
	}
	b.att = attnJob{q: q, y: y, kf: b.kf, vf: b.vf, score: b.score, hd: hd, nh: nh, group: nh / nkv, rl: b.kvSpec.RowLen,
		start: start, window: n.P.Window, scale: scale}
	b.pool.parallel(nt*nh, 1, &b.att)
	return nil
}

// offsetJob shifts a job's range by off.
type offsetJob struct {
	j   job
	off int
}

func (o *offsetJob) run(part, lo, hi int) { o.j.run(part, lo+o.off, hi+o.off) }

// qkvBiasRopeStore is the fused tail of the QKV projections: add the biases,
// rope q and k, store k and v; returns the roped q. It runs the same kernels
// in the same order as the unfused chain (MatMul bias add, Rope, KvcacheStore).
func (b *Backend) qkvBiasRopeStore(n *graph.Node, xs [][]float32, y []float32) error {
	if len(xs) != 5 || len(n.Biases) != 3 {
		return fmt.Errorf("wants q, k, v, positions, KV window and 3 bias names")
	}
	if len(n.Weights) != 0 && len(n.Weights) != 2 {
		return fmt.Errorf("q/k norm weights %v: want none or two (q norm, k norm)", n.Weights)
	}
	q, k, v, pos, w := xs[0], xs[1], xs[2], i32(xs[3]), i32(xs[4])
	hd, nh, nkv := n.P.HeadDim, n.P.NHead, n.P.NHeadKV
	nt := len(pos)
	if hd <= 0 || len(q) != hd*nh*nt || len(y) != len(q) || len(k) != hd*nkv*nt || len(v) != len(k) {
		return fmt.Errorf("q %d, k %d, v %d, output %d elements for %d tokens of %d/%d heads of %d", len(q), len(k), len(v), len(y), nt, nh, nkv, hd)
	}
	addBias := func(name string, x, dst []float32) error {
		bias, err := b.vector(name, len(x)/nt)
		if err != nil {
			return err
		}
		if bias == nil {
			copy(dst, x)
			return nil
		}
		elementwise(false, x, bias, dst)
		return nil
	}
	if cap(b.kvt) < 2*len(k) {
		b.kvt = make([]float32, 2*len(k))
	}
	kt, vt := b.kvt[:len(k)], b.kvt[len(k):2*len(k)]
	if err := addBias(n.Biases[0], q, y); err != nil {
		return err
	}
	if err := addBias(n.Biases[1], k, kt); err != nil {
		return err
	}
	if err := addBias(n.Biases[2], v, vt); err != nil {
		return err
	}
	if len(n.Weights) == 2 {
		// FuseQkNormRopeStore: the per-head norms OpQkNorm runs, in place
		// (rmsNorm reads a row before it writes it), between bias and rope.
		for i, x := range [][]float32{y, kt} {
			w, err := b.vector(n.Weights[i], hd)
			if err != nil {
				return err
			}
			rmsNorm(x, w, x, hd, n.P.Eps)
		}
	}
	if err := b.ropeRows(y, y, pos, hd, nh, nt, n.P.Theta, n.P.Rope); err != nil {
		return err
	}
	if err := b.ropeRows(kt, kt, pos, hd, nkv, nt, n.P.Theta, n.P.Rope); err != nil {
		return err
	}
	if err := b.kvStore(n.P.Layer, graph.SideK, kt, w); err != nil {
		return err
	}
	return b.kvStore(n.P.Layer, graph.SideV, vt, w)
}

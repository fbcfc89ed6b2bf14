package graph

import (
	"slices"
	"strconv"
	"strings"
)

// Fuse rewrites chains into fused nodes where the Params allow it (the levers
// MINFER_NO_FUSE_QKV / _FFN, MINFER_FUSE_QKNORM, MINFER_FUSE_RESIDUAL,
// MINFER_FUSE_NORM_Q8, MINFER_FUSE_ATTN_Q8, MINFER_FUSE_QKV_ROPE) and the
// backend every node of the chain is assigned to says SupportsFused for that chain. The unfused chain is the reference:
// a fused node computes exactly the same values (the CPU backend executes
// the fused ops it offers). This is the only place fusions are decided: a
// backend executes each node on its own. Run after Assign; returns how many
// rewrites it made.
func Fuse(g *Graph, backends []Backend) (int, error) {
	supports := func(k FuseKind, nodes ...*Node) bool {
		b := nodes[0].Backend
		for _, n := range nodes {
			if n.Backend != b || b < 0 || b >= len(backends) {
				return false
			}
		}
		return backends[b].SupportsFused(k, nodes...)
	}
	count := 0
	if g.Params.FuseQKV {
		count += fuseQkvBiasRopeStore(g, supports)
		count += fuseQKV(g, supports)
	}
	if g.Params.FuseFFN {
		count += fuseFFN(g, supports)
	}
	if g.Params.FuseResidual {
		count += fuseMatMulAdd(g, supports)
	}
	if g.Params.FuseNormQ8 {
		count += fuseNormQ8(g, supports)
	}
	if g.Params.FuseQKV && g.Params.FuseQKVRope {
		count += fuseQKVRopeStore(g, supports)
	}
	if g.Params.FuseResidual && g.Params.FuseAttnQ8 {
		count += fuseAttnQ8(g, supports)
	}
	if count == 0 {
		return 0, nil
	}
	return count, g.compact()
}

type supportsFn func(k FuseKind, nodes ...*Node) bool

func (g *Graph) node(id int) *Node { return g.Nodes[id] }

// only reports whether node id is read by exactly the one consumer c.
func only(cons [][]int, id, c int) bool { return len(cons[id]) == 1 && cons[id][0] == c }

// fuseQkvBiasRopeStore: Attn(Rope(Reshape(MatMul q)), KvStore K(Rope(Reshape(
// MatMul k))), KvStore V(MatMul v)) -> the matmuls lose their biases and one
// QkvBiasRopeStore node adds them, ropes q and k and stores k and v.
//
// With qwen3's per-head norms between the reshapes and the ropes,
// Rope(QkNorm(Reshape(MatMul q))) and Rope(QkNorm(Reshape(MatMul k))), the
// same node also norms q and k (Weights = {q norm, k norm}, P.Eps): only
// when both norms are there with one eps and one head size, each read by
// its rope alone, and the backend offers FuseQkNormRopeStore.
func fuseQkvBiasRopeStore(g *Graph, supports supportsFn) int {
	cons := g.consumers()
	count := 0
	for _, a := range g.Nodes {
		if a.dead || a.Op != OpAttn || len(a.Inputs) != 4 {
			continue
		}
		rq, kvw := g.node(a.Inputs[0]), a.Inputs[1]
		sk, sv := g.node(a.Inputs[2]), g.node(a.Inputs[3])
		if rq.Op != OpRope || sk.Op != OpKvcacheStore || sv.Op != OpKvcacheStore || sk.P.Side != SideK || sv.P.Side != SideV {
			continue
		}
		rk := g.node(sk.Inputs[0])
		if rk.Op != OpRope || rk.Inputs[1] != rq.Inputs[1] || rk.P.Theta != rq.P.Theta || rk.P.Rope != rq.P.Rope {
			continue
		}
		xq, xk, xv := g.node(rq.Inputs[0]), g.node(rk.Inputs[0]), g.node(sv.Inputs[0])
		nq, nk, ok := qkNormPair(g, cons, rq, rk, a.P.HeadDim)
		if !ok || (nq != nil && !g.Params.FuseQKNorm) {
			continue
		}
		kind := FuseQkvBiasRopeStore
		if nq != nil {
			kind, xq, xk = FuseQkNormRopeStore, g.node(nq.Inputs[0]), g.node(nk.Inputs[0])
		}
		mq, mk, mv := matmulUnder(g, xq), matmulUnder(g, xk), matmulUnder(g, xv)
		if mq == nil || mk == nil || mv == nil || sk.Inputs[1] != kvw || sv.Inputs[1] != kvw {
			continue
		}
		if !only(cons, rq.ID, a.ID) || !only(cons, rk.ID, sk.ID) || !only(cons, sk.ID, a.ID) || !only(cons, sv.ID, a.ID) {
			continue
		}
		chain := []*Node{a, rq, rk, sk, sv, mq, mk, mv}
		if nq != nil {
			chain = append(chain, nq, nk)
		}
		if !supports(kind, chain...) {
			continue
		}
		f := &Node{ID: len(g.Nodes), Op: OpQkvBiasRopeStore, Inputs: []int{xq.ID, xk.ID, xv.ID, rq.Inputs[1], kvw},
			Shape: rq.Shape, Biases: []string{mq.Bias, mk.Bias, mv.Bias}, Name: strings.TrimSuffix(a.Name, "attn") + "qkv_bias_rope_store",
			P:       OpParams{Theta: rq.P.Theta, Rope: rq.P.Rope, Layer: a.P.Layer, NHead: a.P.NHead, NHeadKV: a.P.NHeadKV, HeadDim: a.P.HeadDim},
			Backend: a.Backend, Slot: -1, Alias: -1}
		if nq != nil {
			f.Weights, f.P.Eps = []string{nq.Weight, nk.Weight}, nq.P.Eps
			f.Name = strings.TrimSuffix(a.Name, "attn") + "qkv_norm_rope_store"
			nq.dead, nk.dead = true, true
		}
		g.Nodes = append(g.Nodes, f)
		mq.Bias, mk.Bias, mv.Bias = "", "", ""
		a.Inputs = []int{f.ID, kvw}
		rq.dead, rk.dead, sk.dead, sv.dead = true, true, true, true
		count++
	}
	return count
}

// qkNormPair returns the QkNorm nodes the ropes rq and rk read, both nil
// when neither reads one, and ok false when the pair cannot fuse: one norm
// without the other, eps or head size differing (from each other or from
// hd), a missing weight, or a norm output with another reader.
func qkNormPair(g *Graph, cons [][]int, rq, rk *Node, hd int) (nq, nk *Node, ok bool) {
	nq, nk = g.node(rq.Inputs[0]), g.node(rk.Inputs[0])
	isq, isk := nq.Op == OpQkNorm, nk.Op == OpQkNorm
	if !isq && !isk {
		return nil, nil, true
	}
	if !isq || !isk || nq.P.Eps != nk.P.Eps || nq.Shape[0] != hd || nk.Shape[0] != hd || nq.Weight == "" || nk.Weight == "" {
		return nil, nil, false
	}
	if !only(cons, nq.ID, rq.ID) || !only(cons, nk.ID, rk.ID) {
		return nil, nil, false
	}
	return nq, nk, true
}

// matmulUnder returns the MatMul n is or reshapes, or nil.
func matmulUnder(g *Graph, n *Node) *Node {
	if n.Op == OpReshape {
		n = g.node(n.Inputs[0])
	}
	if n.Op == OpMatMul {
		return n
	}
	return nil
}

// fuseQKV: the attn_q / attn_k / attn_v matmuls of one input -> one FusedQKV
// node; the three matmul nodes become views of its output, so their consumers
// are untouched.
func fuseQKV(g *Graph, supports supportsFn) int {
	type trio struct{ q, k, v *Node }
	byInput := map[string]*trio{}
	var order []string
	for _, n := range g.Nodes {
		if n.dead || n.Op != OpMatMul {
			continue
		}
		prefix, slot := "", -1
		for i, suf := range []string{"attn_q.weight", "attn_k.weight", "attn_v.weight"} {
			if strings.HasSuffix(n.Weight, suf) {
				prefix, slot = strings.TrimSuffix(n.Weight, suf), i
			}
		}
		if slot < 0 {
			continue
		}
		key := prefix + "\x00" + strconv.Itoa(n.Inputs[0])
		t := byInput[key]
		if t == nil {
			t = &trio{}
			byInput[key] = t
			order = append(order, key)
		}
		switch slot {
		case 0:
			t.q = n
		case 1:
			t.k = n
		case 2:
			t.v = n
		}
	}
	count := 0
	for _, key := range order {
		t := byInput[key]
		if t.q == nil || t.k == nil || t.v == nil || t.q.Inputs[0] != t.k.Inputs[0] || t.q.Inputs[0] != t.v.Inputs[0] {
			continue
		}
		if !supports(FuseQKV, t.q, t.k, t.v) {
			continue
		}
		nq, nk, nv := t.q.Shape.N(), t.k.Shape.N(), t.v.Shape.N()
		f := &Node{ID: len(g.Nodes), Op: OpFusedQKV, Inputs: []int{t.q.Inputs[0]}, Shape: Sh(nq + nk + nv),
			Weights: []string{t.q.Weight, t.k.Weight, t.v.Weight}, Biases: []string{t.q.Bias, t.k.Bias, t.v.Bias},
			Name: strings.TrimSuffix(t.q.Name, "attn_q") + "attn_qkv", Backend: t.q.Backend, Slot: -1, Alias: -1}
		g.Nodes = append(g.Nodes, f)
		off := 0
		for _, m := range []*Node{t.q, t.k, t.v} {
			n := m.Shape.N()
			m.Op, m.Inputs, m.Alias, m.Offset, m.P.Offset = OpView, []int{f.ID}, f.ID, off, off
			m.Weight, m.Bias = "", ""
			off += n
		}
		count++
	}
	return count
}

// fuseFFN: SwiGLU(MatMul(x, gate), MatMul(x, up)) -> FusedFFN(x).
func fuseFFN(g *Graph, supports supportsFn) int {
	cons := g.consumers()
	count := 0
	for _, s := range g.Nodes {
		if s.dead || s.Op != OpSwiGLU {
			continue
		}
		gt, up := g.node(s.Inputs[0]), g.node(s.Inputs[1])
		if gt.Op != OpMatMul || up.Op != OpMatMul || gt.Inputs[0] != up.Inputs[0] || gt.Bias != "" || up.Bias != "" {
			continue
		}
		if !only(cons, gt.ID, s.ID) || !only(cons, up.ID, s.ID) || !supports(FuseFFN, s, gt, up) {
			continue
		}
		s.Op, s.Inputs = OpFusedFFN, []int{gt.Inputs[0]}
		s.Weights = []string{gt.Weight, up.Weight}
		s.Name = strings.TrimSuffix(s.Name, "ffn_swiglu") + "ffn_gate_up"
		gt.dead, up.dead = true, true
		count++
	}
	return count
}

// fuseMatMulAdd: Add(MatMul(x), r) or Add(r, MatMul(x)), the matmul read by
// the add alone and r of the add's shape (not a broadcast row) -> the add
// becomes MatMulAdd(x, r) with the matmul's weight and bias. Float addition
// commutes, so the operand order of the add does not matter.
func fuseMatMulAdd(g *Graph, supports supportsFn) int {
	cons := g.consumers()
	count := 0
	for _, a := range g.Nodes {
		if a.dead || a.Op != OpAdd || len(a.Inputs) != 2 || a.Inputs[0] == a.Inputs[1] {
			continue
		}
		for j, id := range a.Inputs {
			m, r := g.node(id), g.node(a.Inputs[1-j])
			if m.dead || m.Op != OpMatMul || m.ID == g.Output || !only(cons, m.ID, a.ID) || m.Shape != a.Shape || r.Shape.N() != a.Shape.N() {
				continue
			}
			if !supports(FuseMatMulAdd, a, m) {
				continue
			}
			a.Op, a.Inputs = OpMatMulAdd, []int{m.Inputs[0], r.ID}
			a.Weight, a.Bias = m.Weight, m.Bias
			m.dead = true
			count++
			break
		}
	}
	return count
}

// foldProducer folds into each live node c that isC accepts its in[0] p
// when isP accepts p, p is not the graph's output, c is p's only reader
// and the backends offer kind on (p, c): fold rewrites c, and p goes.
// It returns the folds made.
func foldProducer(g *Graph, supports supportsFn, kind FuseKind, isC, isP func(*Node) bool, fold func(p, c *Node)) int {
	cons := g.liveConsumers()
	count := 0
	for _, c := range g.Nodes {
		if c.dead || !isC(c) {
			continue
		}
		p := g.node(c.Inputs[0])
		if p.dead || !isP(p) || p.ID == g.Output || !only(cons, p.ID, c.ID) || !supports(kind, p, c) {
			continue
		}
		fold(p, c)
		p.dead = true
		count++
	}
	return count
}

// isMatMulAdd accepts the residual fusion's node.
func isMatMulAdd(n *Node) bool { return n.Op == OpMatMulAdd }

// fuseNormQ8: FusedQKV(RmsNorm(x)) or FusedFFN(RmsNorm(x)) with the norm
// read by that node alone -> the node reads x and carries the norm's weight
// in Norm (and its eps in P.Eps). Runs after fuseQKV and fuseFFN. In a
// decode graph (NT 1) a plain MatMul too: the lm head after the output
// norm. A prefill's last-token row stays as it was (its norm node): the
// fold is for the decode launch budget, and prefill graphs keep their form.
func fuseNormQ8(g *Graph, supports supportsFn) int {
	decode := g.Params.NT == 1
	return foldProducer(g, supports, FuseNormQ8,
		func(c *Node) bool {
			return c.Norm == "" && (c.Op == OpFusedQKV || c.Op == OpFusedFFN || (decode && c.Op == OpMatMul))
		},
		func(n *Node) bool { return n.Op == OpRmsNorm && n.Weight != "" },
		func(n, c *Node) { c.Inputs[0], c.Norm, c.P.Eps = n.Inputs[0], n.Weight, n.P.Eps })
}

// fuseAttnQ8: MatMulAdd(Attn(q, kvw, deps...), r) with the attention read
// by the matmul-add alone -> AttnMatMulAdd with inputs q, kvw, r, deps...
// and the attention's params. Runs after fuseMatMulAdd.
func fuseAttnQ8(g *Graph, supports supportsFn) int {
	return foldProducer(g, supports, FuseAttnQ8, isMatMulAdd,
		func(a *Node) bool { return a.Op == OpAttn },
		func(a, m *Node) {
			m.Op, m.P = OpAttnMatMulAdd, a.P
			m.Inputs = append([]int{a.Inputs[0], a.Inputs[1], m.Inputs[1]}, a.Inputs[2:]...)
		})
}

// fuseQKVRopeStore: in a decode graph (NT 1), QkvBiasRopeStore(q, k, v,
// pos, kvw) without q/k norm weights whose q and k are reshapes of, and v
// is, the three views of one FusedQKV node at offsets 0, nq and nq+nk,
// each read by its next node alone, the FusedQKV read by the views alone
// -> the rope/store becomes FusedQKVRopeStore with inputs x (the QKV's
// input), pos, kvw, the QKV's Weights, Norm and eps, and its own biases,
// params and output: the raw q/k/v row is no longer a tensor. Runs after
// fuseQkvBiasRopeStore and fuseQKV (which made the two nodes) and
// fuseNormQ8 (a norm folded into the QKV comes along).
func fuseQKVRopeStore(g *Graph, supports supportsFn) int {
	if g.Params.NT != 1 {
		return 0
	}
	cons := g.liveConsumers()
	count := 0
	for _, r := range g.Nodes {
		if r.dead || r.Op != OpQkvBiasRopeStore || len(r.Weights) != 0 || len(r.Inputs) != 5 || len(r.Biases) != 3 {
			continue
		}
		f, chain := qkvViewsOf(g, cons, r)
		if f == nil || !supports(FuseQKVRopeStore, append([]*Node{r, f}, chain...)...) {
			continue
		}
		r.Op, r.Inputs = OpFusedQKVRopeStore, []int{f.Inputs[0], r.Inputs[3], r.Inputs[4]}
		r.Weights, r.Norm, r.P.Eps = f.Weights, f.Norm, f.P.Eps
		r.Name = strings.TrimSuffix(r.Name, "qkv_bias_rope_store") + "attn_qkv_rope_store"
		f.dead = true
		for _, n := range chain {
			n.dead = true
		}
		count++
	}
	return count
}

// qkvViewsOf returns the FusedQKV node whose q, k and v views the
// rope/store r reads (q and k through a reshape), with those views and
// reshapes, or nil when r's inputs are anything else: another offset or
// length, a second reader of a view, reshape or of the QKV node, biases
// left on the QKV node (the rope/store took them), the graph's output.
func qkvViewsOf(g *Graph, cons [][]int, r *Node) (*Node, []*Node) {
	var f *Node
	var chain []*Node
	off := 0
	for s := 0; s < 3; s++ {
		reader, v := r, g.node(r.Inputs[s])
		if s < 2 {
			if v.Op != OpReshape || !only(cons, v.ID, r.ID) {
				return nil, nil
			}
			chain = append(chain, v)
			reader, v = v, g.node(v.Inputs[0])
		}
		if v.Op != OpView || v.P.Offset != off || !only(cons, v.ID, reader.ID) || v.ID == g.Output {
			return nil, nil
		}
		qkv := g.node(v.Inputs[0])
		if qkv.Op != OpFusedQKV || qkv.dead || (f != nil && qkv != f) {
			return nil, nil
		}
		f = qkv
		chain = append(chain, v)
		off += v.Shape.N()
	}
	if f.ID == g.Output || len(cons[f.ID]) != 3 || off != f.Shape.N() || len(f.Weights) != 3 || slices.ContainsFunc(f.Biases, func(b string) bool { return b != "" }) {
		return nil, nil
	}
	return f, chain
}

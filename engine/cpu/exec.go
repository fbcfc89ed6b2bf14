package cpu

import (
	"fmt"
	"math"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
)

// Execute implements graph.Backend.
func (b *Backend) Execute(n *graph.Node, in []graph.Tensor, out graph.Tensor) error {
	if err := b.execute(n, in, out); err != nil {
		return fmt.Errorf("cpu: %s %s: %w", n.Op, n.Name, err)
	}
	if b.census != nil {
		b.countNode(n)
	}
	return nil
}

func (b *Backend) inputs(in []graph.Tensor, want int) ([][]float32, error) {
	if len(in) < want {
		return nil, fmt.Errorf("%d inputs, want %d", len(in), want)
	}
	xs := b.xs[:0]
	for _, t := range in[:want] {
		s, err := b.slice(t)
		if err != nil {
			return nil, err
		}
		xs = append(xs, s)
	}
	b.xs = xs
	return xs, nil
}

func (b *Backend) weight(name string) (*weight, error) {
	w := b.weights[name]
	if w == nil {
		return nil, fmt.Errorf("weight %s is not registered", name)
	}
	return w, nil
}

// vector returns a 1-D weight of length n (norm or bias); "" gives nil.
func (b *Backend) vector(name string, n int) ([]float32, error) {
	if name == "" {
		return nil, nil
	}
	w, err := b.weight(name)
	if err != nil {
		return nil, err
	}
	if w.f32 == nil || len(w.f32) != n {
		return nil, fmt.Errorf("weight %s has dims %v, want a vector of %d", name, w.dims, n)
	}
	return w.f32, nil
}

func (b *Backend) execute(n *graph.Node, in []graph.Tensor, out graph.Tensor) error {
	if b.closed {
		return fmt.Errorf("backend is closed")
	}
	var y []float32
	if out.Len > 0 {
		var err error
		if y, err = b.slice(out); err != nil {
			return err
		}
	}
	if len(y) != n.Shape.N() && n.Op != graph.OpKvcacheStore {
		return fmt.Errorf("output of %d elements, shape %s", len(y), n.Shape)
	}
	nIn := len(n.Inputs)
	switch n.Op {
	case graph.OpAttn:
		nIn = 2
	case graph.OpKvcacheLoad:
		nIn = 1
	}
	xs, err := b.inputs(in, nIn)
	if err != nil {
		return err
	}
	s := n.Shape
	switch n.Op {
	case graph.OpInput, graph.OpView, graph.OpReshape:
		return nil // written by the engine / aliases: nothing to run
	case graph.OpGetRows:
		return b.getRows(n.Weight, i32(xs[0]), y, s[0])
	case graph.OpRmsNorm, graph.OpQkNorm:
		if len(xs[0]) != len(y) {
			return fmt.Errorf("input of %d elements, output %d", len(xs[0]), len(y))
		}
		w, err := b.vector(n.Weight, s[0])
		if err != nil {
			return err
		}
		rmsNorm(xs[0], w, y, s[0], n.P.Eps)
		return nil
	case graph.OpMatMul:
		return b.matmulNode(n, xs, y)
	case graph.OpMatMulAdd:
		return b.matmulAdd(n, xs, y)
	case graph.OpFusedQKV:
		return b.fusedQKV(n, xs[0], y)
	case graph.OpFusedFFN:
		return b.fusedFFN(n, xs[0], s[1], y)
	case graph.OpAdd, graph.OpMul:
		a, c := xs[0], xs[1]
		if len(a) != len(y) || (len(c) != len(a) && len(c) != s[0]) {
			return fmt.Errorf("operands of %d and %d elements, output %d", len(a), len(c), len(y))
		}
		elementwise(n.Op == graph.OpMul, a, c, y)
		return nil
	case graph.OpSilu:
		if len(xs[0]) != len(y) {
			return fmt.Errorf("input of %d elements, output %d", len(xs[0]), len(y))
		}
		for i, v := range xs[0] {
			y[i] = silu(v)
		}
		return nil
	case graph.OpSwiGLU:
		if len(xs[0]) != len(y) || len(xs[1]) != len(y) {
			return fmt.Errorf("operands of %d and %d elements, output %d", len(xs[0]), len(xs[1]), len(y))
		}
		swiglu(xs[0], xs[1], y)
		return nil
	case graph.OpRope:
		if len(xs[0]) != len(y) {
			return fmt.Errorf("input of %d elements, output %d", len(xs[0]), len(y))
		}
		return b.ropeRows(xs[0], y, i32(xs[1]), s[0], s[1], s[2], n.P.Theta, n.P.Rope)
	case graph.OpKvcacheStore:
		return b.kvStore(n.P.Layer, n.P.Side, xs[0], i32(xs[1]))
	case graph.OpKvcacheLoad:
		return b.kvLoad(n.P.Layer, n.P.Side, i32(xs[0]), y)
	case graph.OpAttn:
		return b.attn(n, xs[0], i32(xs[1]), y)
	case graph.OpQkvBiasRopeStore:
		return b.qkvBiasRopeStore(n, xs, y)
	case graph.OpPermute:
		return permute(xs[0], n.Inputs, n, y)
	case graph.OpScale:
		if len(xs[0]) != len(y) {
			return fmt.Errorf("input of %d elements, output %d", len(xs[0]), len(y))
		}
		for i, v := range xs[0] {
			y[i] = v * n.P.Scale
		}
		return nil
	case graph.OpSoftmax:
		if len(xs[0]) != len(y) {
			return fmt.Errorf("input of %d elements, output %d", len(xs[0]), len(y))
		}
		sc := n.P.Scale
		if sc == 0 {
			sc = 1
		}
		for r := 0; r < s.Rows(); r++ {
			softmax(xs[0][r*s[0]:(r+1)*s[0]], y[r*s[0]:(r+1)*s[0]], sc)
		}
		return nil
	}
	return fmt.Errorf("op %s is not implemented on the CPU", n.Op)
}

func (b *Backend) getRows(name string, ids []int32, y []float32, rowLen int) error {
	w, err := b.weight(name)
	if err != nil {
		return err
	}
	if w.rowLen != rowLen || len(y) != rowLen*len(ids) {
		return fmt.Errorf("weight %s rows of %d, output %d for %d ids", name, w.rowLen, len(y), len(ids))
	}
	for t, id := range ids {
		if id < 0 || int(id) >= w.rows {
			return fmt.Errorf("id %d at %d outside [0, %d) of %s", id, t, w.rows, name)
		}
		w.tr.Dequantize(w.data[int(id)*w.rowBytes:(int(id)+1)*w.rowBytes], y[t*rowLen:(t+1)*rowLen])
	}
	return nil
}

// rmsNorm: y = x / sqrt(mean(x^2) + eps) * w per row of n, f32 accumulation
// in index order; the scale is 1/sqrtf like ggml.
// matmulAdd is OpMatMulAdd: the matmul into y, then the residual r added
// as OpAdd adds it (float addition commutes, so the operand order of the
// unfused add does not matter). y is its own slot, never x's or r's (the
// alloc pass takes a node's output before it frees its inputs).
func (b *Backend) matmulAdd(n *graph.Node, xs [][]float32, y []float32) error {
	if len(xs) != 2 || len(xs[1]) != len(y) {
		return fmt.Errorf("%d inputs, want the activation and a residual of %d elements", len(xs), len(y))
	}
	if err := b.matmulNode(n, xs, y); err != nil {
		return err
	}
	elementwise(false, y, xs[1], y)
	return nil
}

// matmulNode is the matmul of node n's Weight (+ Bias) over xs[0] into y.
func (b *Backend) matmulNode(n *graph.Node, xs [][]float32, y []float32) error {
	w, err := b.weight(n.Weight)
	if err != nil {
		return err
	}
	bias, err := b.vector(n.Bias, w.rows)
	if err != nil {
		return err
	}
	if len(xs) < 1 {
		return fmt.Errorf("no activation input")
	}
	return b.matmul(xs[0], n.Shape[1], [3]*weight{w}, [3][]float32{bias}, y)
}

func rmsNorm(x, w, y []float32, n int, eps float32) {
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var sum float32
		for _, v := range row {
			sum += float32(v * v)
		}
		mean := sum / float32(n)
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		out := y[r : r+n]
		for i, v := range row {
			out[i] = float32(v*scale) * w[i]
		}
	}
}

func elementwise(mul bool, a, c, y []float32) {
	n := len(c)
	for r := 0; r < len(a); r += n {
		ar, yr := a[r:r+n], y[r:r+n]
		if mul {
			for i, v := range ar {
				yr[i] = v * c[i]
			}
		} else {
			for i, v := range ar {
				yr[i] = v + c[i]
			}
		}
	}
}

func swiglu(g, u, y []float32) {
	for i, v := range g {
		y[i] = silu(v) * u[i]
	}
}

// softmax of x*scale, max-subtracted, f32 sum in index order.
func softmax(x, y []float32, scale float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v*scale)
	}
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(float32(v*scale) - mx)))
		y[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range y {
		y[i] *= inv
	}
}

func permute(x []float32, _ []int, n *graph.Node, y []float32) error {
	if len(x) != len(y) {
		return fmt.Errorf("input of %d elements, output %d", len(x), len(y))
	}
	out := n.Shape
	var in graph.Shape
	for i, p := range n.P.Perm {
		in[p] = out[i]
	}
	inStride := [4]int{1, in[0], in[0] * in[1], in[0] * in[1] * in[2]}
	var st [4]int
	for i, p := range n.P.Perm {
		st[i] = inStride[p]
	}
	k := 0
	for i3 := 0; i3 < out[3]; i3++ {
		for i2 := 0; i2 < out[2]; i2++ {
			for i1 := 0; i1 < out[1]; i1++ {
				base := i3*st[3] + i2*st[2] + i1*st[1]
				for i0 := 0; i0 < out[0]; i0++ {
					y[k] = x[base+i0*st[0]]
					k++
				}
			}
		}
	}
	return nil
}

// ropeTable fills cs with cos, sin pairs of one position: angle_i = pos *
// theta^(-2i/hd), i < hd/2, computed in float64 (math.Pow, math.Sincos are
// pure Go, so deterministic on every machine) and rounded once to f32. ggml
// builds the angle by repeated f32 multiplication instead; the difference is
// below f32 rounding of the rotated values in practice and is covered by the
// oracle tolerance.
func ropeTable(cs []float32, pos int32, hd int, theta float32) {
	half := hd / 2
	for i := 0; i < half; i++ {
		freq := math.Pow(float64(theta), -2*float64(i)/float64(hd))
		s, c := math.Sincos(float64(pos) * freq)
		cs[2*i], cs[2*i+1] = float32(c), float32(s)
	}
}

// rope rotates one head row x into y with the table cs.
func rope(x, y, cs []float32, style graph.RopeStyle) {
	half := len(x) / 2
	for i := 0; i < half; i++ {
		c, s := cs[2*i], cs[2*i+1]
		ai, bi := i, i+half
		if style == graph.RopeInterleaved {
			ai, bi = 2*i, 2*i+1
		}
		x0, x1 := x[ai], x[bi]
		y[ai] = float32(x0*c) - float32(x1*s)
		y[bi] = float32(x0*s) + float32(x1*c)
	}
}

// ropeRows rotates x [hd, nh, nt] at positions pos.
func (b *Backend) ropeRows(x, y []float32, pos []int32, hd, nh, nt int, theta float32, style graph.RopeStyle) error {
	if len(pos) != nt {
		return fmt.Errorf("%d positions for %d tokens", len(pos), nt)
	}
	if cap(b.rope) < hd {
		b.rope = make([]float32, hd)
	}
	cs := b.rope[:hd]
	for t := 0; t < nt; t++ {
		if pos[t] < 0 {
			return fmt.Errorf("negative position %d", pos[t])
		}
		ropeTable(cs, pos[t], hd, theta)
		for h := 0; h < nh; h++ {
			o := (t*nh + h) * hd
			rope(x[o:o+hd], y[o:o+hd], cs, style)
		}
	}
	return nil
}

// window checks the KV window input {start, kvLen} for nt new tokens.
func (b *Backend) window(w []int32, nt int) (start, kvLen int, err error) {
	if len(w) != 2 {
		return 0, 0, fmt.Errorf("KV window of %d values, want 2", len(w))
	}
	start, kvLen = int(w[0]), int(w[1])
	if start < 0 || start+nt != kvLen || kvLen > b.kvSpec.NCtx {
		return 0, 0, fmt.Errorf("KV window start %d, length %d for %d tokens outside a context of %d", start, kvLen, nt, b.kvSpec.NCtx)
	}
	return start, kvLen, nil
}

func (b *Backend) region(layer int, side graph.KVSide) ([]byte, error) {
	if b.cache == nil || layer < 0 || layer >= b.kvSpec.NLayer {
		return nil, fmt.Errorf("no KV region for layer %d", layer)
	}
	if side == graph.SideV {
		return b.cache.V(layer), nil
	}
	return b.cache.K(layer), nil
}

func (b *Backend) kvStore(layer int, side graph.KVSide, x []float32, w []int32) error {
	rl := b.kvSpec.RowLen
	if rl == 0 || len(x)%rl != 0 {
		return fmt.Errorf("input of %d elements is not rows of %d", len(x), rl)
	}
	nt := len(x) / rl
	start, _, err := b.window(w, nt)
	if err != nil {
		return err
	}
	reg, err := b.region(layer, side)
	if err != nil {
		return err
	}
	rb := b.cache.RowBytes()
	for t := 0; t < nt; t++ {
		c := start + t
		kv.StoreRow(b.kvSpec.Format, reg[c*rb:(c+1)*rb], x[t*rl:(t+1)*rl])
	}
	return nil
}

func (b *Backend) kvLoad(layer int, side graph.KVSide, w []int32, y []float32) error {
	if len(w) != 2 || w[1] < 0 || int(w[1]) > b.kvSpec.NCtx {
		return fmt.Errorf("bad KV window %v", w)
	}
	reg, err := b.region(layer, side)
	if err != nil {
		return err
	}
	rl, rb := b.kvSpec.RowLen, b.cache.RowBytes()
	if len(y) != rl*b.kvSpec.NCtx {
		return fmt.Errorf("output of %d elements, want %d", len(y), rl*b.kvSpec.NCtx)
	}
	for c := 0; c < int(w[1]); c++ {
		kv.LoadRow(b.kvSpec.Format, reg[c*rb:(c+1)*rb], y[c*rl:(c+1)*rl])
	}
	return nil
}

// fusedQKV runs the q, k and v projections of one fused node: a function
// of its own, so a CPU profile shows the fused path (abtest's gate 5 looks
// for it in the arm with MINFER_NO_FUSE_QKV=0).
func (b *Backend) fusedQKV(n *graph.Node, x, y []float32) error {
	if len(n.Weights) != 3 || len(n.Biases) != 3 {
		return fmt.Errorf("fused qkv wants 3 weights and 3 bias names")
	}
	var ws [3]*weight
	var bs [3][]float32
	var err error
	for i := range ws {
		if ws[i], err = b.weight(n.Weights[i]); err != nil {
			return err
		}
		if bs[i], err = b.vector(n.Biases[i], ws[i].rows); err != nil {
			return err
		}
	}
	k := ws[0].rowLen
	if k == 0 || len(x)%k != 0 {
		return fmt.Errorf("input of %d elements is not rows of %d", len(x), k)
	}
	return b.matmul(x, len(x)/k, ws, bs, y)
}

// fusedFFN runs gate, up and SwiGLU of one fused node (its own function,
// as fusedQKV).
func (b *Backend) fusedFFN(n *graph.Node, x []float32, nt int, y []float32) error {
	if len(n.Weights) != 2 {
		return fmt.Errorf("fused ffn wants 2 weights")
	}
	gw, err := b.weight(n.Weights[0])
	if err != nil {
		return err
	}
	uw, err := b.weight(n.Weights[1])
	if err != nil {
		return err
	}
	if cap(b.tmp) < len(y) {
		b.tmp = make([]float32, len(y))
	}
	up := b.tmp[:len(y)]
	if err := b.matmul(x, nt, [3]*weight{gw}, [3][]float32{}, y); err != nil {
		return err
	}
	if err := b.matmul(x, nt, [3]*weight{uw}, [3][]float32{}, up); err != nil {
		return err
	}
	swiglu(y, up, y)
	return nil
}

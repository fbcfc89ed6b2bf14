package graph

import "fmt"

// Builder appends nodes to a graph. Each method returns the new node's id.
// A builder records the first shape error and keeps going, so a model builder
// reads like the architecture and checks once at Finish.
type Builder struct {
	g   *Graph
	err error
}

// NewBuilder starts a graph for p.
func NewBuilder(p Params) *Builder {
	return &Builder{g: &Graph{Params: p, UID: p.UID(), Tokens: -1, Positions: -1, KVWindow: -1, Output: -1}}
}

// Params returns the builder's Params.
func (b *Builder) Params() Params { return b.g.Params }

func (b *Builder) fail(format string, args ...any) int {
	if b.err == nil {
		b.err = fmt.Errorf("graph: "+format, args...)
	}
	return 0
}

func (b *Builder) add(n *Node) int {
	n.ID = len(b.g.Nodes)
	n.Slot = -1
	if !n.Op.IsAlias() {
		n.Alias = -1
	}
	b.g.Nodes = append(b.g.Nodes, n)
	return n.ID
}

func (b *Builder) shape(id int) Shape {
	if id < 0 || id >= len(b.g.Nodes) {
		b.fail("node id %d out of range", id)
		return Sh(1)
	}
	return b.g.Nodes[id].Shape
}

// Input declares engine data. Tokens and positions are i32 [nt]; the KV
// window is i32 [2].
func (b *Builder) Input(kind InputKind, name string) int {
	var s Shape
	switch kind {
	case InputTokens, InputPositions:
		s = Sh(b.g.Params.NT)
	case InputKVWindow:
		s = Sh(2)
	default:
		return b.fail("unknown input kind %d", kind)
	}
	id := b.add(&Node{Op: OpInput, Shape: s, Name: name, P: OpParams{Input: kind}})
	switch kind {
	case InputTokens:
		b.g.Tokens = id
	case InputPositions:
		b.g.Positions = id
	case InputKVWindow:
		b.g.KVWindow = id
	}
	return id
}

// GetRows gathers rows (width rowLen) of weight w by the ids in ids.
func (b *Builder) GetRows(name, w string, rowLen, ids int) int {
	return b.add(&Node{Op: OpGetRows, Inputs: []int{ids}, Shape: Sh(rowLen, b.shape(ids)[0]), Weight: w, Name: name})
}

// RmsNorm normalises each row of x and multiplies by weight w.
func (b *Builder) RmsNorm(name string, x int, w string, eps float32) int {
	return b.add(&Node{Op: OpRmsNorm, Inputs: []int{x}, Shape: b.shape(x), Weight: w, Name: name, P: OpParams{Eps: eps}})
}

// QkNorm normalises each head row (ne0 = head dim) of x [hd, nh, nt].
func (b *Builder) QkNorm(name string, x int, w string, eps float32) int {
	s := b.shape(x)
	return b.add(&Node{Op: OpQkNorm, Inputs: []int{x}, Shape: s, Weight: w, Name: name, P: OpParams{Eps: eps, HeadDim: s[0]}})
}

// MatMul is x [k, nt] times weight w [k, m] plus the optional bias -> [m, nt].
func (b *Builder) MatMul(name string, x int, w, bias string, m int) int {
	s := b.shape(x)
	if s[2] != 1 || s[3] != 1 {
		return b.fail("%s: matmul input %s is not 2-D", name, s)
	}
	return b.add(&Node{Op: OpMatMul, Inputs: []int{x}, Shape: Sh(m, s[1]), Weight: w, Bias: bias, Name: name})
}

func (b *Builder) binary(op Op, name string, x, y int) int {
	sx, sy := b.shape(x), b.shape(y)
	if sx != sy && !(sy[0] == sx[0] && sy.Rows() == 1) {
		return b.fail("%s: %s of %s and %s", name, op, sx, sy)
	}
	return b.add(&Node{Op: op, Inputs: []int{x, y}, Shape: sx, Name: name})
}

// Add is x + y (y the same shape or one row).
func (b *Builder) Add(name string, x, y int) int { return b.binary(OpAdd, name, x, y) }

// Mul is x * y (y the same shape or one row).
func (b *Builder) Mul(name string, x, y int) int { return b.binary(OpMul, name, x, y) }

// Silu is x*sigmoid(x).
func (b *Builder) Silu(name string, x int) int {
	return b.add(&Node{Op: OpSilu, Inputs: []int{x}, Shape: b.shape(x), Name: name})
}

// SwiGLU is silu(gate) * up.
func (b *Builder) SwiGLU(name string, gate, up int) int {
	if b.shape(gate) != b.shape(up) {
		return b.fail("%s: swiglu of %s and %s", name, b.shape(gate), b.shape(up))
	}
	return b.add(&Node{Op: OpSwiGLU, Inputs: []int{gate, up}, Shape: b.shape(gate), Name: name})
}

// Rope rotates x [hd, nh, nt] at positions pos.
func (b *Builder) Rope(name string, x, pos int, theta float32, style RopeStyle) int {
	s := b.shape(x)
	if s[0]%2 != 0 {
		return b.fail("%s: rope of odd head dim %d", name, s[0])
	}
	return b.add(&Node{Op: OpRope, Inputs: []int{x, pos}, Shape: s, Name: name, P: OpParams{Theta: theta, Rope: style, HeadDim: s[0]}})
}

// KvcacheStore writes x [rowLen, nt] into layer's K or V region at the cells
// the KV window starts at.
func (b *Builder) KvcacheStore(name string, x, kvw, layer int, side KVSide) int {
	return b.add(&Node{Op: OpKvcacheStore, Inputs: []int{x, kvw}, Shape: Sh(0), Name: name, P: OpParams{Layer: layer, Side: side}})
}

// KvcacheLoad reads the layer's K or V region as f32 [rowLen, NCtx].
func (b *Builder) KvcacheLoad(name string, kvw, layer int, side KVSide, rowLen int, deps ...int) int {
	return b.add(&Node{Op: OpKvcacheLoad, Inputs: append([]int{kvw}, deps...), Shape: Sh(rowLen, b.g.Params.NCtx), Name: name, P: OpParams{Layer: layer, Side: side}})
}

// Attn is causal GQA attention of q [hd, nh, nt] over layer's KV cells
// [max(0, cell-window+1), cell] for the query at cell = start+i. deps are
// nodes that must run first (the layer's KV stores).
func (b *Builder) Attn(name string, q, kvw, layer, nHeadKV, window int, deps ...int) int {
	s := b.shape(q)
	if nHeadKV < 1 || s[1]%nHeadKV != 0 {
		return b.fail("%s: %d query heads over %d kv heads", name, s[1], nHeadKV)
	}
	return b.add(&Node{Op: OpAttn, Inputs: append([]int{q, kvw}, deps...), Shape: Sh(s[0]*s[1], s[2]), Name: name,
		P: OpParams{Layer: layer, NHead: s[1], NHeadKV: nHeadKV, HeadDim: s[0], Window: window}})
}

// View is a window of x of the given shape at element offset off.
func (b *Builder) View(name string, x int, s Shape, off int) int {
	if off < 0 || off+s.N() > b.shape(x).N() {
		return b.fail("%s: view %s at %d outside %s", name, s, off, b.shape(x))
	}
	return b.add(&Node{Op: OpView, Inputs: []int{x}, Shape: s, Name: name, Alias: x, Offset: off, P: OpParams{Offset: off}})
}

// Reshape gives x another shape of the same size.
func (b *Builder) Reshape(name string, x int, s Shape) int {
	if s.N() != b.shape(x).N() {
		return b.fail("%s: reshape %s to %s", name, b.shape(x), s)
	}
	return b.add(&Node{Op: OpReshape, Inputs: []int{x}, Shape: s, Name: name, Alias: x})
}

// Permute copies x with out axis i = x axis perm[i].
func (b *Builder) Permute(name string, x int, perm [4]int) int {
	s := b.shape(x)
	var seen [4]bool
	var out Shape
	for i, p := range perm {
		if p < 0 || p > 3 || seen[p] {
			return b.fail("%s: bad permutation %v", name, perm)
		}
		seen[p] = true
		out[i] = s[p]
	}
	return b.add(&Node{Op: OpPermute, Inputs: []int{x}, Shape: out, Name: name, P: OpParams{Perm: perm}})
}

// Scale is x*s.
func (b *Builder) Scale(name string, x int, s float32) int {
	return b.add(&Node{Op: OpScale, Inputs: []int{x}, Shape: b.shape(x), Name: name, P: OpParams{Scale: s}})
}

// Softmax is the row softmax of x*scale.
func (b *Builder) Softmax(name string, x int, scale float32) int {
	return b.add(&Node{Op: OpSoftmax, Inputs: []int{x}, Shape: b.shape(x), Name: name, P: OpParams{Scale: scale}})
}

// Output marks the node whose buffer the engine reads after a run.
func (b *Builder) Output(id int) { b.g.Output = id }

// Shape returns a node's shape.
func (b *Builder) Shape(id int) Shape { return b.shape(id) }

// Finish returns the graph, or the first error.
func (b *Builder) Finish() (*Graph, error) {
	if b.err != nil {
		return nil, b.err
	}
	g := b.g
	if g.Output < 0 {
		return nil, fmt.Errorf("graph: no output node")
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in >= n.ID {
				return nil, fmt.Errorf("graph: node %s reads later node %d", n.Name, in)
			}
		}
	}
	return g, nil
}

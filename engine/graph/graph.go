package graph

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/minfer-go/minfer/engine/kv"
)

// Params determine a graph's topology completely: two equal Params build
// identical graphs with the same UID.
type Params struct {
	Arch                                                string
	NVocab, NEmbd, NLayer, NHead, NHeadKV, HeadDim, NFF int
	NCtx                                                int
	RopeTheta, RmsEps                                   float32
	RopeNeox, QKNorm, QKVBias, TiedOutput               bool

	NT        int  // tokens per forward
	AllLogits bool // logits of every position (else the last one only)
	KVFormat  kv.Format

	// Fusions the caller allows (levers MINFER_NO_FUSE_QKV / _FFN,
	// MINFER_FUSE_QKNORM, MINFER_FUSE_RESIDUAL, MINFER_FUSE_NORM_Q8,
	// MINFER_FUSE_ATTN_Q8, MINFER_FUSE_QKV_ROPE); the fuse pass also asks
	// every backend involved. FuseQKNorm is the q/k-norm variant of the
	// QKV tail and needs FuseQKV (the registry declares it); FuseAttnQ8
	// folds into the residual fusion's nodes; FuseQKVRope folds the QKV
	// fusion's node into its rope/store (decode only).
	FuseQKV, FuseFFN, FuseQKNorm, FuseResidual, FuseNormQ8, FuseAttnQ8, FuseQKVRope bool
}

// NQ is the query width NHead*HeadDim.
func (p Params) NQ() int { return p.NHead * p.HeadDim }

// NKV is the key/value width NHeadKV*HeadDim.
func (p Params) NKV() int { return p.NHeadKV * p.HeadDim }

// UID is a stable 64-bit hash of the Params: the topology key a device caches
// captured graphs under.
func (p Params) UID() uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%#v", p)
	return h.Sum64()
}

// Validate checks the dimensions a builder relies on.
func (p Params) Validate() error {
	switch {
	case p.NT < 1:
		return fmt.Errorf("graph: nt %d < 1", p.NT)
	case p.NEmbd < 1 || p.NLayer < 1 || p.NHead < 1 || p.NHeadKV < 1 || p.HeadDim < 2 || p.NFF < 1 || p.NVocab < 1:
		return fmt.Errorf("graph: bad model dims %+v", p)
	case p.NHead%p.NHeadKV != 0:
		return fmt.Errorf("graph: n_head %d is not a multiple of n_head_kv %d", p.NHead, p.NHeadKV)
	case p.HeadDim%2 != 0:
		return fmt.Errorf("graph: head_dim %d is odd", p.HeadDim)
	case p.NCtx < p.NT:
		return fmt.Errorf("graph: n_ctx %d < nt %d", p.NCtx, p.NT)
	}
	return nil
}

// Node is one op of the graph.
type Node struct {
	ID     int
	Op     Op
	Inputs []int // node ids, all smaller than ID
	Shape  Shape
	// Weight and Bias name registered weights ("blk.3.attn_q.weight");
	// fused nodes list theirs in Weights / Biases.
	Weight, Bias    string
	Weights, Biases []string
	// Norm (FuseNormQ8) names the RMS norm weight a FusedQKV / FusedFFN /
	// MatMul (decode lm head) node applies to in[0] first
	// (eps P.Eps): the norm node it replaced.
	Norm string
	P    OpParams
	Name string // readable: "blk.3.attn_q"

	// Set by the passes.
	Backend int // index into the backend list (assign)
	Slot    int // buffer slot (alloc); -1: none (alias, no output)
	Alias   int // alias ops: the node whose buffer this one reads, else -1
	Offset  int // alias ops: element offset into Alias's buffer
	// Readers (alloc) counts the reads of this node's buffer: each input
	// slot of a node that names it or a view of it (the view itself counts
	// too), plus one when it is the graph output; 0 for nodes that are
	// views or were never allocated.
	Readers int

	dead bool
}

func (n *Node) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%%%d %s %s %s", n.ID, n.Name, n.Op, n.Shape)
	if len(n.Inputs) > 0 {
		fmt.Fprintf(&b, " <- %v", n.Inputs)
	}
	if n.Weight != "" {
		fmt.Fprintf(&b, " w=%s", n.Weight)
	}
	if n.Bias != "" {
		fmt.Fprintf(&b, " b=%s", n.Bias)
	}
	if len(n.Weights) > 0 {
		fmt.Fprintf(&b, " w=%v", n.Weights)
	}
	if n.Norm != "" {
		fmt.Fprintf(&b, " norm=%s", n.Norm)
	}
	return b.String()
}

// Graph is a built graph: nodes in execution order.
type Graph struct {
	Params Params
	UID    uint64
	Nodes  []*Node
	// Ids of the input nodes and the output (logits) node.
	Tokens, Positions, KVWindow, Output int
}

// Dump writes one line per node.
func (g *Graph) Dump() string {
	var b strings.Builder
	for _, n := range g.Nodes {
		b.WriteString(n.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Count returns how many live nodes have op o.
func (g *Graph) Count(o Op) int {
	c := 0
	for _, n := range g.Nodes {
		if n.Op == o {
			c++
		}
	}
	return c
}

// consumers returns, per node, the ids of the nodes that read it.
func (g *Graph) consumers() [][]int {
	out := make([][]int, len(g.Nodes))
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			out[in] = append(out[in], n.ID)
		}
	}
	return out
}

// liveConsumers is consumers without the dead readers: a node an earlier
// rewrite folded (fuseFFN's matmuls, fuseMatMulAdd's) still names its
// inputs until compact.
func (g *Graph) liveConsumers() [][]int {
	cons := g.consumers()
	for id, cs := range cons {
		cons[id] = slices.DeleteFunc(cs, func(c int) bool { return g.Nodes[c].dead })
	}
	return cons
}

// compact drops dead nodes, orders the rest topologically (stable: a node
// keeps its place unless an input must move ahead of it) and renumbers.
func (g *Graph) compact() error {
	order := make([]*Node, 0, len(g.Nodes))
	state := make([]uint8, len(g.Nodes)) // 0 new, 1 visiting, 2 done
	var visit func(id int) error
	visit = func(id int) error {
		if id < 0 || id >= len(g.Nodes) {
			return fmt.Errorf("graph: input id %d out of range", id)
		}
		switch state[id] {
		case 1:
			return fmt.Errorf("graph: cycle through node %s", g.Nodes[id].Name)
		case 2:
			return nil
		}
		n := g.Nodes[id]
		if n.dead {
			return fmt.Errorf("graph: node %s reads dead node", n.Name)
		}
		state[id] = 1
		for _, in := range n.Inputs {
			if g.Nodes[in].dead {
				return fmt.Errorf("graph: node %s reads removed node %s", n.Name, g.Nodes[in].Name)
			}
			if err := visit(in); err != nil {
				return err
			}
		}
		state[id] = 2
		order = append(order, n)
		return nil
	}
	for _, n := range g.Nodes {
		if !n.dead {
			if err := visit(n.ID); err != nil {
				return err
			}
		}
	}
	remap := make([]int, len(g.Nodes))
	for i := range remap {
		remap[i] = -1
	}
	for i, n := range order {
		remap[n.ID] = i
	}
	for i, n := range order {
		n.ID = i
		for j, in := range n.Inputs {
			n.Inputs[j] = remap[in]
		}
		if n.Alias >= 0 {
			n.Alias = remap[n.Alias]
		}
	}
	g.Nodes = order
	for _, p := range []*int{&g.Tokens, &g.Positions, &g.KVWindow, &g.Output} {
		if *p >= 0 {
			*p = remap[*p]
		}
	}
	return nil
}

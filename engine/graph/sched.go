package graph

import "fmt"

// Split is a maximal run of executed nodes on one backend.
type Split struct {
	Backend     int
	First, Last int // node ids, inclusive (alias/input nodes inside are skipped)
	nodes       []int
	copies      []staging
}

// staging copies a tensor produced on another backend into a buffer of this
// split's backend before the split runs.
type staging struct {
	from    int // src backend
	src     Tensor
	dst     Tensor
	scratch []float32
}

// Plan is a graph bound to backends with its buffers allocated: the
// scheduler. Run executes it; nothing in Run allocates.
type Plan struct {
	G        *Graph
	Layout   *Layout
	Splits   []Split
	backends []Backend
	slotBuf  []Buffer
	tensor   []Tensor   // per node: where its output lives (on its own backend)
	ins      [][]Tensor // per node: its input tensors as Execute sees them
	stageBuf [][2]int   // (backend, buffer) of staging buffers, for Close
}

// Compile runs the passes (assign -> fuse -> alloc), allocates the slots on
// their backends and plans the splits with their cross-backend staging.
func Compile(g *Graph, backends []Backend) (*Plan, error) {
	if err := Assign(g, backends); err != nil {
		return nil, err
	}
	if _, err := Fuse(g, backends); err != nil {
		return nil, err
	}
	return NewPlan(g, backends)
}

// NewPlan allocates an already assigned (and possibly fused) graph.
func NewPlan(g *Graph, backends []Backend) (*Plan, error) {
	l, err := Alloc(g)
	if err != nil {
		return nil, err
	}
	p := &Plan{G: g, Layout: l, backends: backends}
	for i, n := range l.SlotLen {
		b, err := backends[l.SlotBackend[i]].Alloc(n)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("graph: alloc slot %d (%d elements) on %s: %w", i, n, backends[l.SlotBackend[i]].Name(), err)
		}
		p.slotBuf = append(p.slotBuf, b)
	}
	p.tensor = make([]Tensor, len(g.Nodes))
	for _, n := range g.Nodes {
		r, off := g.root(n)
		if r.Slot >= 0 {
			p.tensor[n.ID] = Tensor{Buf: p.slotBuf[r.Slot], Off: off, Len: n.Shape.N()}
		}
	}
	// Splits: maximal runs of executed nodes on one backend.
	for _, n := range g.Nodes {
		if n.Op == OpInput || n.Op.IsAlias() {
			continue
		}
		if k := len(p.Splits); k == 0 || p.Splits[k-1].Backend != n.Backend {
			p.Splits = append(p.Splits, Split{Backend: n.Backend, First: n.ID})
		}
		s := &p.Splits[len(p.Splits)-1]
		s.Last = n.ID
		s.nodes = append(s.nodes, n.ID)
	}
	p.ins = make([][]Tensor, len(g.Nodes))
	for si := range p.Splits {
		s := &p.Splits[si]
		staged := map[int]Tensor{}
		for _, id := range s.nodes {
			n := g.Nodes[id]
			p.ins[id] = make([]Tensor, len(n.Inputs))
			for j, in := range n.Inputs {
				src := g.Nodes[in]
				r, _ := g.root(src)
				t := p.tensor[in]
				if r.Backend != n.Backend && t.Len > 0 {
					st, ok := staged[in]
					if !ok {
						buf, err := backends[n.Backend].Alloc(t.Len)
						if err != nil {
							p.Close()
							return nil, fmt.Errorf("graph: staging %s for %s: %w", src.Name, n.Name, err)
						}
						p.stageBuf = append(p.stageBuf, [2]int{n.Backend, int(buf)})
						st = Tensor{Buf: buf, Len: t.Len}
						staged[in] = st
						s.copies = append(s.copies, staging{from: r.Backend, src: t, dst: st, scratch: make([]float32, t.Len)})
					}
					t = st
				}
				p.ins[id][j] = t
			}
		}
	}
	return p, nil
}

// Backends returns the plan's backends.
func (p *Plan) Backends() []Backend { return p.backends }

// WriteI32 writes the data of input node id.
func (p *Plan) WriteI32(id int, v []int32) error {
	if id < 0 || id >= len(p.G.Nodes) || p.G.Nodes[id].Op != OpInput {
		return fmt.Errorf("graph: node %d is not an input", id)
	}
	n := p.G.Nodes[id]
	if len(v) != n.Shape.N() {
		return fmt.Errorf("graph: input %s wants %d values, got %d", n.Name, n.Shape.N(), len(v))
	}
	t := p.tensor[id]
	return p.backends[n.Backend].WriteI32(t.Buf, t.Off, v)
}

// Read copies node id's output into dst (len(dst) <= its size). Call after Run.
func (p *Plan) Read(id int, dst []float32) error {
	if id < 0 || id >= len(p.G.Nodes) {
		return fmt.Errorf("graph: read: node %d out of range", id)
	}
	n := p.G.Nodes[id]
	t := p.tensor[id]
	if len(dst) > t.Len {
		return fmt.Errorf("graph: read %d values of %s, it has %d", len(dst), n.Name, t.Len)
	}
	r, _ := p.G.root(n)
	return p.backends[r.Backend].Read(t.Buf, t.Off, dst)
}

// Run executes the splits in order: stage the tensors that cross into the
// split, open the split (a device may replay a capture), execute its nodes,
// close it and synchronize at the boundary. The first error stops the run
// and names the node.
func (p *Plan) Run() error {
	for si := range p.Splits {
		s := &p.Splits[si]
		b := p.backends[s.Backend]
		for i := range s.copies {
			c := &s.copies[i]
			if err := p.backends[c.from].Read(c.src.Buf, c.src.Off, c.scratch); err != nil {
				return fmt.Errorf("graph: staging read for split %d: %w", si, err)
			}
			if err := b.Write(c.dst.Buf, c.dst.Off, c.scratch); err != nil {
				return fmt.Errorf("graph: staging write for split %d: %w", si, err)
			}
		}
		key := SplitKey{UID: p.G.UID, First: s.First, Last: s.Last}
		replayed, err := b.BeginSplit(key)
		if err != nil {
			return fmt.Errorf("graph: %s: begin split %d: %w", b.Name(), si, err)
		}
		if !replayed {
			for _, id := range s.nodes {
				if err := b.Execute(p.G.Nodes[id], p.ins[id], p.tensor[id]); err != nil {
					return fmt.Errorf("graph: %s: node %s (%s): %w", b.Name(), p.G.Nodes[id].Name, p.G.Nodes[id].Op, err)
				}
			}
		}
		if err := b.EndSplit(key); err != nil {
			return fmt.Errorf("graph: %s: end split %d: %w", b.Name(), si, err)
		}
		if err := b.Synchronize(); err != nil {
			return fmt.Errorf("graph: %s: synchronize after split %d: %w", b.Name(), si, err)
		}
	}
	return nil
}

// Close frees the plan's buffers (not the KV regions, not the weights).
func (p *Plan) Close() error {
	var first error
	for i, b := range p.slotBuf {
		if err := p.backends[p.Layout.SlotBackend[i]].Free(b); err != nil && first == nil {
			first = err
		}
	}
	for _, sb := range p.stageBuf {
		if err := p.backends[sb[0]].Free(Buffer(sb[1])); err != nil && first == nil {
			first = err
		}
	}
	p.slotBuf, p.stageBuf = nil, nil
	return first
}

// RunInstrumented executes the plan node by node, without split capture or
// replay, synchronizing after every node and handing its output to visit
// (MINFER_GRAPH_DUMP). Buffers are reused by lifetime, so a node's output is
// only valid inside visit. Instrumented runs are never timed runs.
func (p *Plan) RunInstrumented(visit func(n *Node, out []float32) error) error {
	var scratch []float32
	for si := range p.Splits {
		s := &p.Splits[si]
		b := p.backends[s.Backend]
		for i := range s.copies {
			c := &s.copies[i]
			if err := p.backends[c.from].Read(c.src.Buf, c.src.Off, c.scratch); err != nil {
				return fmt.Errorf("graph: staging read for split %d: %w", si, err)
			}
			if err := b.Write(c.dst.Buf, c.dst.Off, c.scratch); err != nil {
				return fmt.Errorf("graph: staging write for split %d: %w", si, err)
			}
		}
		for _, id := range s.nodes {
			n := p.G.Nodes[id]
			if err := b.Execute(n, p.ins[id], p.tensor[id]); err != nil {
				return fmt.Errorf("graph: %s: node %s (%s): %w", b.Name(), n.Name, n.Op, err)
			}
			if err := b.Synchronize(); err != nil {
				return fmt.Errorf("graph: %s: synchronize after node %s: %w", b.Name(), n.Name, err)
			}
			t := p.tensor[id]
			if t.Len == 0 {
				continue // a node without an output (KV store)
			}
			if cap(scratch) < t.Len {
				scratch = make([]float32, t.Len)
			}
			out := scratch[:t.Len]
			if err := p.Read(id, out); err != nil {
				return err
			}
			if err := visit(n, out); err != nil {
				return fmt.Errorf("graph: instrumented visit of %s: %w", n.Name, err)
			}
		}
	}
	return nil
}

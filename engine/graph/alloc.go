package graph

import "fmt"

// Layout is the result of the alloc pass: a buffer slot per node and the
// size and backend of every slot.
type Layout struct {
	SlotLen     []int // elements per slot
	SlotBackend []int
}

// root returns the node whose buffer n reads (n itself unless an alias) and
// the element offset into it.
func (g *Graph) root(n *Node) (*Node, int) {
	off := 0
	for n.Op.IsAlias() {
		off += n.Offset
		n = g.Nodes[n.Alias]
	}
	return n, off
}

// Alloc assigns buffer slots with lifetime reuse: a node's slot returns to the
// free list after its last consumer ran and is reused by a later node of the
// same backend and exactly the same size (a device pool recycles exact byte
// lengths). Inputs are live from the start (the engine writes them before a
// run) and the output until the end (read after it). Alias nodes (View,
// Reshape) own no slot: they keep their root's slot alive. Nodes without an
// output (KV stores) get no slot; the KV regions are the backend's, outside
// any graph, so they survive rebuilds.
func Alloc(g *Graph) (*Layout, error) {
	last := make([]int, len(g.Nodes))
	for i := range last {
		last[i] = -1
	}
	for _, n := range g.Nodes {
		n.Readers = 0
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			r, _ := g.root(g.Nodes[in])
			r.Readers++
			if n.ID > last[r.ID] {
				last[r.ID] = n.ID
			}
		}
	}
	if g.Output >= 0 {
		r, _ := g.root(g.Nodes[g.Output])
		r.Readers++
		last[r.ID] = len(g.Nodes) // never freed
	}
	l := &Layout{}
	free := map[[2]int][]int{} // (backend, len) -> slots
	take := func(n *Node) {
		size := n.Shape.N()
		key := [2]int{n.Backend, size}
		if s := free[key]; len(s) > 0 {
			n.Slot = s[len(s)-1]
			free[key] = s[:len(s)-1]
			return
		}
		n.Slot = len(l.SlotLen)
		l.SlotLen = append(l.SlotLen, size)
		l.SlotBackend = append(l.SlotBackend, n.Backend)
	}
	for _, n := range g.Nodes {
		n.Slot = -1
	}
	for _, n := range g.Nodes { // inputs first: live from the start
		if n.Op == OpInput {
			take(n)
		}
	}
	releaseAt := make([][]*Node, len(g.Nodes)+1)
	for _, n := range g.Nodes {
		if n.Op != OpInput && !n.Op.IsAlias() && n.Shape.N() > 0 && n.Op != OpKvcacheStore {
			if n.Backend < 0 {
				return nil, fmt.Errorf("graph: alloc: node %s is not assigned", n.Name)
			}
			take(n)
		}
		if n.Slot >= 0 {
			at := last[n.ID]
			if at < n.ID {
				at = n.ID // never read: free right after it ran
			}
			releaseAt[at] = append(releaseAt[at], n)
		}
		for _, r := range releaseAt[n.ID] {
			key := [2]int{r.Backend, r.Shape.N()}
			free[key] = append(free[key], r.Slot)
		}
	}
	return l, nil
}

package graph

import (
	"fmt"
	"strings"
)

// Assign places every node on a backend: the first of backends (in priority
// order) whose SupportsOp accepts it. Alias nodes follow their input; an input
// node goes where its first consumer runs. Placement happens once, at build
// time; a node no backend accepts is an error naming it and every refusal.
func Assign(g *Graph, backends []Backend) error {
	if len(backends) == 0 {
		return fmt.Errorf("graph: assign: no backends")
	}
	cons := g.consumers()
	for _, n := range g.Nodes {
		n.Backend = -1
	}
	for _, n := range g.Nodes {
		switch {
		case n.Op == OpInput:
			continue
		case n.Op.IsAlias():
			n.Backend = g.Nodes[n.Inputs[0]].Backend
			if n.Backend < 0 { // alias of an input: placed with the input below
				n.Backend = 0
			}
			continue
		}
		var why []string
		for i, b := range backends {
			err := b.SupportsOp(n)
			if err == nil {
				n.Backend = i
				break
			}
			why = append(why, b.Name()+": "+err.Error())
		}
		if n.Backend < 0 {
			return fmt.Errorf("graph: assign: no backend runs node %s (%s): %s", n.Name, n.Op, strings.Join(why, "; "))
		}
	}
	for _, n := range g.Nodes {
		if n.Op != OpInput {
			continue
		}
		n.Backend = 0
		for _, c := range cons[n.ID] {
			if g.Nodes[c].Backend >= 0 {
				n.Backend = g.Nodes[c].Backend
				break
			}
		}
	}
	for _, n := range g.Nodes {
		if n.Op.IsAlias() {
			n.Backend = g.Nodes[n.Inputs[0]].Backend
		}
	}
	return nil
}

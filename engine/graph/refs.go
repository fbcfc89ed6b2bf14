package graph

import "fmt"

// What a node refers to beyond its inputs, and the KVCells span rule:
// every backend checks these the same way, so they are stated once here.

// WeightNames lists the weights n names (Weight, Bias, Norm, Weights,
// Biases; empty slots left out): the ones a backend's SupportsOp needs
// registered.
func (n *Node) WeightNames() []string {
	all := append([]string{n.Weight, n.Bias, n.Norm}, n.Weights...)
	var names []string
	for _, w := range append(all, n.Biases...) {
		if w != "" {
			names = append(names, w)
		}
	}
	return names
}

// UsesKV reports whether o reads or writes the KV region of layer
// P.Layer: a backend without that layer's region cannot run it.
func (o Op) UsesKV() bool {
	switch o {
	case OpAttn, OpAttnMatMulAdd, OpKvcacheStore, OpKvcacheLoad, OpQkvBiasRopeStore, OpFusedQKVRopeStore:
		return true
	}
	return false
}

// CheckKVCells checks the span of a KVCells call against the interface's
// rule: n bytes of whole cells of rowBytes from cell on, inside the nctx
// cells of the context.
func CheckKVCells(n, cell, rowBytes, nctx int) error {
	if n <= 0 || n%rowBytes != 0 || cell < 0 || cell > nctx-n/rowBytes {
		return fmt.Errorf("%d bytes from cell %d: want whole cells of %d bytes inside %d cells", n, cell, rowBytes, nctx)
	}
	return nil
}

package cpu

import (
	"fmt"

	"github.com/minfer-go/minfer/engine/graph"
)

var _ graph.KVCells = (*Backend)(nil)

// ReadKVCells implements graph.KVCells: the cells' bytes as stored.
func (b *Backend) ReadKVCells(layer int, side graph.KVSide, cell int, dst []byte) error {
	reg, err := b.kvCells("read", layer, side, cell, len(dst))
	if err != nil {
		return err
	}
	copy(dst, reg)
	return nil
}

// WriteKVCells implements graph.KVCells.
func (b *Backend) WriteKVCells(layer int, side graph.KVSide, cell int, src []byte) error {
	reg, err := b.kvCells("write", layer, side, cell, len(src))
	if err != nil {
		return err
	}
	copy(reg, src)
	return nil
}

// kvCells is the part of a KV region that n bytes of whole cells from cell
// on cover.
func (b *Backend) kvCells(op string, layer int, side graph.KVSide, cell, n int) ([]byte, error) {
	if side != graph.SideK && side != graph.SideV {
		return nil, fmt.Errorf("cpu: %s KV cells: side %d", op, side)
	}
	reg, err := b.region(layer, side)
	if err != nil {
		return nil, fmt.Errorf("cpu: %s KV cells: %w", op, err)
	}
	rb := b.cache.RowBytes()
	if err := graph.CheckKVCells(n, cell, rb, b.kvSpec.NCtx); err != nil {
		return nil, fmt.Errorf("cpu: %s KV cells: %w", op, err)
	}
	return reg[cell*rb : cell*rb+n], nil
}

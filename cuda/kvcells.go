package cuda

import (
	"errors"
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

var _ graph.KVCells = (*Backend)(nil)

// ReadKVCells implements graph.KVCells (saved sessions): the cells' bytes
// as stored, read after every store queued before (the readback
// synchronizes the stream).
func (b *Backend) ReadKVCells(layer int, side graph.KVSide, cell int, dst []byte) error {
	p, err := b.kvCells("read", layer, side, cell, len(dst))
	if err != nil {
		return err
	}
	return b.dev.Do(func() error { return b.stage.read(dst, p) })
}

// WriteKVCells implements graph.KVCells: the copy is queued on the
// backend's stream ahead of any later forward; src is staged before the
// call returns (pinned slot or pageable copy), so the caller may reuse it.
// KV regions keep their addresses, so captured graphs stay valid.
func (b *Backend) WriteKVCells(layer int, side graph.KVSide, cell int, src []byte) error {
	if b.cap.recording {
		return errors.New("cuda: write KV cells inside a split that is being captured")
	}
	p, err := b.kvCells("write", layer, side, cell, len(src))
	if err != nil {
		return err
	}
	return b.dev.Do(func() error { return b.stage.write(p, src) })
}

// kvCells is the device address of n bytes of whole cells from cell on in
// the layer's side region.
func (b *Backend) kvCells(op string, layer int, side graph.KVSide, cell, n int) (driver.DevicePtr, error) {
	if b.kvK == nil || layer < 0 || layer >= len(b.kvK) {
		return 0, fmt.Errorf("cuda: %s KV cells: no KV region for layer %d", op, layer)
	}
	var reg driver.DevicePtr
	switch side {
	case graph.SideK:
		reg = b.kvK[layer]
	case graph.SideV:
		reg = b.kvV[layer]
	default:
		return 0, fmt.Errorf("cuda: %s KV cells: side %d", op, side)
	}
	if err := graph.CheckKVCells(n, cell, b.kvRowB, b.kvSpec.NCtx); err != nil {
		return 0, fmt.Errorf("cuda: %s KV cells: %w", op, err)
	}
	return reg + driver.DevicePtr(cell*b.kvRowB), nil
}

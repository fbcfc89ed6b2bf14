package graph

// KVCells is the optional interface of a backend whose KV cells can be
// copied to and from host memory as stored: the bytes of the engine's KV
// format (kv.RowBytes(format, RowLen) per cell, cells contiguous in a
// layer's K or V region), never converted. Saved sessions (engine/session)
// go through it; an engine whose KV backend lacks it cannot save or
// restore one, and says so naming the backend.
//
// Both methods copy whole cells: len(buf) must be a positive multiple of
// the row bytes and the cells [cell, cell+len(buf)/rowBytes) must lie in
// the context. They are called between forwards, never inside a split; a
// device synchronizes before it returns, so ReadKVCells sees every store
// queued before it, a forward after WriteKVCells sees the written cells,
// and the caller may reuse buf as soon as a call returns.
type KVCells interface {
	// ReadKVCells copies cells from cell on of the layer's side region
	// into dst.
	ReadKVCells(layer int, side KVSide, cell int, dst []byte) error
	// WriteKVCells copies src into the layer's side region from cell on.
	WriteKVCells(layer int, side KVSide, cell int, src []byte) error
}

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/quant"
)

// devWeight is a registered weight: matrices keep their GGUF bytes (the
// kernels decode the blocks), 1-D tensors (norms, biases) are expanded to
// f32 once at registration, like the CPU backend does.
type devWeight struct {
	name     string
	typ      quant.Type // the type on the device (F32 for expanded vectors)
	srcType  quant.Type
	srcBytes int // len(Weight.Data): the registry key with the name
	dims     []int
	rowLen   int // Dims[0]
	rows     int // product of the other dims
	ptr      driver.DevicePtr
	vector   bool
	// rp is the 16-byte-aligned repacked copy the decode mmvqr kernels read
	// (MINFER_MMVQ_REPACK, mmvq_repack.go); 0 when there is none.
	rp driver.DevicePtr
	// rpOnly: rp is the only device copy (MINFER_ONE_COPY, onecopy.go);
	// ptr is 0 and every reader takes its repacked kernel.
	rpOnly bool
	// host: ptr is page-locked host memory mapped into the device
	// (MINFER_EMBED_HOST, registerHostMapped): only the gather reads it.
	host bool
}

// WeightTypes lists the matrix weight types the device kernels consume
// (matmul and the embedding gather share the list).
func WeightTypes() []quant.Type { return MatMulTypes() }

func weightTypeSupported(t quant.Type) bool {
	_, ok := matmulTable[t]
	return ok && getRowsTypes[t]
}

// registerWeight uploads w once. Same name and size: no-op. Different size:
// the new bytes get a new allocation and a new devWeight, and the old one is
// kept until Close (a captured graph may still reference it); the pool
// generation does not move (a weight allocation is MemWeights), but every
// captured graph that read the old devWeight is stale (capture.go,
// staleReason) and none that did not read it is. Inside dev.Do, under b.mu.
func (b *Backend) registerWeight(w graph.Weight) error {
	if old := b.weights[w.Name]; old != nil && old.srcBytes == len(w.Data) && old.srcType == w.Type {
		return nil
	}
	if len(w.Dims) == 0 || w.Dims[0] <= 0 {
		return fmt.Errorf("cuda: weight %s: bad dims %v: %w", w.Name, w.Dims, graph.ErrUnsupportedWeight)
	}
	rows := 1
	for _, d := range w.Dims[1:] {
		if d <= 0 {
			return fmt.Errorf("cuda: weight %s: bad dims %v: %w", w.Name, w.Dims, graph.ErrUnsupportedWeight)
		}
		rows *= d
	}
	rb, err := w.Type.RowBytes(w.Dims[0])
	if err != nil {
		return fmt.Errorf("cuda: weight %s: %v: %w", w.Name, err, graph.ErrUnsupportedWeight)
	}
	if len(w.Data) < rb*rows {
		return fmt.Errorf("cuda: weight %s: %d bytes, %d rows of %d need %d", w.Name, len(w.Data), rows, rb, rb*rows)
	}
	dw := &devWeight{name: w.Name, srcType: w.Type, srcBytes: len(w.Data), dims: append([]int(nil), w.Dims...),
		rowLen: w.Dims[0], rows: rows}
	var data []byte
	if len(w.Dims) == 1 {
		tr, err := quant.TraitsOf(w.Type)
		if err != nil || tr.Dequantize == nil {
			return fmt.Errorf("cuda: weight %s: type %s has no dequantizer: %w", w.Name, w.Type, graph.ErrUnsupportedWeight)
		}
		f := make([]float32, w.Dims[0])
		tr.Dequantize(w.Data[:rb], f)
		data = unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
		dw.typ, dw.vector = quant.F32, true
	} else {
		if !weightTypeSupported(w.Type) {
			return fmt.Errorf("cuda: weight %s: type %s has no device kernel (device types: %v): %w", w.Name, w.Type, WeightTypes(), graph.ErrUnsupportedWeight)
		}
		data = w.Data[:rb*rows]
		dw.typ = w.Type
	}
	if !dw.vector && w.Gathered && b.lv.EmbedHost {
		return b.registerHostMapped(dw, data)
	}
	oneCopy := b.oneCopyWanted(w)
	if oneCopy {
		if data, err = oneCopyBytes(dw, data); err != nil {
			return err
		}
	}
	ptr, err := b.pool.raw(MemWeights, uint64(len(data)), "weight "+w.Name)
	if err != nil {
		return err
	}
	// A pageable copy on the backend's stream, then a sync: registration
	// happens at load, outside any split, and never inside a window.
	if err := b.s.CopyHtoD(ptr, data); err != nil {
		return fmt.Errorf("cuda: upload weight %s: %w", w.Name, err)
	}
	if err := b.s.Synchronize(); err != nil {
		return fmt.Errorf("cuda: upload weight %s: %w", w.Name, err)
	}
	b.stage.synced()
	dw.ptr = ptr
	if oneCopy { // the repacked layout is the matrix's only copy (onecopy.go)
		if uint64(ptr)%mmvqrAlign != 0 {
			return fmt.Errorf("cuda: weight %s: allocation %v is not %d-byte aligned", w.Name, ptr, mmvqrAlign)
		}
		dw.ptr, dw.rp, dw.rpOnly = 0, ptr, true
	}
	b.setWeight(dw)
	b.weightBytes += uint64(len(data))
	if oneCopy {
		return b.ensureActQ8(dw.rowLen)
	}
	if !dw.vector {
		// A gathered-only weight (an untied embedding) is read by the gather
		// alone, from its GGUF bytes: a repacked copy of it is never read.
		if b.repackWanted(dw.typ) && !w.Gathered {
			if err := b.repackWeight(dw); err != nil {
				return err
			}
		}
		return b.ensureActQ8(dw.rowLen)
	}
	return nil
}

// registerHostMapped keeps a matrix the graph only gathers rows of (the
// token embedding of an untied model, graph.Weight.Gathered) in page-locked
// host memory mapped into the device (MINFER_EMBED_HOST): a decode step
// reads one row of it over the host link, and it holds no device memory.
// The mapped pointer is fixed until Close and its bytes never change, so a
// captured graph's replays read what the direct launches read. Inside
// dev.Do, at registration.
func (b *Backend) registerHostMapped(dw *devWeight, data []byte) error {
	h, err := b.pool.hostMapped(len(data), "weight "+dw.name+" (MINFER_EMBED_HOST=1)")
	if err != nil {
		return fmt.Errorf("cuda: weight %s: %w", dw.name, err)
	}
	copy(h.Bytes(), data)
	dw.ptr, dw.host = h.Ptr(), true
	if dw.ptr == 0 {
		return fmt.Errorf("cuda: weight %s: mapped host memory has no device address", dw.name)
	}
	b.setWeight(dw)
	return nil
}

// setWeight makes dw its name's registration, counting a replacement.
func (b *Backend) setWeight(dw *devWeight) {
	if b.weights[dw.name] != nil {
		b.reregistered++
	}
	b.weights[dw.name] = dw
}

// ensureActQ8 grows the Q8_1 activation scratch of the decode mmvq path
// (b.mm.ActQ8) to hold one row of k values (8 rows with MINFER_MMVQ_NT), so the largest k of the
// registered matrices fits: it is allocated here, at registration (outside
// any split and capture window), never by a matmul. With it set, decode of
// every type in mmvqTable takes mmvq unless its lever is set. A replaced
// scratch stays allocated until Close (a captured graph may reference it;
// pool.raw moves the generation). Inside dev.Do.
func (b *Backend) ensureActQ8(k int) error {
	// MINFER_MMVQ_NT quantizes up to 8 rows into it (actQ8Rows).
	rows := actQ8Rows(b.mm)
	need := ActQ8Bytes(k, rows)
	if need == 0 || need <= b.mm.ActQ8Bytes {
		return nil
	}
	ptr, err := b.pool.raw(MemActivations, need, fmt.Sprintf("Q8_1 activation scratch (k=%d, %d rows)", k, rows))
	if err != nil {
		return err
	}
	b.mm.ActQ8, b.mm.ActQ8Bytes = ptr, need
	return nil
}

// weight looks a registered weight up by name. While a split is recorded
// for capture it notes the registration it resolved: the captured graph
// depends on that devWeight (capture.go, staleReason). Every node resolves
// its weights through here (vector included).
func (b *Backend) weight(name string) (*devWeight, error) {
	w := b.weights[name]
	if w == nil {
		return nil, fmt.Errorf("weight %s is not registered", name)
	}
	if b.cap.recording && b.cap.used != nil {
		b.cap.used[name] = w
	}
	return w, nil
}

// vector returns the device pointer of a 1-D f32 weight of length n; ""
// gives 0 (no weight).
func (b *Backend) vector(name string, n int) (driver.DevicePtr, error) {
	if name == "" {
		return 0, nil
	}
	w, err := b.weight(name)
	if err != nil {
		return 0, err
	}
	if !w.vector || w.rowLen != n {
		return 0, fmt.Errorf("weight %s has dims %v, want a vector of %d", name, w.dims, n)
	}
	return w.ptr, nil
}

// ReserveWeights implements graph.WeightReserver: before the first weight
// is registered, one arena chunk per weight class sized to every piece
// registerWeight will place there (the 1-D tensors as f32, the matrices in
// their file bytes or their one repacked copy, the derived copies where two
// are kept; a host-mapped table takes none). A later registration that
// does not fit (a size the sums missed, a reload) falls back to the
// ordinary chunks: the reservation only saves memory, it decides nothing.
func (b *Backend) ReserveWeights(ws []graph.Weight) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("cuda: backend is closed")
	}
	if len(b.weights) > 0 {
		return nil
	}
	own, derived, ok := weightPieces(b, ws)
	if !ok {
		return nil // registerWeight will refuse one: no memory set aside for a model placed elsewhere
	}
	return b.dev.Do(func() error {
		if err := b.pool.reserve(MemWeights, arenaBytes(own), "the weights"); err != nil {
			return err
		}
		return b.pool.reserve(MemDerived, arenaBytes(derived), "the weights' repacked copies")
	})
}

// weightPieces lists, in registration order, the bytes registerWeight
// allocates from the weights arena and from the derived arena for ws; ok
// is false when it would refuse one of them (the model then goes to
// another backend, so nothing should be reserved here).
func weightPieces(b *Backend, ws []graph.Weight) (own, derived []uint64, ok bool) {
	for _, w := range ws {
		if len(w.Dims) == 0 || w.Dims[0] <= 0 {
			return nil, nil, false
		}
		if len(w.Dims) == 1 {
			if tr, err := quant.TraitsOf(w.Type); err != nil || tr.Dequantize == nil {
				return nil, nil, false
			}
			own = append(own, 4*uint64(w.Dims[0]))
			continue
		}
		rows := 1
		for _, d := range w.Dims[1:] {
			rows *= d
		}
		rb, err := w.Type.RowBytes(w.Dims[0])
		if err != nil || !weightTypeSupported(w.Type) || rows <= 0 {
			return nil, nil, false
		}
		if w.Gathered && b.lv.EmbedHost {
			continue // registerHostMapped: host memory
		}
		own = append(own, uint64(rb)*uint64(rows)) // the file bytes, or the one repacked copy of the same size
		if !b.oneCopyWanted(w) && b.repackWanted(w.Type) && !w.Gathered {
			derived = append(derived, MMVQRepackBytes(w.Type, w.Dims[0], rows))
		}
	}
	return own, derived, true
}

package cuda

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
)

// devBuf is one pool entry: a device allocation of bytes bytes. live says
// whether a graph.Buffer handle currently owns it.
type devBuf struct {
	ptr   driver.DevicePtr
	bytes uint64
	live  bool
}

// pool is the backend's device allocator. It recycles exact byte lengths:
// Free puts a buffer on the free list of its size and a later Alloc of that
// size takes it back; device memory goes back to the driver only on Close
// (a persistent region must survive graph rebuilds, and a captured graph
// may still reference a freed id's pointer).
//
// gen is the pool generation: it changes whenever the set of live
// activation, scratch, workspace or KV pointers can change in a way a
// captured graph cannot see (every new buffer or scratch allocation, every
// Free), and a captured graph is valid only at the generation it was
// captured at. Weight allocations (MemWeights, and MemDerived: a weight's
// repacked copy) do not move it: a weight is immutable once registered and
// a re-registration makes a new devWeight, so a captured graph records the
// devWeights its nodes resolved and is stale only when one of those was
// replaced (capture.go, staleReason). Registering a weight a graph does not
// read therefore leaves the graph valid.
type pool struct {
	dev   *driver.Device
	bufs  []devBuf                  // graph.Buffer -> entry
	free  map[uint64][]graph.Buffer // bytes -> free ids (LIFO)
	extra []driver.DevicePtr        // KV regions, weights, scratch: freed at Close
	hosts []*driver.HostMapped      // host-mapped weights (MINFER_EMBED_HOST): freed at Close
	// hostBytes is the host-mapped bytes: host memory, in neither total
	// nor count (the device memory).
	hostBytes uint64
	gen       uint64
	total     uint64   // bytes held from the driver
	count     memCount // total by class (memory.go)
	// moves says whether an allocation of a class moves gen
	// (movesGeneration; the CPU test plants the old every-class rule).
	moves func(MemClass) bool
	// arenas sub-allocate the weights and their derived copies, which
	// live until Close (see arena).
	arenas [numMemClasses]arena
	// arenaHeld is the arenas' chunks, arenaUsed the pieces handed out.
	arenaHeld, arenaUsed uint64
}

// arena hands out pieces of one class's chunks. One cuMemAlloc per tensor
// is rounded up by the driver (to 2 MiB pages, it appears): on the H200
// the driver counted 119 MiB more than the classes on qwen2-0.5b Q8_0
// (236 MiB with the repacked copies), about a quarter of the weights, the
// size of that rounding over its ~170 matrices. A chunk holds many
// tensors; the class counts its pieces, the pool the chunks' slack.
type arena struct {
	base       driver.DevicePtr
	size, used uint64
}

const (
	// arenaChunk is the size of an arena's chunks; a tensor of at least
	// half of it gets an allocation of its own.
	arenaChunk = 64 << 20
	// arenaAlign aligns every piece as cuMemAlloc aligns an allocation.
	arenaAlign = 256
	// allocGranule is the driver's apparent rounding of an allocation
	// (see arena).
	allocGranule = 2 << 20
)

// fit is the aligned offset of a piece of bytes in a's current chunk, and
// whether it fits there.
func (a *arena) fit(bytes uint64) (uint64, bool) {
	off := (a.used + arenaAlign - 1) &^ (arenaAlign - 1)
	return off, a.base != 0 && off+bytes <= a.size
}

// arenaClass reports whether class c is sub-allocated from an arena.
func arenaClass(c MemClass) bool { return c == MemWeights || c == MemDerived }

func newPool(dev *driver.Device) *pool {
	return &pool{dev: dev, free: map[uint64][]graph.Buffer{}, moves: movesGeneration}
}

// movesGeneration is the rule: a new allocation of any class a captured
// graph bakes in by generation (activations, workspace, KV) moves it; a
// weight's (MemWeights, MemDerived) does not, because graphs track the
// weights they read by identity instead.
func movesGeneration(c MemClass) bool {
	return c != MemWeights && c != MemDerived
}

// raw allocates bytes of device memory outside the buffer table (weights,
// KV regions, scratch); the pool frees it on Close. Inside dev.Do.
// A piece of an arena class takes its current chunk when it fits there
// (a reserved one holds every weight: reserve), else a new chunk when it
// is small, else an allocation of its own.
func (p *pool) raw(c MemClass, bytes uint64, what string) (driver.DevicePtr, error) {
	if arenaClass(c) {
		if _, ok := p.arenas[c].fit(bytes); ok || bytes < arenaChunk/2 {
			return p.piece(c, bytes, what)
		}
	}
	return p.chunk(c, bytes, what)
}

// reserve makes one chunk of at least bytes the current chunk of class c's
// arena: the load sizes it to every weight the model will register
// (Backend.ReserveWeights), so the weights take one allocation and neither
// a chunk's unused tail nor the driver's rounding of one allocation per
// matrix is paid (7B Q8_0 at 32K: 62 MiB of slack and about 60 MiB of
// rounding). What the current chunk had left becomes slack. Inside dev.Do.
func (p *pool) reserve(c MemClass, bytes uint64, what string) error {
	if !arenaClass(c) || bytes == 0 {
		return nil
	}
	bytes = (bytes + allocGranule - 1) &^ (allocGranule - 1) // the driver holds whole granules anyway
	ptr, err := p.dev.Alloc(bytes)
	if err != nil {
		return outOfMemory(fmt.Errorf("cuda: pool: reserve %d bytes for %s (pool holds %d bytes): %w", bytes, what, p.total, err))
	}
	p.extra = append(p.extra, ptr)
	p.total += bytes
	p.arenaHeld += bytes
	p.arenas[c] = arena{base: ptr, size: bytes}
	return nil
}

// arenaBytes is what pieces of these sizes take of one chunk: each
// aligned as piece aligns it.
func arenaBytes(sizes []uint64) uint64 {
	var n uint64
	for _, b := range sizes {
		n = (n+arenaAlign-1)&^(arenaAlign-1) + b
	}
	return n
}

// piece is bytes of class c's arena, in its current chunk or a new one.
// The class counts the piece; the chunk's bytes not yet handed out are
// the pool's slack (DeviceMemory.ArenaSlack), so the classes stay what
// the plan predicts and their sum with the slack is what the driver holds.
func (p *pool) piece(c MemClass, bytes uint64, what string) (driver.DevicePtr, error) {
	a := &p.arenas[c]
	off, ok := a.fit(bytes)
	if !ok {
		ptr, err := p.dev.Alloc(arenaChunk)
		if err != nil {
			return 0, outOfMemory(fmt.Errorf("cuda: pool: allocate a %d-byte arena chunk for %s (pool holds %d bytes): %w", uint64(arenaChunk), what, p.total, err))
		}
		p.extra = append(p.extra, ptr)
		p.total += arenaChunk
		p.arenaHeld += arenaChunk
		a.base, a.size, off = ptr, arenaChunk, 0
	}
	a.used = off + bytes
	p.arenaUsed += bytes
	p.count.add(c, bytes)
	// A piece moves the generation by its class's rule, as an allocation
	// does (weights do not: graphs track the weights they read).
	if p.moves(c) {
		p.gen++
	}
	return a.base.Add(off), nil
}

// chunk is one device allocation of bytes, freed at Close.
func (p *pool) chunk(c MemClass, bytes uint64, what string) (driver.DevicePtr, error) {
	ptr, err := p.dev.Alloc(bytes)
	if err != nil {
		return 0, outOfMemory(fmt.Errorf("cuda: pool: allocate %d bytes for %s (pool holds %d bytes): %w", bytes, what, p.total, err))
	}
	p.account(c, ptr, bytes)
	return ptr, nil
}

// account books a raw allocation: freed at Close, counted under its class,
// and the generation moved when the class's rule says so.
func (p *pool) account(c MemClass, ptr driver.DevicePtr, bytes uint64) {
	p.extra = append(p.extra, ptr)
	p.total += bytes
	p.count.add(c, bytes)
	if p.moves(c) {
		p.gen++
	}
}

// hostMapped allocates bytes of page-locked host memory mapped into the
// device (a weight only gathered by rows, MINFER_EMBED_HOST); the pool
// frees it on Close. It is no device memory, so it moves no class; the
// generation moves (a new pointer). Inside dev.Do.
func (p *pool) hostMapped(bytes int, what string) (*driver.HostMapped, error) {
	h, err := p.dev.AllocHostMapped(bytes)
	if err != nil {
		return nil, fmt.Errorf("cuda: pool: allocate %d bytes of mapped host memory for %s: %w", bytes, what, err)
	}
	p.hosts = append(p.hosts, h)
	p.hostBytes += uint64(bytes)
	p.gen++
	return h, nil
}

// alloc returns a buffer of n 4-byte elements: a free one of exactly that
// byte length, or a new device allocation (which bumps the generation).
// Inside dev.Do.
func (p *pool) alloc(n int) (graph.Buffer, error) {
	if n < 0 {
		return 0, fmt.Errorf("cuda: pool: alloc of %d elements", n)
	}
	bytes := uint64(max(n, 1)) * 4
	if ids := p.free[bytes]; len(ids) > 0 {
		id := ids[len(ids)-1]
		p.free[bytes] = ids[:len(ids)-1]
		p.bufs[id].live = true
		return id, nil
	}
	ptr, err := p.dev.Alloc(bytes)
	if err != nil {
		return 0, outOfMemory(fmt.Errorf("cuda: pool: alloc of %d elements (%d bytes; pool holds %d bytes): %w", n, bytes, p.total, err))
	}
	p.bufs = append(p.bufs, devBuf{ptr: ptr, bytes: bytes, live: true})
	p.total += bytes
	p.count.add(MemActivations, bytes)
	p.gen++
	return graph.Buffer(len(p.bufs) - 1), nil
}

// release puts b on its size's free list; the memory stays allocated.
func (p *pool) release(b graph.Buffer) error {
	if int(b) < 0 || int(b) >= len(p.bufs) || !p.bufs[b].live {
		return fmt.Errorf("cuda: pool: free of unknown buffer %d", b)
	}
	e := &p.bufs[b]
	e.live = false
	p.free[e.bytes] = append(p.free[e.bytes], b)
	p.gen++
	return nil
}

// tensor resolves t to a device pointer, checking it lies inside its
// buffer.
func (p *pool) tensor(t graph.Tensor) (driver.DevicePtr, error) {
	if int(t.Buf) < 0 || int(t.Buf) >= len(p.bufs) || !p.bufs[t.Buf].live {
		return 0, fmt.Errorf("unknown buffer %d", t.Buf)
	}
	e := p.bufs[t.Buf]
	if t.Off < 0 || t.Len < 0 || uint64(t.Off+t.Len)*4 > e.bytes {
		return 0, fmt.Errorf("tensor [%d, +%d) outside buffer %d of %d elements", t.Off, t.Len, t.Buf, e.bytes/4)
	}
	return e.ptr.Add(uint64(t.Off) * 4), nil
}

// close frees every allocation. Inside dev.Do.
func (p *pool) close() error {
	var first error
	for _, b := range p.bufs {
		if err := p.dev.Free(b.ptr); err != nil && first == nil {
			first = err
		}
	}
	for _, ptr := range p.extra {
		if err := p.dev.Free(ptr); err != nil && first == nil {
			first = err
		}
	}
	for _, h := range p.hosts {
		if err := h.Free(); err != nil && first == nil {
			first = err
		}
	}
	p.bufs, p.extra, p.free, p.total, p.count = nil, nil, map[uint64][]graph.Buffer{}, 0, memCount{}
	p.arenas, p.arenaHeld, p.arenaUsed = [numMemClasses]arena{}, 0, 0
	p.hosts, p.hostBytes = nil, 0
	p.gen++
	return first
}

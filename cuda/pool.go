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
// pointers can change in a way a captured graph cannot see (every new
// device allocation, every Free, every weight replacement), and a captured
// graph is valid only at the generation it was captured at.
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
}

func newPool(dev *driver.Device) *pool {
	return &pool{dev: dev, free: map[uint64][]graph.Buffer{}}
}

// raw allocates bytes of device memory outside the buffer table (weights,
// KV regions, scratch); the pool frees it on Close. Inside dev.Do.
func (p *pool) raw(c MemClass, bytes uint64, what string) (driver.DevicePtr, error) {
	ptr, err := p.dev.Alloc(bytes)
	if err != nil {
		return 0, outOfMemory(fmt.Errorf("cuda: pool: allocate %d bytes for %s (pool holds %d bytes): %w", bytes, what, p.total, err))
	}
	p.extra = append(p.extra, ptr)
	p.total += bytes
	p.count.add(c, bytes)
	p.gen++
	return ptr, nil
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
	p.hosts, p.hostBytes = nil, 0
	p.gen++
	return first
}

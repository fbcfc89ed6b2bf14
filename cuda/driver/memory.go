package driver

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uint64

// Add returns p advanced by n bytes.
func (p DevicePtr) Add(n uint64) DevicePtr { return p + DevicePtr(n) }

func (p DevicePtr) String() string { return fmt.Sprintf("%#x", uint64(p)) }

// Alloc allocates n bytes of device memory (cuMemAlloc_v2). Inside Do.
// A request the device cannot hold is an *Error with CodeOutOfMemory
// naming the request, never a panic.
func (d *Device) Alloc(n uint64) (DevicePtr, error) {
	if n == 0 {
		return 0, fmt.Errorf("cuda: %s(0 bytes): zero-byte allocation", d.c.name(symMemAlloc))
	}
	var p uint64
	if err := d.c.errorf(symMemAlloc, d.c.invoke(symMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)), "%d bytes", n); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// Free releases memory from Alloc (cuMemFree_v2). Inside Do. Freeing 0 is a
// no-op.
func (d *Device) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return d.c.errorf(symMemFree, d.c.invoke(symMemFree, uintptr(p)), "%v", p)
}

// HostPinned is page-locked host memory (cuMemAllocHost_v2): the device
// copies to and from it asynchronously, without a staging copy.
type HostPinned struct {
	d *Device
	p *byte
	n int
}

// AllocHost allocates n bytes of pinned host memory. Inside Do.
func (d *Device) AllocHost(n int) (*HostPinned, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: %s(%d bytes): want a positive size", d.c.name(symMemAllocHost), n)
	}
	var p *byte
	if err := d.c.errorf(symMemAllocHost, d.c.invoke(symMemAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)), "%d bytes", n); err != nil {
		return nil, err
	}
	return &HostPinned{d: d, p: p, n: n}, nil
}

// Bytes is the pinned memory; nil after Free. An async copy into it is
// complete only after the stream (or an event recorded after it) is
// synchronized.
func (h *HostPinned) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice(h.p, h.n)
}

// Float32s views the memory as float32s (len = bytes / 4).
func (h *HostPinned) Float32s() []float32 {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(h.p)), h.n/4)
}

// Len is the size in bytes.
func (h *HostPinned) Len() int { return h.n }

// Free releases the memory (cuMemFreeHost). Inside Do. Safe to call twice.
func (h *HostPinned) Free() error { return h.d.freeHost(&h.p, h.n, "") }

// freeHost releases the n bytes of page-locked host memory at *p
// (cuMemFreeHost, which frees both HostPinned's and HostMapped's) and
// clears *p first, so that a second Free is a no-op; note ends the error.
func (d *Device) freeHost(p **byte, n int, note string) error {
	if *p == nil {
		return nil
	}
	q := *p
	*p = nil
	return d.c.errorf(symMemFreeHost, d.c.invoke(symMemFreeHost, uintptr(unsafe.Pointer(q))), "%p, %d bytes%s", q, n, note)
}

// memHostAllocDeviceMap is CU_MEMHOSTALLOC_DEVICEMAP: the allocation is
// mapped into the device's address space (every context since CUDA 3.2
// can map host memory, so the primary context needs no flag for it).
const memHostAllocDeviceMap = 0x02

// HostMapped is page-locked host memory mapped into the device's address
// space (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP): kernels read it
// through Ptr over the host link, and it holds no device memory. The
// pointer is fixed until Free, so a captured graph can read through it.
type HostMapped struct {
	d   *Device
	p   *byte
	n   int
	dev DevicePtr
}

// AllocHostMapped allocates n bytes of mapped page-locked host memory and
// reads its device address (cuMemHostGetDevicePointer_v2). Inside Do.
func (d *Device) AllocHostMapped(n int) (*HostMapped, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: %s(%d bytes): want a positive size", d.c.name(symMemHostAlloc), n)
	}
	var p *byte
	if err := d.c.errorf(symMemHostAlloc, d.c.invoke(symMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), memHostAllocDeviceMap),
		"%d bytes, DEVICEMAP", n); err != nil {
		return nil, err
	}
	h := &HostMapped{d: d, p: p, n: n}
	var dp uint64
	if err := d.c.errorf(symMemHostGetDevicePointer, d.c.invoke(symMemHostGetDevicePointer, uintptr(unsafe.Pointer(&dp)),
		uintptr(unsafe.Pointer(p)), 0), "%p", p); err != nil {
		if ferr := h.Free(); ferr != nil {
			return nil, fmt.Errorf("%w (and freeing the host memory: %v)", err, ferr)
		}
		return nil, err
	}
	h.dev = DevicePtr(dp)
	return h, nil
}

// Bytes is the host view of the memory; nil after Free.
func (h *HostMapped) Bytes() []byte {
	if h.p == nil {
		return nil
	}
	return unsafe.Slice(h.p, h.n)
}

// Ptr is the device address of the memory (0 after Free).
func (h *HostMapped) Ptr() DevicePtr {
	if h.p == nil {
		return 0
	}
	return h.dev
}

// Len is the size in bytes.
func (h *HostMapped) Len() int { return h.n }

// Free releases the memory (cuMemFreeHost). Inside Do, after every kernel
// that reads it has completed. Safe to call twice.
func (h *HostMapped) Free() error { return h.d.freeHost(&h.p, h.n, " (mapped)") }

// Float32Bytes views a float32 slice as bytes (no copy), for copies.
func Float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// CopyHtoD queues a host-to-device copy of src on the stream
// (cuMemcpyHtoDAsync_v2). Inside Do. src may be pageable Go memory (the
// driver stages it before returning, so src may be reused at once) or
// HostPinned memory (which must stay untouched until the stream reaches
// the copy).
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	c := &s.d.c
	return c.errorf(symMemcpyHtoDAsync, c.invoke(symMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.h),
		"dst=%v, %d bytes, stream %#x", dst, len(src), s.h)
}

// CopyDtoH queues a device-to-host copy into dst (cuMemcpyDtoHAsync_v2).
// Inside Do. Into pageable Go memory the driver returns when the copy is
// done; into HostPinned memory the data is there only after the stream is
// synchronized.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	c := &s.d.c
	return c.errorf(symMemcpyDtoHAsync, c.invoke(symMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), s.h),
		"src=%v, %d bytes, stream %#x", src, len(dst), s.h)
}

// CopyDtoD queues a device-to-device copy of n bytes
// (cuMemcpyDtoDAsync_v2). Inside Do.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n uint64) error {
	if n == 0 {
		return nil
	}
	c := &s.d.c
	return c.errorf(symMemcpyDtoDAsync, c.invoke(symMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s.h),
		"dst=%v, src=%v, %d bytes, stream %#x", dst, src, n, s.h)
}

// MemsetD8 queues setting n bytes at dst to v (cuMemsetD8Async). Inside Do.
func (s *Stream) MemsetD8(dst DevicePtr, v byte, n uint64) error {
	if n == 0 {
		return nil
	}
	c := &s.d.c
	return c.errorf(symMemsetD8Async, c.invoke(symMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), s.h),
		"dst=%v, value %d, %d bytes, stream %#x", dst, v, n, s.h)
}

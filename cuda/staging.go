package cuda

import (
	"fmt"

	"github.com/minfer-go/minfer/cuda/driver"
)

// Host transfers. H2D writes go through a small ring of pinned slots: the
// values are copied into a slot and an async copy is queued on the
// backend's stream (same-stream ordering makes them visible to the kernels
// that follow). A slot is reused only after the stream has passed its
// copy: when the ring is full it is retired with one stream sync, and any
// other sync of the stream retires it too. Writes larger than a slot go as
// pageable copies (the driver stages those before returning).
//
// D2H reads go through one pinned readback buffer that grows on demand
// (or straight into the caller's slice when MINFER_NO_PINNED_READBACK=1).
// Device memory is never read by plain host access.
const (
	stageSlots     = 8
	stageSlotBytes = 256 << 10
	readbackMin    = 1 << 20
)

type staging struct {
	dev      *driver.Device
	s        *driver.Stream
	slots    []*driver.HostPinned
	next     int // next slot to use
	inflight int // slots whose copy may not have run yet

	noPinnedReadback bool
	readback         *driver.HostPinned

	pinnedWrites, pageableWrites, readbacks int64
}

// write queues a copy of src to dst. Inside dev.Do, never inside a capture
// window.
func (st *staging) write(dst driver.DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if len(src) > stageSlotBytes {
		st.pageableWrites++
		return st.s.CopyHtoD(dst, src)
	}
	if st.slots == nil {
		for range stageSlots {
			h, err := st.dev.AllocHost(stageSlotBytes)
			if err != nil {
				st.freeSlots()
				return fmt.Errorf("cuda: staging ring: %w", err)
			}
			st.slots = append(st.slots, h)
		}
	}
	if st.inflight == len(st.slots) {
		if err := st.s.Synchronize(); err != nil {
			return fmt.Errorf("cuda: staging ring wrap: %w", err)
		}
		st.inflight = 0
	}
	slot := st.slots[st.next]
	st.next = (st.next + 1) % len(st.slots)
	st.inflight++
	b := slot.Bytes()[:len(src)]
	copy(b, src)
	st.pinnedWrites++
	return st.s.CopyHtoD(dst, b)
}

// synced tells the ring that the stream has been synchronized.
func (st *staging) synced() { st.inflight = 0 }

// read copies len(dst) bytes at src into dst and waits for them. Inside
// dev.Do.
func (st *staging) read(dst []byte, src driver.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	st.readbacks++
	if st.noPinnedReadback {
		if err := st.s.CopyDtoH(dst, src); err != nil {
			return err
		}
		if err := st.s.Synchronize(); err != nil {
			return err
		}
		st.synced()
		return nil
	}
	if st.readback == nil || st.readback.Len() < len(dst) {
		if st.readback != nil {
			if err := st.readback.Free(); err != nil {
				return err
			}
			st.readback = nil
		}
		n := max(readbackMin, len(dst))
		h, err := st.dev.AllocHost(n)
		if err != nil {
			return fmt.Errorf("cuda: pinned readback of %d bytes: %w", n, err)
		}
		st.readback = h
	}
	buf := st.readback.Bytes()[:len(dst)]
	if err := st.s.CopyDtoH(buf, src); err != nil {
		return err
	}
	if err := st.s.Synchronize(); err != nil {
		return err
	}
	st.synced()
	copy(dst, buf)
	return nil
}

func (st *staging) freeSlots() error {
	var first error
	for _, h := range st.slots {
		if err := h.Free(); err != nil && first == nil {
			first = err
		}
	}
	st.slots = nil
	return first
}

// close frees the pinned memory. Inside dev.Do, after a stream sync.
func (st *staging) close() error {
	first := st.freeSlots()
	if st.readback != nil {
		if err := st.readback.Free(); err != nil && first == nil {
			first = err
		}
		st.readback = nil
	}
	return first
}

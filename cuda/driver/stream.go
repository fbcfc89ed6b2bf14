package driver

import (
	"fmt"
	"time"
	"unsafe"
)

const (
	streamNonBlocking         = 1 // CU_STREAM_NON_BLOCKING
	captureModeThreadLocal    = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
	eventDefault              = 0 // CU_EVENT_DEFAULT
	eventDisableTiming        = 2 // CU_EVENT_DISABLE_TIMING
	graphInstantiateFlagsNone = 0
)

// Stream is a non-blocking CUDA stream (CU_STREAM_NON_BLOCKING): it never
// synchronizes implicitly with the legacy default stream.
type Stream struct {
	d *Device
	h uintptr
}

// NewStream creates a non-blocking stream. Inside Do.
func (d *Device) NewStream() (*Stream, error) {
	var h uintptr
	if err := d.c.errorf(symStreamCreate, d.c.invoke(symStreamCreate, uintptr(unsafe.Pointer(&h)), streamNonBlocking), "CU_STREAM_NON_BLOCKING"); err != nil {
		return nil, err
	}
	return &Stream{d: d, h: h}, nil
}

// Handle is the CUstream.
func (s *Stream) Handle() uintptr { return s.h }

// Synchronize waits for the work queued on the stream. Inside Do. Not
// inside a capture window (the driver refuses).
func (s *Stream) Synchronize() error {
	return s.d.c.errorf(symStreamSynchronize, s.d.c.invoke(symStreamSynchronize, s.h), "stream %#x", s.h)
}

// WaitEvent makes later work on the stream wait for e (cuStreamWaitEvent).
func (s *Stream) WaitEvent(e *Event) error {
	return s.d.c.errorf(symStreamWaitEvent, s.d.c.invoke(symStreamWaitEvent, s.h, e.h, 0), "stream %#x, event %#x", s.h, e.h)
}

// Destroy destroys the stream (cuStreamDestroy_v2). Inside Do. Safe twice.
func (s *Stream) Destroy() error {
	return s.d.c.destroy(symStreamDestroy, &s.h, "stream")
}

// CaptureStatus is a stream's capture state (CUstreamCaptureStatus).
type CaptureStatus int

const (
	CaptureNone        CaptureStatus = 0
	CaptureActive      CaptureStatus = 1
	CaptureInvalidated CaptureStatus = 2
)

func (c CaptureStatus) String() string {
	switch c {
	case CaptureNone:
		return "none"
	case CaptureActive:
		return "active"
	case CaptureInvalidated:
		return "invalidated"
	}
	return fmt.Sprintf("CaptureStatus(%d)", int(c))
}

// BeginCapture opens a capture window on the stream in thread-local mode
// (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL): only this (the device) thread's
// capture-unsafe calls can invalidate it. Inside Do, and EndCapture inside
// the same Do.
func (s *Stream) BeginCapture() error {
	c := &s.d.c
	if err := c.errorf(symStreamBeginCapture, c.invoke(symStreamBeginCapture, s.h, captureModeThreadLocal), "stream %#x, thread-local", s.h); err != nil {
		return err
	}
	s.d.capMu.Lock()
	s.d.capturing[s.h] = s
	s.d.capOpen.Store(int32(len(s.d.capturing)))
	s.d.capMu.Unlock()
	return nil
}

// EndCapture closes the window and returns the captured graph. If the
// driver fails the capture (e.g. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
// the window is still closed and the error names the stream.
func (s *Stream) EndCapture() (*Graph, error) {
	c := &s.d.c
	var g uintptr
	code := c.invoke(symStreamEndCapture, s.h, uintptr(unsafe.Pointer(&g)))
	s.d.capMu.Lock()
	delete(s.d.capturing, s.h)
	s.d.capOpen.Store(int32(len(s.d.capturing)))
	s.d.capMu.Unlock()
	if err := c.errorf(symStreamEndCapture, code, "stream %#x", s.h); err != nil {
		if g != 0 {
			c.invoke(symGraphDestroy, g)
		}
		return nil, err
	}
	return &Graph{d: s.d, h: g}, nil
}

// IsCapturing reports the stream's capture state.
func (s *Stream) IsCapturing() (CaptureStatus, error) {
	var st int32
	err := s.d.c.errorf(symStreamIsCapturing, s.d.c.invoke(symStreamIsCapturing, s.h, uintptr(unsafe.Pointer(&st))), "stream %#x", s.h)
	return CaptureStatus(st), err
}

// Graph is a captured CUDA graph (CUgraph).
type Graph struct {
	d *Device
	h uintptr
}

// Instantiate makes an executable graph (cuGraphInstantiateWithFlags).
func (g *Graph) Instantiate() (*GraphExec, error) {
	var x uintptr
	if err := g.d.c.errorf(symGraphInstantiate, g.d.c.invoke(symGraphInstantiate, uintptr(unsafe.Pointer(&x)), g.h, graphInstantiateFlagsNone), "graph %#x", g.h); err != nil {
		return nil, err
	}
	return &GraphExec{d: g.d, h: x}, nil
}

// Destroy destroys the graph; executable graphs made from it stay valid.
func (g *Graph) Destroy() error {
	return g.d.c.destroy(symGraphDestroy, &g.h, "graph")
}

// GraphExec is an instantiated graph (CUgraphExec).
type GraphExec struct {
	d *Device
	h uintptr
}

// Launch queues a replay of the graph on the stream (cuGraphLaunch).
func (x *GraphExec) Launch(s *Stream) error {
	return x.d.c.errorf(symGraphLaunch, x.d.c.invoke(symGraphLaunch, x.h, s.h), "graph exec %#x, stream %#x", x.h, s.h)
}

// Destroy destroys the executable graph. Safe twice.
func (x *GraphExec) Destroy() error {
	return x.d.c.destroy(symGraphExecDestroy, &x.h, "graph exec")
}

// Event is a CUDA event.
type Event struct {
	d      *Device
	h      uintptr
	timing bool
}

// NewEvent creates an event; timing events can be measured with Elapsed,
// the others are cheaper (CU_EVENT_DISABLE_TIMING). Inside Do.
func (d *Device) NewEvent(timing bool) (*Event, error) {
	flags := uintptr(eventDisableTiming)
	if timing {
		flags = eventDefault
	}
	var h uintptr
	if err := d.c.errorf(symEventCreate, d.c.invoke(symEventCreate, uintptr(unsafe.Pointer(&h)), flags), "flags %d", flags); err != nil {
		return nil, err
	}
	return &Event{d: d, h: h, timing: timing}, nil
}

// Record queues the event on the stream.
func (e *Event) Record(s *Stream) error {
	return e.d.c.errorf(symEventRecord, e.d.c.invoke(symEventRecord, e.h, s.h), "event %#x, stream %#x", e.h, s.h)
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error {
	return e.d.c.errorf(symEventSynchronize, e.d.c.invoke(symEventSynchronize, e.h), "event %#x", e.h)
}

// Destroy destroys the event (cuEventDestroy_v2). Safe twice.
func (e *Event) Destroy() error {
	return e.d.c.destroy(symEventDestroy, &e.h, "event")
}

// Elapsed is the device time between two recorded, completed timing events
// (cuEventElapsedTime; about 0.5 us resolution).
func Elapsed(start, end *Event) (time.Duration, error) {
	if !start.timing || !end.timing {
		return 0, fmt.Errorf("cuda: %s: events created without timing", start.d.c.name(symEventElapsedTime))
	}
	var ms float32
	if err := start.d.c.errorf(symEventElapsedTime, start.d.c.invoke(symEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, end.h), "start %#x, end %#x", start.h, end.h); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

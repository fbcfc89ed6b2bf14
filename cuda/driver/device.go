package driver

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/minfer-go/minfer/internal/dynlib"
)

// Device attributes (CUdevice_attribute).
const (
	attrMaxSharedMemoryPerBlock      = 8
	attrMultiprocessorCount          = 16
	attrComputeCapabilityMajor       = 75
	attrComputeCapabilityMinor       = 76
	attrMaxSharedMemoryPerBlockOptin = 97
)

// Options says which device to open and how. The caller fills it from its
// levers.Config; this package reads no environment.
type Options struct {
	// Disable declines without touching the driver (MINFER_DISABLE_CUDA).
	Disable bool
	// Ordinal is the device index (0 for the first GPU).
	Ordinal int
	// CallFail is the test seam (MINFER_TEST_CALL_FAIL): a comma-separated
	// list of driver entry points ("cuMemAlloc_v2") or kernel launches
	// ("cuLaunchKernel:NAME") that fail with CUDA_ERROR_UNKNOWN, marked
	// as injected, without reaching the driver.
	CallFail string
}

// Attributes are the device properties queried at Open.
type Attributes struct {
	Name          string // e.g. "NVIDIA H200"
	Ordinal       int
	SMCount       int
	CCMajor       int // compute capability
	CCMinor       int
	SmemPerBlock  int // default shared memory per block, bytes
	SmemOptin     int // largest dynamic shared memory a kernel may opt into, bytes
	FreeMem       uint64
	TotalMem      uint64
	DriverVersion int    // e.g. 13000 for CUDA 13.0
	Library       string // the driver library that was loaded
}

func (a Attributes) String() string {
	return fmt.Sprintf("%s (device %d, sm_%d%d, %d SMs, smem opt-in %d B, %.1f/%.1f GiB free, driver %d.%d)",
		a.Name, a.Ordinal, a.CCMajor, a.CCMinor, a.SMCount, a.SmemOptin,
		float64(a.FreeMem)/(1<<30), float64(a.TotalMem)/(1<<30), a.DriverVersion/1000, a.DriverVersion%1000/10)
}

// Device is one GPU with its primary context current on a dedicated,
// locked OS thread. See the package documentation for the thread rules.
type Device struct {
	Attr Attributes

	c   caller
	dev int32   // CUdevice
	ctx uintptr // CUcontext (primary)
	tid int     // the worker's OS thread id

	jobs    chan job
	stop    chan chan error
	done    chan struct{}
	closed  atomic.Bool
	closeMu sync.Mutex
	closeOK bool
	closeEr error

	capMu     sync.Mutex
	capturing map[uintptr]*Stream // streams with an open capture window
	capOpen   atomic.Int32

	// handoffs counts the Do calls that crossed to the device thread (a
	// nested Do runs inline and is not one): each wakes that thread and
	// then the caller, host time on every decode step (Handoffs).
	handoffs atomic.Int64
}

type job struct {
	fn   func() error
	done chan jobResult
}

type jobResult struct {
	err      error
	panicked bool
	pval     any
}

var (
	openMu    sync.Mutex
	openCount int // devices open in this process (profiler stop at the last Close)
)

// Open opens the device named by opts.Ordinal. Every reason it cannot is an
// error matching ErrNoDevice, except a malformed opts.CallFail.
func Open(opts Options) (*Device, error) {
	if opts.Disable {
		return nil, noDevice("disabled by the caller (MINFER_DISABLE_CUDA is set)", nil)
	}
	cf, err := parseCallFail(opts.CallFail)
	if err != nil {
		return nil, err
	}
	l, err := theLib()
	if err != nil {
		return nil, noDevice("no CUDA driver", err)
	}
	c := caller{lib: l, fail: cf}
	if err := c.errorf(symInit, c.invoke(symInit, 0), "0"); err != nil {
		return nil, noDevice("the driver did not initialise", err)
	}
	var ver, count int32
	if err := c.errorf(symDriverGetVersion, c.invoke(symDriverGetVersion, uintptr(unsafe.Pointer(&ver))), ""); err != nil {
		return nil, noDevice("driver version", err)
	}
	if err := c.errorf(symDeviceGetCount, c.invoke(symDeviceGetCount, uintptr(unsafe.Pointer(&count))), ""); err != nil {
		return nil, noDevice("device count", err)
	}
	if count == 0 {
		return nil, noDevice("the driver reports no CUDA device", nil)
	}
	if opts.Ordinal < 0 || opts.Ordinal >= int(count) {
		return nil, noDevice(fmt.Sprintf("device ordinal %d out of range (%d devices)", opts.Ordinal, count), nil)
	}
	var dev int32
	if err := c.errorf(symDeviceGet, c.invoke(symDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(opts.Ordinal)), "ordinal %d", opts.Ordinal); err != nil {
		return nil, noDevice("device handle", err)
	}
	d := &Device{
		c:         c,
		dev:       dev,
		jobs:      make(chan job),
		stop:      make(chan chan error),
		done:      make(chan struct{}),
		capturing: map[uintptr]*Stream{},
	}
	d.Attr.Ordinal = opts.Ordinal
	d.Attr.DriverVersion = int(ver)
	d.Attr.Library = l.path
	ready := make(chan error, 1)
	go d.worker(ready)
	if err := <-ready; err != nil {
		return nil, noDevice(fmt.Sprintf("device %d", opts.Ordinal), err)
	}
	return d, nil
}

// worker owns the OS thread the primary context is current on.
func (d *Device) worker(ready chan<- error) {
	// Never unlocked: when this goroutine returns, its thread exits with it.
	runtime.LockOSThread()
	d.tid = threadID()
	if err := d.setUp(); err != nil {
		if d.ctx != 0 {
			d.c.invoke(symPrimaryCtxRelease, uintptr(d.dev))
		}
		ready <- err
		return
	}
	ready <- nil
	for {
		select {
		case j := <-d.jobs:
			j.done <- d.runJob(j.fn)
		case errc := <-d.stop:
			errc <- d.tearDown()
			close(d.done)
			return
		}
	}
}

// setUp retains the primary context, makes it current and reads the
// attributes. Runs on the worker thread.
func (d *Device) setUp() error {
	c := &d.c
	var ctx uintptr
	if err := c.errorf(symPrimaryCtxRetain, c.invoke(symPrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(d.dev)), "device %d", d.Attr.Ordinal); err != nil {
		return err
	}
	d.ctx = ctx
	if err := c.errorf(symCtxSetCurrent, c.invoke(symCtxSetCurrent, ctx), "primary context of device %d", d.Attr.Ordinal); err != nil {
		return err
	}
	name := make([]byte, deviceNameBytes)
	if err := c.errorf(symDeviceGetName, c.invoke(symDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(d.dev)), "device %d", d.Attr.Ordinal); err != nil {
		return err
	}
	d.Attr.Name = dynlib.CString(&name[0], len(name))
	for _, a := range []struct {
		attr int
		name string
		dst  *int
	}{
		{attrMultiprocessorCount, "MULTIPROCESSOR_COUNT", &d.Attr.SMCount},
		{attrComputeCapabilityMajor, "COMPUTE_CAPABILITY_MAJOR", &d.Attr.CCMajor},
		{attrComputeCapabilityMinor, "COMPUTE_CAPABILITY_MINOR", &d.Attr.CCMinor},
		{attrMaxSharedMemoryPerBlock, "MAX_SHARED_MEMORY_PER_BLOCK", &d.Attr.SmemPerBlock},
		{attrMaxSharedMemoryPerBlockOptin, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", &d.Attr.SmemOptin},
	} {
		var v int32
		if err := c.errorf(symDeviceGetAttribute, c.invoke(symDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(d.dev)), "%s, device %d", a.name, d.Attr.Ordinal); err != nil {
			return err
		}
		*a.dst = int(v)
	}
	free, total, err := d.MemInfo()
	if err != nil {
		return err
	}
	d.Attr.FreeMem, d.Attr.TotalMem = free, total
	openMu.Lock()
	openCount++
	if openCount == 1 && c.lib.fn[symProfilerStart] != 0 {
		// Resume profiling after an earlier last Close stopped it; a no-op
		// when no profiler is attached.
		c.invoke(symProfilerStart)
	}
	openMu.Unlock()
	return nil
}

// tearDown runs on the worker at Close: wait for the device, flush the
// profiler if this is the last open device (Go exits without running libc
// atexit handlers, so nsys would otherwise lose the kernel data), release
// the primary context.
func (d *Device) tearDown() error {
	c := &d.c
	errs := []error{c.errorf(symCtxSynchronize, c.invoke(symCtxSynchronize), "device %d at Close", d.Attr.Ordinal)}
	openMu.Lock()
	openCount--
	if openCount == 0 && c.lib.fn[symProfilerStop] != 0 {
		errs = append(errs, c.errorf(symProfilerStop, c.invoke(symProfilerStop), ""))
	}
	openMu.Unlock()
	errs = append(errs, c.errorf(symPrimaryCtxRelease, c.invoke(symPrimaryCtxRelease, uintptr(d.dev)), "device %d", d.Attr.Ordinal))
	return errors.Join(errs...)
}

// runJob runs one top-level job on the worker, closing any capture window
// the job left open.
func (d *Device) runJob(fn func() error) (r jobResult) {
	defer func() {
		if p := recover(); p != nil {
			r = jobResult{err: d.abortCaptures(nil), panicked: true, pval: p}
		}
	}()
	err := fn()
	return jobResult{err: d.abortCaptures(err)}
}

// abortCaptures ends every capture window still open after a job, discards
// the graphs and adds an error saying so.
func (d *Device) abortCaptures(err error) error {
	if d.capOpen.Load() == 0 {
		return err
	}
	d.capMu.Lock()
	open := make([]*Stream, 0, len(d.capturing))
	for _, s := range d.capturing {
		open = append(open, s)
	}
	d.capMu.Unlock()
	errs := []error{err}
	for _, s := range open {
		g, endErr := s.EndCapture()
		if g != nil {
			endErr = errors.Join(endErr, g.Destroy())
		}
		errs = append(errs, fmt.Errorf("cuda: a capture window on stream %#x was left open when Do returned; it was ended and its graph discarded (open and close a window inside one Do)", s.h), endErr)
	}
	return errors.Join(errs...)
}

// Do runs fn on the device thread (the one the primary context is current
// on) and returns its error. Safe from any goroutine; a Do from inside Do
// runs fn inline. A panic in fn is re-raised in the caller. After Close it
// returns ErrClosed.
func (d *Device) Do(fn func() error) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if threadID() == d.tid {
		return fn() // already on the device thread: nested Do
	}
	d.handoffs.Add(1)
	j := job{fn: fn, done: make(chan jobResult, 1)}
	select {
	case d.jobs <- j:
	case <-d.done:
		return ErrClosed
	}
	r := <-j.done
	if r.panicked {
		panic(r.pval)
	}
	return r.err
}

// OnThread reports whether the caller runs on the device thread (inside a
// Do), where a nested Do is a direct call.
func (d *Device) OnThread() bool { return threadID() == d.tid }

// Handoffs is how many Do calls have crossed to the device thread so far:
// read it around a step to count the step's thread handoffs.
func (d *Device) Handoffs() int64 { return d.handoffs.Load() }

// Close waits for the device, releases the primary context and stops the
// worker. Every handle from this Device is invalid afterwards. Safe to call
// more than once and from any goroutine (not from inside Do).
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closeOK {
		return d.closeEr
	}
	if threadID() == d.tid {
		return errors.New("cuda: Close called from inside Do")
	}
	d.closeOK = true
	d.closed.Store(true)
	errc := make(chan error, 1)
	d.stop <- errc
	d.closeEr = <-errc
	return d.closeEr
}

// Synchronize waits for all work on the device (cuCtxSynchronize). Inside Do.
func (d *Device) Synchronize() error {
	return d.c.errorf(symCtxSynchronize, d.c.invoke(symCtxSynchronize), "device %d", d.Attr.Ordinal)
}

// InjectedFailures is how many driver calls the test seam
// (Options.CallFail) has failed on this device so far: a sweep tells a
// failure that was reached from a call that never ran.
func (d *Device) InjectedFailures() int64 { return d.c.fail.injected() }

// MemInfo returns the free and total device memory. Inside Do.
func (d *Device) MemInfo() (free, total uint64, err error) {
	var f, t uintptr
	err = d.c.errorf(symMemGetInfo, d.c.invoke(symMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))), "device %d", d.Attr.Ordinal)
	return uint64(f), uint64(t), err
}

// Package driver binds the CUDA driver API (libcuda.so.1) through purego, so
// a CGO_ENABLED=0 binary built on a CPU-only machine drives the GPU of the
// machine it runs on. It is the only package that calls the driver; it knows
// nothing about graph nodes.
//
// # Opening a device
//
// Open loads the driver, initialises it, picks the device by ordinal and
// makes its primary context current on a dedicated OS thread. Every reason a
// device cannot be used (disabled by the caller, no libcuda, cuInit failing,
// no device, a bad ordinal) comes back as an error for which
// errors.Is(err, ErrNoDevice) holds, with the reason in the message, so the
// caller can decline to the CPU and log it once. Open never panics.
//
// # Thread discipline
//
// A CUDA context is current per OS thread and goroutines migrate between
// threads. A Device therefore owns one worker goroutine that called
// runtime.LockOSThread and made the primary context current; Device.Do
// hands a function to that goroutine and waits for it. Every method that
// talks to the driver (Alloc, NewStream, Launch, copies, capture, ...) must
// run inside Do: from any other goroutine the driver answers
// CUDA_ERROR_INVALID_CONTEXT (201), which surfaces as an *Error, never as a
// crash. Do is safe from any goroutine and may be nested (a Do called from
// inside Do runs inline). The attribute fields of a Device (Attr) and Close
// are safe anywhere.
//
// Because the worker is one thread, a stream-capture window (thread-local
// mode) must be opened and closed inside one Do call: between two Do calls
// another caller's work runs on the same thread and would fall inside the
// window. Do enforces it: a window still open when the function returns is
// ended, its graph discarded, and Do returns an error.
//
// # Errors
//
// Every driver result other than CUDA_SUCCESS becomes an *Error naming the
// driver entry point and the arguments that matter, e.g.
//
//	cuda: cuMemAlloc_v2(1048576 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)
//
// Options.CallFail is a test seam (MINFER_TEST_CALL_FAIL through the
// levers package): the named driver calls return CUDA_ERROR_UNKNOWN without
// reaching the driver, and the error says it was injected.
//
// # Kernels
//
// The kernels are compiled by scripts/build-kernels.sh into one file,
// minfer-kernels.fatbin, found next to the executable or at a path the
// caller passes (MINFER_KERNELS through the levers package): one fatbin
// container, or one per compiled unit concatenated, each loaded as a module
// (SplitFatbins); see FindKernels and Device.LoadKernels. Device.LoadImages
// loads the units of a build made otherwise (cuda/nvrtc's cubins) the same
// way.
package driver

package driver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// CUDA result codes the callers test for; the full list is the driver's
// CUresult enum.
const (
	CodeSuccess                   = 0
	CodeInvalidValue              = 1
	CodeOutOfMemory               = 2
	CodeNotInitialized            = 3
	CodeNoDevice                  = 100
	CodeInvalidContext            = 201
	CodeNotFound                  = 500
	CodeNotReady                  = 600
	CodeStreamCaptureInvalidated  = 901
	CodeStreamCaptureWrongThread  = 908
	CodeUnknown                   = 999
	codeInjected                  = CodeUnknown
	injectedSuffix                = " [injected by the call-failure test seam]"
	errNameUnrecognized           = "CUDA_ERROR_UNRECOGNIZED"
	launchKernelFailPrefix        = "cuLaunchKernel:"
	maxCallFailEntries            = 64
	deviceNameBytes               = 256
	funcAttrMaxDynamicSharedBytes = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
)

// Error is a CUDA driver call that did not return CUDA_SUCCESS.
type Error struct {
	Code int    // the CUresult
	Name string // its name, e.g. CUDA_ERROR_OUT_OF_MEMORY
	Call string // the driver entry point and the arguments that matter
	// Injected is true when the test seam (Options.CallFail) failed the call
	// without reaching the driver.
	Injected bool
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Injected {
		s += injectedSuffix
	}
	return s
}

// IsCode reports whether err is (or wraps) an *Error with the given code.
func IsCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// ErrNoDevice is the sentinel every "CUDA cannot be used here" error
// matches with errors.Is: disabled, no driver library, no device.
var ErrNoDevice = errors.New("cuda: no usable device")

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("cuda: device closed")

// NoDeviceError says why no device could be opened.
type NoDeviceError struct {
	Reason string
	Err    error // the underlying failure, often an *Error; may be nil
}

func (e *NoDeviceError) Error() string {
	if e.Err != nil {
		return ErrNoDevice.Error() + ": " + e.Reason + ": " + e.Err.Error()
	}
	return ErrNoDevice.Error() + ": " + e.Reason
}

// Is makes errors.Is(err, ErrNoDevice) hold.
func (e *NoDeviceError) Is(target error) bool { return target == ErrNoDevice }

// Unwrap returns the underlying failure.
func (e *NoDeviceError) Unwrap() error { return e.Err }

func noDevice(reason string, err error) error { return &NoDeviceError{Reason: reason, Err: err} }

// errorNames holds the CUresult names so an error reads well even when the
// driver cannot be asked (injected failures, a driver that lacks a name).
var errorNames = map[int]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED",
	5: "CUDA_ERROR_PROFILER_DISABLED", 6: "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
	7: "CUDA_ERROR_PROFILER_ALREADY_STARTED", 8: "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
	34: "CUDA_ERROR_STUB_LIBRARY", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 102: "CUDA_ERROR_DEVICE_NOT_LICENSED",
	200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
	202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE", 215: "CUDA_ERROR_UNSUPPORTED_LIMIT",
	216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", 218: "CUDA_ERROR_INVALID_PTX",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	223: "CUDA_ERROR_JIT_COMPILATION_DISABLED",
	300: "CUDA_ERROR_INVALID_SOURCE", 301: "CUDA_ERROR_FILE_NOT_FOUND",
	302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", 303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
	304: "CUDA_ERROR_OPERATING_SYSTEM", 400: "CUDA_ERROR_INVALID_HANDLE", 401: "CUDA_ERROR_ILLEGAL_STATE",
	500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT", 709: "CUDA_ERROR_CONTEXT_IS_DESTROYED", 710: "CUDA_ERROR_ASSERT",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED",
	720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
	800: "CUDA_ERROR_NOT_PERMITTED", 801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", 901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	902: "CUDA_ERROR_STREAM_CAPTURE_MERGE", 903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", 905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
	906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", 907: "CUDA_ERROR_CAPTURED_EVENT",
	908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", 909: "CUDA_ERROR_TIMEOUT",
	910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", 911: "CUDA_ERROR_EXTERNAL_DEVICE",
	999: "CUDA_ERROR_UNKNOWN",
}

// staticErrorName names a code from the table above.
func staticErrorName(code int) string {
	if n, ok := errorNames[code]; ok {
		return n
	}
	return errNameUnrecognized
}

// callFail is the parsed Options.CallFail: which driver calls fail.
type callFail struct {
	sym     [numSyms]bool   // the symbol's calls fail (all of them, or the nth[s]-th)
	kernels map[string]bool // cuLaunchKernel:NAME fails launches of NAME only
	any     bool
	// nth[s] > 0 (NAME@N) fails only the N-th call of s, counted in
	// calls (shared by the copies of one parsed seam): a sweep can fail each
	// call once and see the backend recover or name it.
	nth   [numSyms]int64
	calls *[numSyms]atomic.Int64
	hits  *atomic.Int64 // injected failures so far
}

// parseCallFail reads a comma-separated list of driver entry points
// ("cuMemAlloc_v2", "cuStreamEndCapture", ...) and kernel launches
// ("cuLaunchKernel:minfer_smoke_axpy"). An unknown name is an error, so a
// typo cannot make a failure test pass vacuously.
func parseCallFail(s string) (callFail, error) {
	cf := callFail{calls: new([numSyms]atomic.Int64), hits: new(atomic.Int64)}
	if strings.TrimSpace(s) == "" {
		return cf, nil
	}
	entries := strings.Split(s, ",")
	if len(entries) > maxCallFailEntries {
		return cf, fmt.Errorf("cuda: call-failure seam: %d entries, at most %d", len(entries), maxCallFailEntries)
	}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if k, ok := strings.CutPrefix(e, launchKernelFailPrefix); ok && k != "" {
			if cf.kernels == nil {
				cf.kernels = map[string]bool{}
			}
			cf.kernels[k] = true
			cf.any = true
			continue
		}
		name, at, hasAt := strings.Cut(e, "@")
		s, ok := symByName(name)
		if !ok {
			return callFail{}, fmt.Errorf("cuda: call-failure seam: unknown driver call %q (want a name such as cuMemAlloc_v2, cuMemAlloc_v2@N for its N-th call only, or cuLaunchKernel:KERNEL)", e)
		}
		if hasAt {
			n, err := strconv.ParseInt(at, 10, 64)
			if err != nil || n < 1 {
				return callFail{}, fmt.Errorf("cuda: call-failure seam: %q: want NAME@N with N >= 1", e)
			}
			cf.nth[s] = n
		}
		cf.sym[s] = true
		cf.any = true
	}
	return cf, nil
}

// fails reports whether the seam fails this call.
// Call it once per call: a NAME@N entry counts the calls.
func (cf *callFail) fails(s sym) bool {
	if !cf.any || !cf.sym[s] {
		return false
	}
	if cf.nth[s] > 0 && cf.calls[s].Add(1) != cf.nth[s] {
		return false
	}
	cf.hits.Add(1)
	return true
}

// covers reports whether the seam names s at all (an injected code of s is
// the seam's).
func (cf *callFail) covers(s sym) bool { return cf.any && cf.sym[s] }

// failsLaunch reports whether the seam fails a launch of the named kernel
// (once per launch, as fails).
func (cf *callFail) failsLaunch(kernel string) bool {
	if cf.any && cf.kernels[kernel] {
		cf.hits.Add(1)
		return true
	}
	return cf.fails(symLaunchKernel)
}

// CallNames are the driver entry points the seam can fail, one name each
// (the first candidate of symNames), in binding order.
func CallNames() []string {
	out := make([]string, 0, numSyms)
	for s := sym(0); s < numSyms; s++ {
		out = append(out, symNames[s][0])
	}
	return out
}

// injected is how many calls the seam has failed.
func (cf *callFail) injected() int64 {
	if cf.hits == nil {
		return 0
	}
	return cf.hits.Load()
}

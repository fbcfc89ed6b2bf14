package driver

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/minfer-go/minfer/internal/dynlib"
)

// sym indexes the driver entry points this package binds.
type sym int

const (
	symInit sym = iota
	symDriverGetVersion
	symDeviceGetCount
	symDeviceGet
	symDeviceGetName
	symDeviceGetAttribute
	symGetErrorName
	symGetErrorString
	symPrimaryCtxRetain
	symPrimaryCtxRelease
	symCtxSetCurrent
	symCtxSynchronize
	symMemGetInfo
	symMemAlloc
	symMemFree
	symMemAllocHost
	symMemFreeHost
	symMemHostAlloc
	symMemHostGetDevicePointer
	symMemcpyHtoDAsync
	symMemcpyDtoHAsync
	symMemcpyDtoDAsync
	symMemsetD8Async
	symStreamCreate
	symStreamSynchronize
	symStreamDestroy
	symStreamWaitEvent
	symEventCreate
	symEventRecord
	symEventSynchronize
	symEventElapsedTime
	symEventDestroy
	symModuleLoadData
	symModuleUnload
	symModuleGetFunction
	symModuleGetGlobal
	symFuncSetAttribute
	symFuncGetAttribute
	symLaunchKernel
	symStreamBeginCapture
	symStreamEndCapture
	symStreamIsCapturing
	symGraphInstantiate
	symGraphLaunch
	symGraphExecDestroy
	symGraphDestroy
	symProfilerStart
	symProfilerStop
	numSyms
)

// symNames lists, per entry point, the exported names to try in order: the
// versioned (_v2) entry point where the driver has one.
var symNames = [numSyms][]string{
	symInit:                    {"cuInit"},
	symDriverGetVersion:        {"cuDriverGetVersion"},
	symDeviceGetCount:          {"cuDeviceGetCount"},
	symDeviceGet:               {"cuDeviceGet"},
	symDeviceGetName:           {"cuDeviceGetName"},
	symDeviceGetAttribute:      {"cuDeviceGetAttribute"},
	symGetErrorName:            {"cuGetErrorName"},
	symGetErrorString:          {"cuGetErrorString"},
	symPrimaryCtxRetain:        {"cuDevicePrimaryCtxRetain"},
	symPrimaryCtxRelease:       {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"},
	symCtxSetCurrent:           {"cuCtxSetCurrent"},
	symCtxSynchronize:          {"cuCtxSynchronize"},
	symMemGetInfo:              {"cuMemGetInfo_v2"},
	symMemAlloc:                {"cuMemAlloc_v2"},
	symMemFree:                 {"cuMemFree_v2"},
	symMemAllocHost:            {"cuMemAllocHost_v2"},
	symMemFreeHost:             {"cuMemFreeHost"},
	symMemHostAlloc:            {"cuMemHostAlloc"},
	symMemHostGetDevicePointer: {"cuMemHostGetDevicePointer_v2"},
	symMemcpyHtoDAsync:         {"cuMemcpyHtoDAsync_v2"},
	symMemcpyDtoHAsync:         {"cuMemcpyDtoHAsync_v2"},
	symMemcpyDtoDAsync:         {"cuMemcpyDtoDAsync_v2"},
	symMemsetD8Async:           {"cuMemsetD8Async"},
	symStreamCreate:            {"cuStreamCreate"},
	symStreamSynchronize:       {"cuStreamSynchronize"},
	symStreamDestroy:           {"cuStreamDestroy_v2"},
	symStreamWaitEvent:         {"cuStreamWaitEvent"},
	symEventCreate:             {"cuEventCreate"},
	symEventRecord:             {"cuEventRecord"},
	symEventSynchronize:        {"cuEventSynchronize"},
	symEventElapsedTime:        {"cuEventElapsedTime", "cuEventElapsedTime_v2"},
	symEventDestroy:            {"cuEventDestroy_v2"},
	symModuleLoadData:          {"cuModuleLoadData"},
	symModuleUnload:            {"cuModuleUnload"},
	symModuleGetFunction:       {"cuModuleGetFunction"},
	symModuleGetGlobal:         {"cuModuleGetGlobal_v2"},
	symFuncSetAttribute:        {"cuFuncSetAttribute"},
	symFuncGetAttribute:        {"cuFuncGetAttribute"},
	symLaunchKernel:            {"cuLaunchKernel"},
	symStreamBeginCapture:      {"cuStreamBeginCapture_v2"},
	symStreamEndCapture:        {"cuStreamEndCapture"},
	symStreamIsCapturing:       {"cuStreamIsCapturing"},
	symGraphInstantiate:        {"cuGraphInstantiateWithFlags"},
	symGraphLaunch:             {"cuGraphLaunch"},
	symGraphExecDestroy:        {"cuGraphExecDestroy"},
	symGraphDestroy:            {"cuGraphDestroy"},
	symProfilerStart:           {"cuProfilerStart"},
	symProfilerStop:            {"cuProfilerStop"},
}

// optionalSym marks entry points whose absence does not refuse the driver.
var optionalSym = [numSyms]bool{symProfilerStart: true, symProfilerStop: true}

// symByName finds the entry point one of whose names is name.
func symByName(name string) (sym, bool) {
	for s := sym(0); s < numSyms; s++ {
		for _, n := range symNames[s] {
			if n == name {
				return s, true
			}
		}
	}
	return 0, false
}

// libCandidates are the driver library names Open tries, in order.
var libCandidates = []string{"libcuda.so.1", "libcuda.so"}

// lib is the loaded driver: one per process.
type lib struct {
	path string
	fn   [numSyms]uintptr
	name [numSyms]string // the exported name bound for each entry point
}

// loadLib opens the first loadable candidate and binds every entry point.
func loadLib(candidates []string) (*lib, error) {
	var h uintptr
	var path string
	var reasons []string
	for _, c := range candidates {
		hh, err := dynlib.Open(c, dynlib.Global)
		if err == nil {
			h, path = hh, c
			break
		}
		// dlerror names the file, but it is per OS thread and a goroutine
		// can read it on another (seen: an empty message under load), so
		// the name is said here too.
		why := err.Error()
		if !strings.Contains(why, c) {
			why = c + ": " + why
		}
		reasons = append(reasons, why)
	}
	if h == 0 {
		return nil, fmt.Errorf("cannot load the CUDA driver library (%s)", strings.Join(reasons, "; "))
	}
	l := &lib{path: path}
	var missing []string
	for s := sym(0); s < numSyms; s++ {
		for _, n := range symNames[s] {
			if p := dynlib.Sym(h, n); p != 0 {
				l.fn[s], l.name[s] = p, n
				break
			}
		}
		if l.fn[s] == 0 {
			l.name[s] = symNames[s][0]
			if !optionalSym[s] {
				missing = append(missing, strings.Join(symNames[s], "|"))
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lacks driver entry points %s (driver too old?)", path, strings.Join(missing, ", "))
	}
	return l, nil
}

var (
	libMu     sync.Mutex
	libLoaded *lib // cached on success only: a failed load is retried by the next Open
)

// theLib returns the process-wide driver library, loading it once.
func theLib() (*lib, error) {
	libMu.Lock()
	defer libMu.Unlock()
	if libLoaded != nil {
		return libLoaded, nil
	}
	l, err := loadLib(libCandidates)
	if err != nil {
		return nil, err
	}
	libLoaded = l
	return l, nil
}

// caller issues driver calls with the test seam in front of them.
type caller struct {
	lib  *lib
	fail callFail
}

// invoke calls the entry point and returns its CUresult. Arguments that are
// pointers converted to uintptr in the call expression stay alive and in
// place for the duration of the call (go:uintptrescapes, as in
// purego.SyscallN). An injected failure returns codeInjected without
// reaching the driver.
//
//go:uintptrescapes
func (c *caller) invoke(s sym, args ...uintptr) int {
	if c.fail.fails(s) {
		return codeInjected
	}
	fn := c.lib.fn[s]
	if fn == 0 {
		return CodeNotFound
	}
	return int(int32(dynlib.Call(fn, args...)))
}

// name is the exported name bound for s (the first candidate when unbound).
func (c *caller) name(s sym) string {
	if c.lib != nil && c.lib.name[s] != "" {
		return c.lib.name[s]
	}
	return symNames[s][0]
}

// errorf turns a non-zero result of s into an *Error whose Call is the
// bound entry point followed by the formatted arguments; nil on success.
func (c *caller) errorf(s sym, code int, format string, args ...any) error {
	if code == CodeSuccess {
		return nil
	}
	call := c.name(s)
	if format != "" {
		call += "(" + fmt.Sprintf(format, args...) + ")"
	} else {
		call += "()"
	}
	return &Error{Code: code, Name: c.errorName(code), Call: call, Injected: c.fail.covers(s) && code == codeInjected}
}

// destroy releases the handle *h through s (its one argument) and zeroes
// it first, so a second call does nothing; what names the handle in the
// error ("stream %#x").
func (c *caller) destroy(s sym, h *uintptr, what string) error {
	if *h == 0 {
		return nil
	}
	x := *h
	*h = 0
	return c.errorf(s, c.invoke(s, x), what+" %#x", x)
}

// errorName asks the driver for a code's name, falling back to the table.
func (c *caller) errorName(code int) string {
	if n, ok := errorNames[code]; ok {
		return n
	}
	if c.lib != nil && c.lib.fn[symGetErrorName] != 0 {
		var p *byte
		r := int32(dynlib.Call(c.lib.fn[symGetErrorName], uintptr(code), uintptr(unsafe.Pointer(&p))))
		if r == 0 && p != nil {
			return dynlib.CString(p, 128)
		}
	}
	return staticErrorName(code)
}

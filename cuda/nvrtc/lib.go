// Package nvrtc compiles the embedded kernel sources at run time (issue 25):
// libnvrtc bound through purego, as cuda/driver binds libcuda, so a
// CGO_ENABLED=0 minfer needs no nvcc on the GPU machine. Build forms the
// units scripts/build-kernels.sh forms with KERNELS_SPLIT=1, compiles them
// in parallel to cubins for the device's architecture, stamps the build as
// the script does and caches it under a key of source hash, options,
// architecture and NVRTC version, so a later run loads it in milliseconds.
//
// The package never touches a device: its cubins are loaded by the caller
// (cuda.LoadKernels, through cuda/driver).
package nvrtc

import (
	"errors"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/minfer-go/minfer/internal/dynlib"
)

// ErrNotFound is matched (errors.Is) by Open's error when no libnvrtc can
// be loaded.
var ErrNotFound = errors.New("libnvrtc not found")

// sym indexes the NVRTC entry points this package binds.
type sym int

const (
	symVersion sym = iota
	symGetErrorString
	symCreateProgram
	symCompileProgram
	symGetProgramLogSize
	symGetProgramLog
	symGetCUBINSize
	symGetCUBIN
	symDestroyProgram
	numSyms
)

// name is the exported name of the entry point.
func (s sym) name() string {
	switch s {
	case symVersion:
		return "nvrtcVersion"
	case symGetErrorString:
		return "nvrtcGetErrorString"
	case symCreateProgram:
		return "nvrtcCreateProgram"
	case symCompileProgram:
		return "nvrtcCompileProgram"
	case symGetProgramLogSize:
		return "nvrtcGetProgramLogSize"
	case symGetProgramLog:
		return "nvrtcGetProgramLog"
	case symGetCUBINSize:
		return "nvrtcGetCUBINSize"
	case symGetCUBIN:
		return "nvrtcGetCUBIN"
	case symDestroyProgram:
		return "nvrtcDestroyProgram"
	}
	return fmt.Sprintf("nvrtc symbol %d", int(s))
}

// libNames are the library names Open tries, newest major first, and
// libDirs the CUDA toolkit directories it tries them in when the dynamic
// loader's search path has none (the toolkit's lib64 is often not on it).
func libNames() []string { return []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"} }

func libDirs() []string {
	return []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"}
}

// Candidates are the paths Open tries, in order: each name on the loader's
// search path (LD_LIBRARY_PATH, ldconfig), then in each toolkit directory.
func Candidates() []string {
	var out []string
	out = append(out, libNames()...)
	for _, d := range libDirs() {
		for _, n := range libNames() {
			out = append(out, d+"/"+n)
		}
	}
	return out
}

// Lib is a loaded libnvrtc with its entry points bound. Safe for concurrent
// use: NVRTC programs are independent, one per Compile call.
type Lib struct {
	path         string // the file loaded (from the process's mappings when known)
	fn           [numSyms]uintptr
	major, minor int
}

// Open loads the first of Candidates that loads and binds every entry
// point. A missing libnvrtc is one error (matching ErrNotFound) that says how
// to get it, and that a prebuilt kernels file works without it.
func Open() (*Lib, error) { return OpenFrom(Candidates()) }

// OpenFrom is Open over the given candidates.
func OpenFrom(candidates []string) (*Lib, error) {
	var reasons []string
	for _, c := range candidates {
		h, err := dynlib.Open(c, dynlib.Local)
		if err != nil {
			why := err.Error()
			if !strings.Contains(why, c) {
				why = c + ": " + why
			}
			reasons = append(reasons, why)
			continue
		}
		l := &Lib{path: c}
		var missing []string
		for s := sym(0); s < numSyms; s++ {
			if l.fn[s] = dynlib.Sym(h, s.name()); l.fn[s] == 0 {
				missing = append(missing, s.name())
			}
		}
		if len(missing) > 0 {
			reasons = append(reasons, fmt.Sprintf("%s lacks %s", c, strings.Join(missing, ", ")))
			continue
		}
		if p := loadedPath("libnvrtc.so"); p != "" {
			l.path = p
		}
		var major, minor int32
		if err := l.check(symVersion, l.call(symVersion, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		l.major, l.minor = int(major), int(minor)
		return l, nil
	}
	return nil, notFound(candidates, reasons)
}

// notFound is the one error of a missing libnvrtc.
func notFound(candidates, reasons []string) error {
	first := "no candidates"
	if len(reasons) > 0 {
		first = reasons[0]
	}
	var names, dirs []string
	for _, c := range candidates {
		d, n := path.Split(c)
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
		if d = strings.TrimSuffix(d, "/"); d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	tried := strings.Join(names, ", ") + " on the loader's path (LD_LIBRARY_PATH, ldconfig)"
	if len(dirs) > 0 {
		tried += " and in " + strings.Join(dirs, ", ")
	}
	return fmt.Errorf("%w: tried %s (first failure: %s). Get it with the CUDA toolkit (https://developer.nvidia.com/cuda-downloads: libnvrtc.so is in /usr/local/cuda/lib64), "+
		"or NVIDIA's redistributable NVRTC package alone (apt/dnf cuda-nvrtc-<major>-<minor> from NVIDIA's repository, or pip nvidia-cuda-nvrtc-cu12) with its directory on LD_LIBRARY_PATH; "+
		"or run with a prebuilt kernels file instead: scripts/build-kernels.sh (nvcc) writes bin/minfer-kernels.fatbin, put it beside the binary or pass MINFER_KERNELS=<path>",
		ErrNotFound, tried, first)
}

// Path is the library file that was loaded.
func (l *Lib) Path() string { return l.path }

// Version is NVRTC's version (major, minor).
func (l *Lib) Version() (major, minor int) { return l.major, l.minor }

// Compiler names the compiler in a build stamp and the cache key:
// "NVRTC 13.0".
func (l *Lib) Compiler() string { return fmt.Sprintf("NVRTC %d.%d", l.major, l.minor) }

// call invokes an entry point and returns its nvrtcResult.
//
//go:uintptrescapes
func (l *Lib) call(s sym, args ...uintptr) int {
	return int(int32(dynlib.Call(l.fn[s], args...)))
}

// check turns a non-zero nvrtcResult of s into an error naming the entry
// point and NVRTC's words for the code.
func (l *Lib) check(s sym, code int) error {
	if code == 0 {
		return nil
	}
	return &Error{Call: s.name(), Code: code, Name: l.errorString(code)}
}

// Error is an NVRTC call that did not return NVRTC_SUCCESS.
type Error struct {
	Call string // the entry point
	Code int    // the nvrtcResult
	Name string // NVRTC's string for it, e.g. NVRTC_ERROR_COMPILATION
}

func (e *Error) Error() string { return fmt.Sprintf("nvrtc: %s: %s (%d)", e.Call, e.Name, e.Code) }

// errorString asks NVRTC for a result code's name.
func (l *Lib) errorString(code int) string {
	r := dynlib.Call(l.fn[symGetErrorString], uintptr(code))
	if r == 0 {
		return "NVRTC_ERROR_UNKNOWN"
	}
	// The result register holds a const char* into the library's static
	// data: read the word as a pointer.
	return dynlib.CString(*(**byte)(unsafe.Pointer(&r)), 256)
}

// cStrings holds NUL-terminated copies of strs and the C array of their
// addresses (char**), alive as long as the value is.
type cStrings struct {
	bufs [][]byte
	ptrs []*byte
}

func newCStrings(strs []string) *cStrings {
	c := &cStrings{bufs: make([][]byte, len(strs)), ptrs: make([]*byte, len(strs))}
	for i, s := range strs {
		c.bufs[i] = append([]byte(s), 0)
		c.ptrs[i] = &c.bufs[i][0]
	}
	return c
}

// array is the char** (0 when empty).
func (c *cStrings) array() uintptr {
	if len(c.ptrs) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&c.ptrs[0]))
}

// Header is a file a unit #includes, given to NVRTC in memory.
type Header struct {
	Name string // as the source includes it ("common.cuh")
	Text string
}

// Compile compiles one translation unit to a cubin (options must name an
// sm_ architecture). log is NVRTC's log (warnings, or a failed
// compilation's errors), possibly empty.
func (l *Lib) Compile(name, source string, headers []Header, options []string) (cubin []byte, log string, err error) {
	src := newCStrings([]string{source, name})
	hnames := make([]string, len(headers))
	htexts := make([]string, len(headers))
	for i, h := range headers {
		hnames[i], htexts[i] = h.Name, h.Text
	}
	hn, ht, opts := newCStrings(hnames), newCStrings(htexts), newCStrings(options)
	// The char** arrays reach NVRTC as uintptrs computed before the calls:
	// keep everything they point to alive until Compile returns.
	defer func() {
		runtime.KeepAlive(src)
		runtime.KeepAlive(hn)
		runtime.KeepAlive(ht)
		runtime.KeepAlive(opts)
	}()
	var prog uintptr
	code := l.call(symCreateProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(src.ptrs[0])), uintptr(unsafe.Pointer(src.ptrs[1])),
		uintptr(len(headers)), ht.array(), hn.array())
	if err := l.check(symCreateProgram, code); err != nil {
		return nil, "", fmt.Errorf("%w (unit %s)", err, name)
	}
	defer func() {
		if derr := l.check(symDestroyProgram, l.call(symDestroyProgram, uintptr(unsafe.Pointer(&prog)))); derr != nil && err == nil {
			err = fmt.Errorf("%w (unit %s)", derr, name)
		}
	}()
	cerr := l.check(symCompileProgram, l.call(symCompileProgram, prog, uintptr(len(options)), opts.array()))
	log, lerr := l.programLog(prog)
	if cerr != nil {
		return nil, log, fmt.Errorf("%w (unit %s)", cerr, name)
	}
	if lerr != nil {
		return nil, "", fmt.Errorf("%w (unit %s)", lerr, name)
	}
	var size uint64
	if err := l.check(symGetCUBINSize, l.call(symGetCUBINSize, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, log, fmt.Errorf("%w (unit %s: does the architecture option name an sm_ target?)", err, name)
	}
	if size == 0 || size > 1<<31 {
		return nil, log, fmt.Errorf("nvrtc: unit %s: a cubin of %d bytes", name, size)
	}
	cubin = make([]byte, size)
	if err := l.check(symGetCUBIN, l.call(symGetCUBIN, prog, uintptr(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, log, fmt.Errorf("%w (unit %s)", err, name)
	}
	return cubin, log, nil
}

// programLog reads the program's compilation log.
func (l *Lib) programLog(prog uintptr) (string, error) {
	var size uint64
	if err := l.check(symGetProgramLogSize, l.call(symGetProgramLogSize, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return "", err
	}
	if size <= 1 || size > 64<<20 {
		return "", nil
	}
	b := make([]byte, size)
	if err := l.check(symGetProgramLog, l.call(symGetProgramLog, prog, uintptr(unsafe.Pointer(&b[0])))); err != nil {
		return "", err
	}
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

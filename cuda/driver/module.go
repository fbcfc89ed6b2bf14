package driver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/minfer-go/minfer/internal/dynlib"
)

// KernelsFile is the name of the kernels fatbin scripts/build-kernels.sh
// writes, looked for next to the executable.
const KernelsFile = "minfer-kernels.fatbin"

// ErrKernelsNotFound is matched (errors.Is) by the error FindKernels returns
// when no fatbin is where it looked.
var ErrKernelsNotFound = errors.New("cuda: kernels fatbin not found")

// FindKernels returns the path of the kernels fatbin: explicit when it is
// not empty (the caller's MINFER_KERNELS), else KernelsFile next to the
// executable. A missing file is an error naming every path tried.
func FindKernels(explicit string) (string, error) {
	var tried []string
	if explicit != "" {
		if st, err := os.Stat(explicit); err == nil && !st.IsDir() {
			return explicit, nil
		}
		tried = append(tried, explicit+" (explicit path)")
	} else {
		p, err := KernelsBesideExecutable()
		if err != nil {
			return "", fmt.Errorf("%w: %v; pass the fatbin path (MINFER_KERNELS)", ErrKernelsNotFound, err)
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
		tried = append(tried, p+" (next to the executable)")
	}
	return "", fmt.Errorf("%w: tried %s; build it with scripts/build-kernels.sh (writes bin/%s) and put it next to the binary or pass its path (MINFER_KERNELS)",
		ErrKernelsNotFound, strings.Join(tried, ", "), KernelsFile)
}

// KernelsBesideExecutable is where FindKernels looks when no path is
// given: KernelsFile in the executable's directory (symlinks resolved).
func KernelsBesideExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot locate the executable: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return filepath.Join(filepath.Dir(exe), KernelsFile), nil
}

// Module is a loaded CUDA module (CUmodule), or the modules of a kernels
// file of several fatbin containers (SplitFatbins), searched in file order.
type Module struct {
	d    *Device
	hs   []uintptr
	Path string // where it was read from, if from a file
}

// fatbinMagic opens every fatbin container: its header is the magic (u32),
// a version (u16), the header size (u16) and the size of the entries that
// follow (u64), little-endian.
const fatbinMagic = 0xBA55ED50

// SplitFatbins cuts a kernels file into the images cuModuleLoadData takes
// one at a time: each fatbin container of the file (nvcc -fatbin writes one;
// scripts/build-kernels.sh, compiling each source on its own, writes one per
// source, concatenated, as cuobjdump also reads them). A file that does not
// begin with the fatbin magic (a cubin, PTX) is one image. A container that
// runs past the end, or bytes after one that are not another, make the file
// corrupt: an error naming the offset, never a partial load.
func SplitFatbins(data []byte) ([][]byte, error) {
	if len(data) < 4 || binary.LittleEndian.Uint32(data) != fatbinMagic {
		return [][]byte{data}, nil
	}
	var out [][]byte
	for off := 0; off < len(data); {
		rest := data[off:]
		if len(rest) < 16 || binary.LittleEndian.Uint32(rest) != fatbinMagic {
			return nil, fmt.Errorf("cuda: kernels file: %d bytes at offset %d are not a fatbin container (want the magic %#x and a 16-byte header)", len(rest), off, uint32(fatbinMagic))
		}
		hdr := uint64(binary.LittleEndian.Uint16(rest[6:]))
		size := binary.LittleEndian.Uint64(rest[8:])
		if hdr < 16 || size > uint64(len(rest)) || hdr+size > uint64(len(rest)) {
			return nil, fmt.Errorf("cuda: kernels file: the fatbin container at offset %d declares %d + %d bytes, %d are left", off, hdr, size, len(rest))
		}
		n := int(hdr + size)
		out = append(out, rest[:n])
		off += n
	}
	return out, nil
}

// LoadModule loads a fatbin, cubin or PTX image (cuModuleLoadData). Inside
// Do. The image is copied with a NUL terminator (PTX needs one).
func (d *Device) LoadModule(data []byte) (*Module, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("cuda: %s: empty image", d.c.name(symModuleLoadData))
	}
	img := make([]byte, len(data)+1)
	copy(img, data)
	var h uintptr
	if err := d.c.errorf(symModuleLoadData, d.c.invoke(symModuleLoadData, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&img[0]))), "%d-byte image", len(data)); err != nil {
		return nil, err
	}
	runtime.KeepAlive(img)
	return &Module{d: d, hs: []uintptr{h}}, nil
}

// LoadKernels finds the kernels fatbin (FindKernels(explicit)), reads it and
// loads it. Inside Do.
func (d *Device) LoadKernels(explicit string) (*Module, error) {
	p, err := FindKernels(explicit)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("cuda: kernels fatbin: %w", err)
	}
	imgs, err := SplitFatbins(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, p)
	}
	return d.LoadImages(p, imgs)
}

// LoadImages loads each image (a fatbin container or a cubin: the units
// of one kernels build) as a module of one Module, searched in order; path
// names the build. Any image failing unloads the others. Inside Do.
func (d *Device) LoadImages(path string, imgs [][]byte) (*Module, error) {
	m := &Module{d: d, Path: path}
	for i, img := range imgs {
		one, err := d.LoadModule(img)
		if err != nil {
			m.Unload()
			return nil, fmt.Errorf("%w (kernels %s, image %d of %d)", err, path, i+1, len(imgs))
		}
		m.hs = append(m.hs, one.hs...)
	}
	return m, nil
}

// Unload unloads the module (cuModuleUnload, each of them). Inside Do.
// Safe twice.
func (m *Module) Unload() error {
	var first error
	for _, h := range m.hs {
		if err := m.d.c.errorf(symModuleUnload, m.d.c.invoke(symModuleUnload, h), "module %#x", h); err != nil && first == nil {
			first = err
		}
	}
	m.hs = nil
	return first
}

// Function is a kernel in a module (CUfunction).
type Function struct {
	d    *Device
	h    uintptr
	Name string
}

// Function looks a kernel up by its (extern "C") name, in each loaded
// module in turn. Inside Do.
func (m *Module) Function(name string) (*Function, error) {
	cname := append([]byte(name), 0)
	h, err := firstFound(len(m.hs), func(i int) (uintptr, error) {
		var h uintptr
		err := m.d.c.errorf(symModuleGetFunction, m.d.c.invoke(symModuleGetFunction, uintptr(unsafe.Pointer(&h)), m.hs[i], uintptr(unsafe.Pointer(&cname[0]))), "%q", name)
		return h, err
	})
	if err != nil {
		return nil, err
	}
	return &Function{d: m.d, h: h, Name: name}, nil
}

// ReadGlobal copies the named __device__ variable (extern "C") of the
// first module holding it to the host (cuModuleGetGlobal_v2, then a copy on
// s, synchronized). Inside Do. A name no module holds is CodeNotFound.
func (m *Module) ReadGlobal(s *Stream, name string) ([]byte, error) {
	cname := append([]byte(name), 0)
	var size uint64
	ptr, err := firstFound(len(m.hs), func(i int) (uintptr, error) {
		var p uintptr
		err := m.d.c.errorf(symModuleGetGlobal, m.d.c.invoke(symModuleGetGlobal, uintptr(unsafe.Pointer(&p)), uintptr(unsafe.Pointer(&size)), m.hs[i], uintptr(unsafe.Pointer(&cname[0]))), "%q", name)
		return p, err
	})
	if err != nil {
		return nil, err
	}
	if size > 1<<20 {
		return nil, fmt.Errorf("cuda: global %q is %d bytes: more than a stamp", name, size)
	}
	b := make([]byte, size)
	if err := s.CopyDtoH(b, DevicePtr(ptr)); err != nil {
		return nil, err
	}
	return b, s.Synchronize()
}

// firstFound returns the first of n lookups that succeeds. A lookup failing
// with CUDA_ERROR_NOT_FOUND (the name is in another module) moves on; any
// other error stops the search. None found: the last NOT_FOUND error (no
// modules: an error saying so).
func firstFound(n int, get func(i int) (uintptr, error)) (uintptr, error) {
	err := error(errors.New("cuda: no module loaded"))
	for i := 0; i < n; i++ {
		var h uintptr
		if h, err = get(i); err == nil {
			return h, nil
		}
		if !IsCode(err, CodeNotFound) {
			return 0, err
		}
	}
	return 0, err
}

// SetMaxDynamicSmem opts the kernel into bytes of dynamic shared memory
// (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES). Inside Do, and never
// inside a capture window. A request above the device's opt-in limit is
// refused here, naming both numbers, without calling the driver.
func (f *Function) SetMaxDynamicSmem(bytes int) error {
	if lim := f.d.Attr.SmemOptin; lim > 0 && bytes > lim {
		return fmt.Errorf("cuda: %s(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES=%d): above the device's opt-in limit of %d bytes",
			f.d.c.name(symFuncSetAttribute), f.Name, bytes, lim)
	}
	return f.d.c.errorf(symFuncSetAttribute, f.d.c.invoke(symFuncSetAttribute, f.h, funcAttrMaxDynamicSharedBytes, uintptr(uint32(int32(bytes)))),
		"%s, MAX_DYNAMIC_SHARED_SIZE_BYTES=%d", f.Name, bytes)
}

// MaxDynamicSmem reads the kernel's dynamic shared memory opt-in back.
func (f *Function) MaxDynamicSmem() (int, error) {
	var v int32
	err := f.d.c.errorf(symFuncGetAttribute, f.d.c.invoke(symFuncGetAttribute, uintptr(unsafe.Pointer(&v)), funcAttrMaxDynamicSharedBytes, f.h),
		"%s, MAX_DYNAMIC_SHARED_SIZE_BYTES", f.Name)
	return int(v), err
}

// Launch queues the kernel on the stream (cuLaunchKernel) and returns the
// launch's own result, naming the kernel and the configuration. Inside Do.
// args are the kernel's parameters in order: DevicePtr, uint64, int64,
// int32, uint32 or float32 (each passed by value, as the kernel declares
// it). Errors from the kernel's execution surface at the next synchronizing
// call.
func (f *Function) Launch(s *Stream, grid, block [3]uint32, smem uint32, args ...any) error {
	c := &f.d.c
	if c.fail.failsLaunch(f.Name) {
		return &Error{Code: codeInjected, Name: staticErrorName(codeInjected), Injected: true,
			Call: launchCall(c.name(symLaunchKernel), f.Name, grid, block, smem)}
	}
	buf, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("cuda: %s: %w", launchCall(c.name(symLaunchKernel), f.Name, grid, block, smem), err)
	}
	var params uintptr
	if len(args) > 0 {
		params = uintptr(unsafe.Pointer(&buf[0]))
	}
	code := int(int32(dynlib.Call(c.lib.fn[symLaunchKernel], f.h,
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(smem), s.h, params, 0)))
	runtime.KeepAlive(buf)
	if code != CodeSuccess {
		return &Error{Code: code, Name: c.errorName(code), Call: launchCall(c.name(symLaunchKernel), f.Name, grid, block, smem)}
	}
	return nil
}

func launchCall(sym, kernel string, grid, block [3]uint32, smem uint32) string {
	return fmt.Sprintf("%s(%s, grid=%v, block=%v, smem=%d)", sym, kernel, grid, block, smem)
}

// packArgs builds cuLaunchKernel's kernelParams in one allocation: words
// [0, n) hold the addresses of words [n, 2n), which hold the argument
// values (little-endian, so a 4-byte parameter reads its low half). The
// slice is heap memory the GC does not move; the caller keeps it alive
// across the call.
func packArgs(args []any) ([]uint64, error) {
	n := len(args)
	if n == 0 {
		return nil, nil
	}
	buf := make([]uint64, 2*n)
	for i, a := range args {
		var v uint64
		switch x := a.(type) {
		case DevicePtr:
			v = uint64(x)
		case uint64:
			v = x
		case int64:
			v = uint64(x)
		case int32:
			v = uint64(uint32(x))
		case uint32:
			v = uint64(x)
		case float32:
			v = uint64(math.Float32bits(x))
		default:
			return nil, fmt.Errorf("argument %d has type %T: want DevicePtr, uint64, int64, int32, uint32 or float32", i, a)
		}
		buf[n+i] = v
		buf[i] = uint64(uintptr(unsafe.Pointer(&buf[n+i])))
	}
	return buf, nil
}

package gpumem

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/minfer-go/minfer/internal/dynlib"
)

// The NVML entry points the sampler binds (nvml.h): the versioned names
// the header maps the plain ones to.
const (
	nvmlInit      = "nvmlInit_v2"
	nvmlCount     = "nvmlDeviceGetCount_v2"
	nvmlHandle    = "nvmlDeviceGetHandleByIndex_v2"
	nvmlByUUID    = "nvmlDeviceGetHandleByUUID"
	nvmlDriverVer = "nvmlSystemGetDriverVersion"
)

// visibleGPU is the GPU the arm processes run on when CUDA_VISIBLE_DEVICES
// picks one: its first entry, an index (NVML's order, the PCI bus order,
// which CUDA follows with CUDA_DEVICE_ORDER=PCI_BUS_ID and on a machine of
// identical GPUs) or a GPU-UUID; "" when unset (every GPU is watched).
// Watching only that GPU keeps a shard on GPU 1 from marking the rounds of
// a shard on GPU 0 as shared.
func visibleGPU(v string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(v), ",")
	return strings.TrimSpace(first)
}

// nvmlProcsNames: _v3 and _v2 both fill nvmlProcessInfo_t (the v2 layout
// below); the unversioned v1 takes a 16-byte struct and is not bound.
var nvmlProcsNames = []string{"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}

// nvmlLibs are the library names tried, in order.
var nvmlLibs = []string{"libnvidia-ml.so.1", "libnvidia-ml.so"}

// nvmlProcessInfo is nvml.h's nvmlProcessInfo_t (nvmlProcessInfo_v2_t):
// unsigned int pid; unsigned long long usedGpuMemory; unsigned int
// gpuInstanceId; unsigned int computeInstanceId. 24 bytes: 4 of padding
// after pid.
type nvmlProcessInfo struct {
	PID               uint32
	_                 uint32
	UsedGPUMemory     uint64
	GPUInstanceID     uint32
	ComputeInstanceID uint32
}

var _ [24]byte = [unsafe.Sizeof(nvmlProcessInfo{})]byte{}

// nvmlValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long.
const nvmlValueNotAvailable = ^uint64(0)

// NVML return codes the sampler names.
const (
	nvmlSuccess          = 0
	nvmlInsufficientSize = 7
)

var nvmlCodes = map[uintptr]string{
	1: "NVML_ERROR_UNINITIALIZED", 2: "NVML_ERROR_INVALID_ARGUMENT", 3: "NVML_ERROR_NOT_SUPPORTED",
	4: "NVML_ERROR_NO_PERMISSION", 6: "NVML_ERROR_NOT_FOUND", 7: "NVML_ERROR_INSUFFICIENT_SIZE",
	9: "NVML_ERROR_DRIVER_NOT_LOADED", 12: "NVML_ERROR_LIBRARY_NOT_FOUND", 13: "NVML_ERROR_FUNCTION_NOT_FOUND",
	15: "NVML_ERROR_GPU_IS_LOST", 999: "NVML_ERROR_UNKNOWN",
}

// nvml is the loaded library, initialised, with a handle per GPU.
// NVML stays initialised for the life of the process (nvmlShutdown is not
// bound: abtest exits when it is done).
type nvml struct {
	path     string
	procs    uintptr
	procsSym string
	devs     []uintptr
	sel      string // the CUDA_VISIBLE_DEVICES GPU watched ("": all)
	driver   string
	mu       sync.Mutex
	buf      []nvmlProcessInfo
}

var (
	nvmlMu     sync.Mutex
	nvmlLoaded *nvml // cached on success only: a failed load is retried
)

// openNVML loads and initialises NVML once per process.
func openNVML() (Sampler, error) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if nvmlLoaded != nil {
		return nvmlLoaded, nil
	}
	n, err := loadNVML(nvmlLibs)
	if err != nil {
		return nil, fmt.Errorf("NVML: %w", err)
	}
	nvmlLoaded = n
	return n, nil
}

func loadNVML(libs []string) (*nvml, error) {
	if !nvmlSupported {
		_, err := dynlib.Open(libs[0], dynlib.Global)
		return nil, err
	}
	var h uintptr
	var path string
	var why []string
	for _, c := range libs {
		hh, err := dynlib.Open(c, dynlib.Global)
		if err == nil {
			h, path = hh, c
			break
		}
		msg := err.Error()
		if !strings.Contains(msg, c) {
			msg = c + ": " + msg
		}
		why = append(why, msg)
	}
	if h == 0 {
		return nil, fmt.Errorf("cannot load the NVML library (%s)", strings.Join(why, "; "))
	}
	n := &nvml{path: path}
	fns := map[string]uintptr{}
	var missing []string
	for _, s := range []string{nvmlInit, nvmlCount, nvmlHandle} {
		if fns[s] = dynlib.Sym(h, s); fns[s] == 0 {
			missing = append(missing, s)
		}
	}
	for _, s := range nvmlProcsNames {
		if p := dynlib.Sym(h, s); p != 0 {
			n.procs, n.procsSym = p, s
			break
		}
	}
	if n.procs == 0 {
		missing = append(missing, strings.Join(nvmlProcsNames, "|"))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lacks %s (driver too old?)", path, strings.Join(missing, ", "))
	}
	if r := nvcall(fns[nvmlInit]); r != nvmlSuccess {
		return nil, n.err(nvmlInit, r)
	}
	var count uint32
	if r := nvcall(fns[nvmlCount], uintptr(unsafe.Pointer(&count))); r != nvmlSuccess {
		return nil, n.err(nvmlCount, r)
	}
	if count == 0 {
		return nil, fmt.Errorf("%s reports no GPU", path)
	}
	switch sel := visibleGPU(os.Getenv("CUDA_VISIBLE_DEVICES")); {
	case strings.HasPrefix(sel, "GPU-") || strings.HasPrefix(sel, "MIG-"):
		fn := dynlib.Sym(h, nvmlByUUID)
		if fn == 0 {
			return nil, fmt.Errorf("%s lacks %s, needed for CUDA_VISIBLE_DEVICES=%s", path, nvmlByUUID, sel)
		}
		b := append([]byte(sel), 0)
		var d uintptr
		if r := nvcall(fn, uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&d))); r != nvmlSuccess {
			return nil, n.err(nvmlByUUID+"("+sel+")", r)
		}
		n.devs, n.sel = []uintptr{d}, sel
	case sel != "":
		i, err := strconv.ParseUint(sel, 10, 32)
		if err != nil || uint32(i) >= count {
			return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%s: not a GPU index below %d nor a GPU-UUID", sel, count)
		}
		var d uintptr
		if r := nvcall(fns[nvmlHandle], uintptr(i), uintptr(unsafe.Pointer(&d))); r != nvmlSuccess {
			return nil, n.err(fmt.Sprintf("%s(%d)", nvmlHandle, i), r)
		}
		n.devs, n.sel = []uintptr{d}, sel
	default:
		for i := uint32(0); i < count; i++ {
			var d uintptr
			if r := nvcall(fns[nvmlHandle], uintptr(i), uintptr(unsafe.Pointer(&d))); r != nvmlSuccess {
				return nil, n.err(fmt.Sprintf("%s(%d)", nvmlHandle, i), r)
			}
			n.devs = append(n.devs, d)
		}
	}
	if p := dynlib.Sym(h, nvmlDriverVer); p != 0 {
		b := make([]byte, 96)
		if nvcall(p, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b))) == nvmlSuccess {
			n.driver = cstr(b)
		}
	}
	n.buf = make([]nvmlProcessInfo, 64)
	return n, nil
}

// err names an NVML failure: "nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED (9)".
func (n *nvml) err(what string, r uintptr) error {
	name := nvmlCodes[r]
	if name == "" {
		name = "NVML error"
	}
	return fmt.Errorf("%s: %s (%d)", what, name, r)
}

// Name says which library and driver sample.
func (n *nvml) Name() string {
	d := ""
	if n.driver != "" {
		d = " " + n.driver
	}
	if n.sel != "" {
		return fmt.Sprintf("NVML%s (%s %s), GPU %s (CUDA_VISIBLE_DEVICES)", d, n.path, n.procsSym, n.sel)
	}
	return fmt.Sprintf("NVML%s (%s %s), %d GPU", d, n.path, n.procsSym, len(n.devs))
}

// Processes lists the compute processes of every GPU.
func (n *nvml) Processes() ([]Proc, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Proc
	for gi, d := range n.devs {
		for try := 0; ; try++ {
			count := uint32(len(n.buf))
			r := nvcall(n.procs, d, uintptr(unsafe.Pointer(&count)), uintptr(unsafe.Pointer(&n.buf[0])))
			if r == nvmlInsufficientSize && try < 3 {
				n.buf = make([]nvmlProcessInfo, int(count)+32)
				continue
			}
			if r != nvmlSuccess {
				return nil, n.err(fmt.Sprintf("%s(GPU %d)", n.procsSym, gi), r)
			}
			for _, p := range n.buf[:min(int(count), len(n.buf))] {
				out = append(out, Proc{PID: int(p.PID), GPU: gi, Bytes: p.UsedGPUMemory, Known: p.UsedGPUMemory != nvmlValueNotAvailable})
			}
			break
		}
	}
	for i := range out {
		if !out[i].Known {
			out[i].Bytes = 0
		}
	}
	return out, nil
}

// nvcall calls an NVML entry point; nvmlReturn_t is a 32-bit enum, so
// the upper half of the result register is dropped.
//
//go:uintptrescapes
func nvcall(fn uintptr, args ...uintptr) uintptr {
	return uintptr(uint32(dynlib.Call(fn, args...)))
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

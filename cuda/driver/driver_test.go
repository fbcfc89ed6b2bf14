package driver

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestErrorFormatNamesCallArgumentsAndCode(t *testing.T) {
	e := &Error{Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Call: "cuMemAlloc_v2(1048576 bytes)"}
	want := "cuda: cuMemAlloc_v2(1048576 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)"
	if got := e.Error(); got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	c := caller{} // no driver: names come from the table
	if err := c.errorf(symMemAlloc, CodeSuccess, "%d bytes", 1); err != nil {
		t.Fatalf("success became an error: %v", err)
	}
	err := c.errorf(symMemAlloc, CodeOutOfMemory, "%d bytes", 1<<20)
	if err == nil || err.Error() != want {
		t.Fatalf("errorf = %v, want %q", err, want)
	}
	if !IsCode(err, CodeOutOfMemory) || IsCode(err, CodeInvalidValue) || IsCode(errors.New("x"), CodeOutOfMemory) {
		t.Fatal("IsCode does not tell the codes apart")
	}
	if got := c.errorf(symStreamSynchronize, 12345, "").Error(); got != "cuda: cuStreamSynchronize(): "+errNameUnrecognized+" (12345)" {
		t.Fatalf("unknown code: %q", got)
	}
}

func TestCallFailSeamInjectsWithoutReachingTheDriver(t *testing.T) {
	cf, err := parseCallFail(" cuMemAlloc_v2 , cuLaunchKernel:minfer_smoke_axpy")
	if err != nil {
		t.Fatal(err)
	}
	c := caller{fail: cf} // lib is nil: reaching the driver would panic
	code := c.invoke(symMemAlloc, 0, 1<<20)
	err = c.errorf(symMemAlloc, code, "%d bytes", 1<<20)
	var e *Error
	if !errors.As(err, &e) || !e.Injected || e.Code != CodeUnknown || !strings.HasPrefix(e.Call, "cuMemAlloc_v2(1048576 bytes)") {
		t.Fatalf("injected error = %#v", err)
	}
	if !strings.Contains(err.Error(), "cuMemAlloc_v2(1048576 bytes): CUDA_ERROR_UNKNOWN (999)") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("message does not name the call and the injection: %q", err)
	}
	if cf.fails(symMemFree) || !cf.failsLaunch("minfer_smoke_axpy") || cf.failsLaunch("other_kernel") {
		t.Fatal("the seam fails the wrong calls")
	}
	all, _ := parseCallFail("cuLaunchKernel")
	if !all.failsLaunch("anything") {
		t.Fatal("cuLaunchKernel alone should fail every launch")
	}
	alt, err := parseCallFail("cuDevicePrimaryCtxRelease")
	if err != nil || !alt.fails(symPrimaryCtxRelease) {
		t.Fatalf("an alternate exported name is not accepted: %v", err)
	}
	none, err := parseCallFail("")
	if err != nil || none.any {
		t.Fatal("empty seam should fail nothing")
	}
}

func TestCallFailRejectsUnknownCallNames(t *testing.T) {
	for _, s := range []string{"cuMemAloc_v2", "cuLaunchKernel:", "malloc"} {
		if _, err := parseCallFail(s); err == nil || !strings.Contains(err.Error(), "unknown driver call") {
			t.Errorf("parseCallFail(%q) = %v, want an unknown-call error", s, err)
		}
	}
	// Open refuses it before touching the driver, and not as ErrNoDevice:
	// a typo in a failure test must not read as "no GPU here".
	_, err := Open(Options{CallFail: "cuNoSuchCall"})
	if err == nil || errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "cuNoSuchCall") {
		t.Fatalf("Open with a bad CallFail = %v", err)
	}
}

func TestPackArgsLayoutPointsAtEachValue(t *testing.T) {
	args := []any{DevicePtr(0x7f0012345600), int32(-5), uint32(7), float32(1.5), int64(-9), uint64(1 << 40)}
	buf, err := packArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	n := len(args)
	if len(buf) != 2*n {
		t.Fatalf("len = %d, want %d", len(buf), 2*n)
	}
	for i := range args {
		if buf[i] != uint64(uintptr(unsafe.Pointer(&buf[n+i]))) {
			t.Fatalf("param %d does not point at its value slot", i)
		}
	}
	if DevicePtr(buf[n]) != 0x7f0012345600 {
		t.Errorf("device pointer = %#x", buf[n])
	}
	if v := *(*int32)(unsafe.Pointer(&buf[n+1])); v != -5 {
		t.Errorf("int32 reads back %d", v)
	}
	if v := *(*uint32)(unsafe.Pointer(&buf[n+2])); v != 7 {
		t.Errorf("uint32 reads back %d", v)
	}
	if v := *(*float32)(unsafe.Pointer(&buf[n+3])); v != 1.5 {
		t.Errorf("float32 reads back %v", v)
	}
	if v := *(*int64)(unsafe.Pointer(&buf[n+4])); v != -9 {
		t.Errorf("int64 reads back %d", v)
	}
	if buf[n+5] != 1<<40 {
		t.Errorf("uint64 = %d", buf[n+5])
	}
	if math.Float32frombits(uint32(buf[n+3])) != 1.5 {
		t.Error("float32 is not in the low half")
	}
	if b, err := packArgs(nil); b != nil || err != nil {
		t.Errorf("no args: %v %v", b, err)
	}
}

func TestPackArgsRejectsUnsupportedTypes(t *testing.T) {
	for _, a := range []any{int(3), float64(1), []byte{1}, uintptr(8), nil} {
		_, err := packArgs([]any{int32(1), a})
		if err == nil || !strings.Contains(err.Error(), "argument 1") {
			t.Errorf("packArgs(%T) = %v, want an error naming argument 1", a, err)
		}
	}
}

func TestFindKernelsMissingFatbinNamesThePathsTried(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.fatbin")
	_, err := FindKernels(missing)
	if !errors.Is(err, ErrKernelsNotFound) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "build-kernels.sh") {
		t.Fatalf("explicit missing: %v", err)
	}
	if _, err := FindKernels(dir); !errors.Is(err, ErrKernelsNotFound) {
		t.Fatalf("a directory is not a fatbin: %v", err)
	}
	present := filepath.Join(dir, KernelsFile)
	if err := os.WriteFile(present, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := FindKernels(present); err != nil || p != present {
		t.Fatalf("explicit present: %q %v", p, err)
	}
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	next := filepath.Join(filepath.Dir(exe), KernelsFile)
	p, err := FindKernels("")
	if _, statErr := os.Stat(next); statErr == nil {
		if err != nil || p != next {
			t.Fatalf("next to the executable: %q %v", p, err)
		}
		return
	}
	if !errors.Is(err, ErrKernelsNotFound) || !strings.Contains(err.Error(), next) || !strings.Contains(err.Error(), "next to the executable") {
		t.Fatalf("default lookup: %v", err)
	}
}

func TestOpenDisabledIsErrNoDevice(t *testing.T) {
	d, err := Open(Options{Disable: true})
	if d != nil || !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("Open(Disable) = %v, %v", d, err)
	}
}

func TestOpenWithoutDriverLibraryIsErrNoDeviceWithReason(t *testing.T) {
	_, err := loadLib([]string{"libminfer-no-such-driver.so.1"})
	if err == nil || !strings.Contains(err.Error(), "libminfer-no-such-driver.so.1") || !strings.Contains(err.Error(), "cannot load the CUDA driver library") {
		t.Fatalf("loadLib(missing) = %v", err)
	}
	// The real Open on this machine: a device or a clean ErrNoDevice.
	d, err := Open(Options{})
	if err == nil {
		t.Logf("a device answered: %s", d.Attr)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open without a device = %v, want ErrNoDevice", err)
	}
	var nd *NoDeviceError
	if !errors.As(err, &nd) || nd.Reason == "" {
		t.Fatalf("no reason: %v", err)
	}
	t.Logf("declines cleanly: %v", err)
}

func TestNoDeviceErrorWrapsTheDriverError(t *testing.T) {
	inner := &Error{Code: CodeNoDevice, Name: "CUDA_ERROR_NO_DEVICE", Call: "cuInit(0)"}
	err := noDevice("the driver did not initialise", inner)
	var e *Error
	if !errors.Is(err, ErrNoDevice) || !errors.As(err, &e) || e != inner {
		t.Fatalf("wrapping lost: %v", err)
	}
	want := "cuda: no usable device: the driver did not initialise: cuda: cuInit(0): CUDA_ERROR_NO_DEVICE (100)"
	if err.Error() != want {
		t.Fatalf("%q, want %q", err, want)
	}
}

func TestSymbolTableIsComplete(t *testing.T) {
	seen := map[string]bool{}
	for s := sym(0); s < numSyms; s++ {
		if len(symNames[s]) == 0 {
			t.Fatalf("sym %d has no name", s)
		}
		for _, n := range symNames[s] {
			if seen[n] {
				t.Fatalf("%s bound twice", n)
			}
			seen[n] = true
			if got, ok := symByName(n); !ok || got != s {
				t.Fatalf("symByName(%s) = %d", n, got)
			}
		}
	}
}

// NAME@N fails only the N-th call of NAME (issue 23's sweep fails each call
// once); the count is shared by the seam's copies and the failures are
// counted; N must be a positive count.
func TestCallFailSeam_AtNFailsOnlyTheNthCall(t *testing.T) {
	cf, err := parseCallFail("cuMemAlloc_v2@3, cuStreamSynchronize")
	if err != nil {
		t.Fatal(err)
	}
	c := caller{lib: &lib{}, fail: cf} // no entry point bound: a call that passes the seam returns CodeNotFound
	var got []bool
	for range 5 {
		got = append(got, c.invoke(symMemAlloc, 0, 1) == codeInjected)
	}
	if want := []bool{false, false, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("failed calls %v, want %v", got, want)
	}
	if !cf.fails(symStreamSynchronize) || !cf.fails(symStreamSynchronize) || cf.injected() != 3 {
		t.Fatalf("plain entries fail every call; injected %d, want 3", cf.injected())
	}
	for _, bad := range []string{"cuMemAlloc_v2@0", "cuMemAlloc_v2@x", "cuNoSuch@1"} {
		if _, err := parseCallFail(bad); err == nil {
			t.Errorf("parseCallFail(%q) accepted", bad)
		}
	}
}

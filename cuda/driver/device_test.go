package driver

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/cuda/nvrtc"
	"github.com/minfer-go/minfer/engine/levers"
)

// The device tests share one Device (opening a primary context costs
// hundreds of milliseconds) and skip with a message when none answers.

var (
	sharedOnce sync.Once
	sharedDev  *Device
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDev != nil {
		if err := sharedDev.Close(); err != nil {
			println("cuda/driver: Close:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

func testConfig(t *testing.T) levers.Config {
	t.Helper()
	cfg, err := levers.FromEnv()
	if err != nil {
		t.Fatalf("levers: %v", err)
	}
	return cfg
}

// testDevice returns the shared device or skips the test.
func testDevice(t *testing.T) *Device {
	t.Helper()
	cfg := testConfig(t)
	sharedOnce.Do(func() {
		sharedDev, sharedErr = Open(Options{Disable: cfg.DisableCUDA})
	})
	if errors.Is(sharedErr, ErrNoDevice) {
		t.Skipf("no CUDA device answers: %v", sharedErr)
	}
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedDev
}

// smokeKernel loads the kernels fatbin (MINFER_KERNELS, else next to the
// test binary; MINFER_KERNELS=nvrtc, or no file there: the NVRTC build)
// and returns minfer_smoke_axpy. Inside Do.
func smokeKernel(t *testing.T, d *Device) *Function {
	t.Helper()
	var f *Function
	path := testConfig(t).Kernels
	err := d.Do(func() error {
		var m *Module
		var err error
		if path == levers.KernelsNVRTC {
			m, err = nvrtcKernels(d)
		} else if m, err = d.LoadKernels(path); path == "" && errors.Is(err, ErrKernelsNotFound) {
			m, err = nvrtcKernels(d)
		}
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = d.Do(m.Unload) })
		f, err = m.Function("minfer_smoke_axpy")
		return err
	})
	if err != nil {
		t.Fatalf("kernels (build them with scripts/build-kernels.sh, pass MINFER_KERNELS): %v", err)
	}
	return f
}

// nvrtcKernels loads the embedded sources' NVRTC build when no kernels
// file is given, as the backend does (the device suite's KERNELS=nvrtc
// mode runs these tests too).
func nvrtcKernels(d *Device) (*Module, error) {
	lib, err := nvrtc.Open()
	if err != nil {
		return nil, err
	}
	cache, err := nvrtc.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	res, err := nvrtc.BuildEmbedded(lib, nvrtc.Arch(d.Attr.CCMajor, d.Attr.CCMinor), cache, nil)
	if err != nil {
		return nil, err
	}
	return d.LoadImages(res.Manifest, res.Images)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeviceOpenReportsRuntimeAttributes(t *testing.T) {
	d := testDevice(t)
	a := d.Attr
	t.Logf("device: %s", a)
	if a.Name == "" || a.SMCount <= 0 || a.CCMajor < 5 || a.SmemPerBlock <= 0 || a.SmemOptin < a.SmemPerBlock ||
		a.TotalMem == 0 || a.FreeMem == 0 || a.FreeMem > a.TotalMem || a.DriverVersion < 12000 {
		t.Fatalf("implausible attributes: %+v", a)
	}
}

func TestDeviceAllocCopyRoundTrip(t *testing.T) {
	d := testDevice(t)
	const n = 1<<20 + 13 // odd size
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	got := make([]byte, n)
	must(t, d.Do(func() error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		a, err := d.Alloc(n)
		if err != nil {
			return err
		}
		defer d.Free(a)
		b, err := d.Alloc(n)
		if err != nil {
			return err
		}
		defer d.Free(b)
		if err := s.CopyHtoD(a, src); err != nil {
			return err
		}
		if err := s.CopyDtoD(b, a, n); err != nil {
			return err
		}
		if err := s.MemsetD8(b.Add(100), 0xAB, 50); err != nil {
			return err
		}
		if err := s.CopyDtoH(got, b); err != nil {
			return err
		}
		return s.Synchronize()
	}))
	for i := range src {
		want := src[i]
		if i >= 100 && i < 150 {
			want = 0xAB
		}
		if got[i] != want {
			t.Fatalf("byte %d = %#x, want %#x", i, got[i], want)
		}
	}
}

func TestDevicePinnedMemoryRoundTrip(t *testing.T) {
	d := testDevice(t)
	const n = 4<<20 + 4
	must(t, d.Do(func() error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		in, err := d.AllocHost(n)
		if err != nil {
			return err
		}
		defer in.Free()
		out, err := d.AllocHost(n)
		if err != nil {
			return err
		}
		defer out.Free()
		for i, f := 0, in.Float32s(); i < len(f); i++ {
			f[i] = float32(i) * 0.5
		}
		p, err := d.Alloc(n)
		if err != nil {
			return err
		}
		defer d.Free(p)
		if err := s.CopyHtoD(p, in.Bytes()); err != nil {
			return err
		}
		if err := s.CopyDtoH(out.Bytes(), p); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		o := out.Float32s()
		for i := range o {
			if o[i] != float32(i)*0.5 {
				return fmt.Errorf("float %d = %v", i, o[i])
			}
		}
		if err := in.Free(); err != nil || in.Bytes() != nil || in.Free() != nil {
			return fmt.Errorf("double free: %v", err)
		}
		return nil
	}))
}

// axpyRun runs y = fma(a, x, y) for each a in as, directly or through a
// graph (captured once, replayed reps times), and returns y.
func axpyRun(t *testing.T, d *Device, f *Function, x, y0 []float32, as []float32, reps int, graph bool) []float32 {
	t.Helper()
	n := len(x)
	y := make([]float32, n)
	bytes := uint64(4 * n)
	grid := [3]uint32{uint32((n + 255) / 256), 1, 1}
	block := [3]uint32{256, 1, 1}
	must(t, d.Do(func() error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		xp, err := d.Alloc(bytes)
		if err != nil {
			return err
		}
		defer d.Free(xp)
		yp, err := d.Alloc(bytes)
		if err != nil {
			return err
		}
		defer d.Free(yp)
		if err := s.CopyHtoD(xp, Float32Bytes(x)); err != nil {
			return err
		}
		if err := s.CopyHtoD(yp, Float32Bytes(y0)); err != nil {
			return err
		}
		if !graph {
			for r := 0; r < reps; r++ {
				for _, a := range as {
					if err := f.Launch(s, grid, block, 0, yp, xp, a, int32(n)); err != nil {
						return err
					}
				}
			}
		} else {
			if err := s.Synchronize(); err != nil { // never synchronize inside the window
				return err
			}
			if err := s.BeginCapture(); err != nil {
				return err
			}
			for _, a := range as {
				if err := f.Launch(s, grid, block, 0, yp, xp, a, int32(n)); err != nil {
					_, _ = s.EndCapture()
					return err
				}
			}
			st, err := s.IsCapturing()
			if err != nil || st != CaptureActive {
				t.Errorf("inside the window: status %v, %v", st, err)
			}
			g, err := s.EndCapture()
			if err != nil {
				return err
			}
			defer g.Destroy()
			if st, err := s.IsCapturing(); err != nil || st != CaptureNone {
				t.Errorf("after the window: status %v, %v", st, err)
			}
			x, err := g.Instantiate()
			if err != nil {
				return err
			}
			defer x.Destroy()
			for r := 0; r < reps; r++ {
				if err := x.Launch(s); err != nil {
					return err
				}
			}
		}
		if err := s.CopyDtoH(Float32Bytes(y), yp); err != nil {
			return err
		}
		return s.Synchronize()
	}))
	return y
}

func TestDeviceModuleLoadAndLaunchSmokeAxpy(t *testing.T) {
	d := testDevice(t)
	f := smokeKernel(t, d)
	const n = 1000003 // not a multiple of the block
	x := make([]float32, n)
	y0 := make([]float32, n)
	for i := range x {
		x[i] = float32(i%1024) / 8 // exact in f32, so y is exact: bitwise check
		y0[i] = float32(i % 7)
	}
	y := axpyRun(t, d, f, x, y0, []float32{0.25}, 1, false)
	for i := range y {
		if want := 0.25*x[i] + y0[i]; y[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, y[i], want)
		}
	}
}

func TestDeviceGraphCaptureThreadLocalReplayIsBitwiseDirect(t *testing.T) {
	d := testDevice(t)
	f := smokeKernel(t, d)
	const n = 65537
	x := make([]float32, n)
	y0 := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.37))
		y0[i] = float32(math.Cos(float64(i) * 0.11))
	}
	as := []float32{0.1, -0.37, 1.0 / 3}
	const reps = 10
	g := axpyRun(t, d, f, x, y0, as, reps, true)
	direct := axpyRun(t, d, f, x, y0, as, reps, false)
	for i := range g {
		if math.Float32bits(g[i]) != math.Float32bits(direct[i]) {
			t.Fatalf("replay y[%d] = %v, direct %v: not bitwise equal", i, g[i], direct[i])
		}
	}
	var maxDiff float64
	for i := range g {
		ref := float64(y0[i])
		for r := 0; r < reps; r++ {
			for _, a := range as {
				ref = float64(float32(math.FMA(float64(a), float64(x[i]), ref)))
			}
		}
		maxDiff = math.Max(maxDiff, math.Abs(ref-float64(g[i])))
	}
	if maxDiff > 1e-5 {
		t.Fatalf("replay vs CPU fma reference: max |diff| %g", maxDiff)
	}
	t.Logf("3 launches captured, replayed %d times: bitwise equal to %d direct launches; max |diff| vs CPU %g", reps, reps*len(as), maxDiff)
}

func TestDeviceEventTimingIsPositive(t *testing.T) {
	d := testDevice(t)
	f := smokeKernel(t, d)
	const n = 1 << 24
	must(t, d.Do(func() error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		p, err := d.Alloc(8 * n)
		if err != nil {
			return err
		}
		defer d.Free(p)
		if err := s.MemsetD8(p, 0, 8*n); err != nil {
			return err
		}
		start, err := d.NewEvent(true)
		if err != nil {
			return err
		}
		defer start.Destroy()
		end, err := d.NewEvent(true)
		if err != nil {
			return err
		}
		defer end.Destroy()
		if err := start.Record(s); err != nil {
			return err
		}
		for i := 0; i < 20; i++ {
			if err := f.Launch(s, [3]uint32{n / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, p, p.Add(4*n), float32(0.5), int32(n)); err != nil {
				return err
			}
		}
		if err := end.Record(s); err != nil {
			return err
		}
		if err := end.Synchronize(); err != nil {
			return err
		}
		el, err := Elapsed(start, end)
		if err != nil {
			return err
		}
		if el <= 0 {
			return fmt.Errorf("elapsed %v, want > 0", el)
		}
		gbs := float64(20*3*4*n) / el.Seconds() / 1e9
		t.Logf("20 axpy launches over %d floats: %v (%.0f GB/s)", n, el, gbs)
		untimed, err := d.NewEvent(false)
		if err != nil {
			return err
		}
		defer untimed.Destroy()
		if _, err := Elapsed(start, untimed); err == nil {
			t.Error("Elapsed accepted an event without timing")
		}
		return nil
	}))
}

func TestDeviceInjectedCallFailureNamesTheCall(t *testing.T) {
	testDevice(t)
	d, err := Open(Options{CallFail: "cuMemAlloc_v2,cuLaunchKernel:minfer_smoke_axpy"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, d.Close()) }()
	f := smokeKernel(t, d)
	err = d.Do(func() error {
		_, err := d.Alloc(1 << 20)
		return err
	})
	var e *Error
	if !errors.As(err, &e) || !e.Injected || !strings.HasPrefix(e.Call, "cuMemAlloc_v2(1048576 bytes)") {
		t.Fatalf("injected alloc failure = %v", err)
	}
	t.Logf("injected: %v", err)
	err = d.Do(func() error {
		s, err := d.NewStream() // not injected: still works
		if err != nil {
			return err
		}
		defer s.Destroy()
		return f.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, DevicePtr(0), DevicePtr(0), float32(1), int32(0))
	})
	if !errors.As(err, &e) || !e.Injected || !strings.Contains(e.Call, "minfer_smoke_axpy") {
		t.Fatalf("injected launch failure = %v", err)
	}
	t.Logf("injected: %v", err)
}

func TestDeviceOOMRequestIsAnErrorNotAPanic(t *testing.T) {
	d := testDevice(t)
	const pib = 1 << 50
	err := d.Do(func() error {
		p, err := d.Alloc(pib)
		if err == nil {
			_ = d.Free(p)
		}
		return err
	})
	if !IsCode(err, CodeOutOfMemory) || !strings.Contains(err.Error(), "cuMemAlloc_v2(1125899906842624 bytes)") {
		t.Fatalf("1 PiB alloc = %v", err)
	}
	t.Logf("1 PiB: %v", err)
	must(t, d.Do(func() error { // the context survives
		p, err := d.Alloc(4096)
		if err != nil {
			return err
		}
		return d.Free(p)
	}))
}

func TestDeviceDoIsSafeFromAnyGoroutine(t *testing.T) {
	d := testDevice(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- d.Do(func() error {
				p, err := d.Alloc(1 << 16)
				if err != nil {
					return err
				}
				return d.Do(func() error { return d.Free(p) }) // nested: inline
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	// Off the device thread no context is current: an error, not a crash.
	_, err := d.Alloc(4096)
	if !IsCode(err, CodeInvalidContext) {
		t.Fatalf("Alloc outside Do = %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
	t.Logf("outside Do: %v", err)
}

func TestDeviceCaptureLeftOpenAcrossDoIsEndedWithAnError(t *testing.T) {
	d := testDevice(t)
	var s *Stream
	must(t, d.Do(func() error { var err error; s, err = d.NewStream(); return err }))
	defer d.Do(s.Destroy)
	err := d.Do(s.BeginCapture)
	if err == nil || !strings.Contains(err.Error(), "left open") {
		t.Fatalf("open window across Do = %v", err)
	}
	must(t, d.Do(func() error {
		st, err := s.IsCapturing()
		if err == nil && st != CaptureNone {
			t.Errorf("status after Do: %v", st)
		}
		return err
	}))
}

func TestDeviceSmemOptinSetAndReadBack(t *testing.T) {
	d := testDevice(t)
	f := smokeKernel(t, d)
	lim := d.Attr.SmemOptin
	must(t, d.Do(func() error {
		if err := f.SetMaxDynamicSmem(lim); err != nil {
			return err
		}
		got, err := f.MaxDynamicSmem()
		if err != nil {
			return err
		}
		// The read-back is the opt-in minus the kernel's static smem (0 here).
		if got != lim {
			t.Errorf("read back %d, set %d", got, lim)
		}
		if err := f.SetMaxDynamicSmem(lim + 1); err == nil || !strings.Contains(err.Error(), "opt-in limit") {
			t.Errorf("above the limit: %v", err)
		}
		return nil
	}))
}

func TestDeviceCloseThenDoIsErrClosed(t *testing.T) {
	testDevice(t)
	d, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, d.Close())
	must(t, d.Close())
	if err := d.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v", err)
	}
}

// TestDeviceHostMappedMemoryReadThroughItsDevicePointer: mapped host
// memory (cuMemHostAlloc DEVICEMAP) has a device address, the device
// reads what the host wrote there (a device-to-device copy from it), and
// Free is safe twice.
func TestDeviceHostMappedMemoryReadThroughItsDevicePointer(t *testing.T) {
	d := testDevice(t)
	const n = 1<<20 + 6
	must(t, d.Do(func() error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		h, err := d.AllocHostMapped(n)
		if err != nil {
			return err
		}
		defer h.Free()
		if h.Ptr() == 0 || h.Len() != n {
			return fmt.Errorf("mapped memory: device pointer %v, %d bytes", h.Ptr(), h.Len())
		}
		for i, b := 0, h.Bytes(); i < n; i++ {
			b[i] = byte(i*7 + i>>11)
		}
		p, err := d.Alloc(n)
		if err != nil {
			return err
		}
		defer d.Free(p)
		if err := s.CopyDtoD(p, h.Ptr(), n); err != nil {
			return err
		}
		out := make([]byte, n)
		if err := s.CopyDtoH(out, p); err != nil {
			return err
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		for i := range out {
			if out[i] != byte(i*7+i>>11) {
				return fmt.Errorf("byte %d read through the device pointer = %#x, host wrote %#x", i, out[i], byte(i*7+i>>11))
			}
		}
		if err := h.Free(); err != nil || h.Bytes() != nil || h.Ptr() != 0 || h.Free() != nil {
			return fmt.Errorf("double free: %v", err)
		}
		return nil
	}))
}

// A Do from another goroutine is one handoff; a Do nested inside it runs
// inline on the device thread and is none.
func TestDeviceHandoffs_CountCrossingDoOnlyNotNested(t *testing.T) {
	d := testDevice(t)
	h0 := d.Handoffs()
	nested := int64(0)
	must(t, d.Do(func() error {
		nested = d.Handoffs()
		return d.Do(func() error { return nil })
	}))
	if got := d.Handoffs() - h0; got != 1 || nested-h0 != 1 {
		t.Fatalf("one crossing Do with one nested inside: %d handoffs (%d seen inside), want 1", got, nested-h0)
	}
}

// BenchmarkDeviceDo_RoundTrip is the host cost of one handoff to the device
// thread (a Do doing nothing: the worker woken, then the caller): what each
// of a decode step's handoffs costs (cuda's BenchmarkDecodeStep_HostHandoffs
// counts them). A measurement, asserted nowhere.
func BenchmarkDeviceDo_RoundTrip(b *testing.B) {
	sharedOnce.Do(func() { sharedDev, sharedErr = Open(Options{}) })
	if errors.Is(sharedErr, ErrNoDevice) {
		b.Skipf("no CUDA device answers: %v", sharedErr)
	}
	if sharedErr != nil {
		b.Fatal(sharedErr)
	}
	d := sharedDev
	for b.Loop() {
		if err := d.Do(func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

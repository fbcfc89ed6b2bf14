package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// Device tests of the matmul kernels (skip with a message when no device
// answers). The fatbin comes from MINFER_KERNELS (levers), else next to the
// test binary.

// mmtSession is one device, its loaded kernels and a stream, for one test.
type mmtSession struct {
	dev  *driver.Device
	k    *Kernels
	s    *driver.Stream
	bufs []driver.DevicePtr
}

func mmtOpen(t *testing.T) *mmtSession {
	t.Helper()
	dev, cfg := dsOpenDevice(t) // closed after the cleanup below (LIFO)
	ms := &mmtSession{dev: dev}
	t.Cleanup(func() {
		_ = dev.Do(func() error {
			for _, p := range ms.bufs {
				_ = dev.Free(p)
			}
			if ms.s != nil {
				_ = ms.s.Destroy()
			}
			if ms.k != nil {
				_ = ms.k.Close()
			}
			return nil
		})
	})
	err := dev.Do(func() error { return ms.loadMatmul(cfg.Kernels) })
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// mmtLoadKernels loads a second Kernels on ms's device from the levers'
// kernels file (MINFER_KERNELS) with opts, and runs PrepareMatmul on it when
// prepare is set; the caller closes it.
func mmtLoadKernels(t *testing.T, ms *mmtSession, opts KernelsOptions, prepare bool) *Kernels {
	t.Helper()
	cfg, err := levers.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	opts.Path = cfg.Kernels
	var kc *Kernels
	if err := ms.dev.Do(func() (err error) {
		if kc, err = LoadKernels(ms.dev, opts); err != nil || !prepare {
			return err
		}
		return kc.PrepareMatmul()
	}); err != nil {
		t.Fatal(err)
	}
	return kc
}

// upload copies b to a new device buffer (inside Do).
func (ms *mmtSession) upload(b []byte) (driver.DevicePtr, error) {
	p, err := ms.dev.Alloc(uint64(len(b)))
	if err != nil {
		return 0, err
	}
	ms.bufs = append(ms.bufs, p)
	return p, ms.s.CopyHtoD(p, b)
}

// loadMatmul (inside Do) loads the kernels file at path into ms, prepares
// the matmul kernels and opens ms's stream.
func (ms *mmtSession) loadMatmul(path string) error {
	k, err := LoadKernels(ms.dev, KernelsOptions{Path: path})
	if err != nil {
		return fmt.Errorf("kernels (build them with scripts/build-kernels.sh, pass MINFER_KERNELS): %w", err)
	}
	ms.k = k
	if err := k.PrepareMatmul(); err != nil {
		return err
	}
	ms.s, err = ms.dev.NewStream()
	return err
}

// mmtD2H is one device-to-host copy: src into dst.
type mmtD2H struct {
	dst []byte
	src driver.DevicePtr
}

// downloadSync queues the copies in order and waits for the stream (inside
// Do), returning at the first error.
func (ms *mmtSession) downloadSync(cs ...mmtD2H) error {
	for _, c := range cs {
		if err := ms.s.CopyDtoH(c.dst, c.src); err != nil {
			return err
		}
	}
	return ms.s.Synchronize()
}

// mmtUploads uploads buffers one after another (inside Do) and keeps the
// first error: once one fails the later ones do nothing and return 0, as a
// chain of upload calls that returns at the first error would.
type mmtUploads struct {
	ms  *mmtSession
	err error
}

func (ms *mmtSession) uploads() *mmtUploads { return &mmtUploads{ms: ms} }

// bytes uploads b.
func (u *mmtUploads) bytes(b []byte) driver.DevicePtr {
	if u.err != nil {
		return 0
	}
	p, err := u.ms.upload(b)
	u.err = err
	return p
}

// f32 uploads f's bytes.
func (u *mmtUploads) f32(f []float32) driver.DevicePtr { return u.bytes(driver.Float32Bytes(f)) }

// optF32 uploads f's bytes, or nothing (0) for a nil f.
func (u *mmtUploads) optF32(f []float32) driver.DevicePtr {
	if f == nil {
		return 0
	}
	return u.f32(f)
}

// zeros uploads n zero bytes.
func (u *mmtUploads) zeros(n int) driver.DevicePtr { return u.bytes(make([]byte, n)) }

func mmtFloats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// mmtWeights quantizes n rows of k random values to wt and returns the
// bytes and the CPU dequantization (the reference's weights).
func mmtWeights(t *testing.T, rng *rand.Rand, wt quant.Type, n, k int, scale float32) ([]byte, []float32) {
	t.Helper()
	src := make([]float32, n*k)
	for i := range src {
		src[i] = (2*rng.Float32() - 1) * scale
	}
	nb, err := wt.RowBytes(n * k)
	if err != nil {
		t.Fatal(err)
	}
	wb := make([]byte, nb)
	if err := quant.Quantize(wt, src, wb); err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, n*k)
	if err := quant.Dequantize(wt, wb, deq); err != nil {
		t.Fatal(err)
	}
	return wb, deq
}

// mmtK is the row length used for each type: not a multiple of the GEMM's
// 32-value k tile for the plain types (not even of 8), an odd number of
// 32-blocks for the 32-value formats, three super-blocks for the K-quants.
func mmtK(wt quant.Type) int {
	switch wt.BlockSize() {
	case 1:
		return 547
	case quant.QK:
		return 17 * quant.QK
	}
	return 3 * quant.QKK
}

// TestMatmulDevice_AllTypes_MatchesCPUReferenceWithin1e3 runs MatMul for
// every weight type over nt in {1, 2, 3, 8, 9, 17, 64, 130} (both prefill
// arms) against a float64 reference over the CPU-dequantized weights.
// Bar: max|diff| < 1e-3 on every path; the GEMM (tolerance class
// "f16-weight-tile") must also stay within its own bound
// 2^-11 * sum_i |w_i x_i| (+1e-5) per output.
func TestMatmulDevice_AllTypes_MatchesCPUReferenceWithin1e3(t *testing.T) {
	ms := mmtOpen(t)
	const n = 147 // not a multiple of the GEMM's 128-row tile nor of mmv's 4 rows
	nts := []int{1, 2, 3, 8, 9, 17, 64, 130}
	rng := rand.New(rand.NewSource(4))
	for _, wt := range MatMulTypes() {
		k := mmtK(wt)
		wb, deq := mmtWeights(t, rng, wt, n, k, 0.05)
		bias := make([]float32, n)
		for i := range bias {
			bias[i] = 2*rng.Float32() - 1
		}
		maxNT := nts[len(nts)-1]
		x := make([]float32, maxNT*k)
		for i := range x {
			x[i] = 2*rng.Float32() - 1
		}
		var dw, dx, db, dout driver.DevicePtr
		err := ms.dev.Do(func() (err error) {
			if dw, err = ms.upload(wb); err != nil {
				return err
			}
			if dx, err = ms.upload(driver.Float32Bytes(x)); err != nil {
				return err
			}
			if db, err = ms.upload(driver.Float32Bytes(bias)); err != nil {
				return err
			}
			dout, err = ms.upload(make([]byte, maxNT*n*4))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, nt := range nts {
			for _, opts := range []MatMulOptions{{}, {NoPrefillGEMM: true}} {
				if opts.NoPrefillGEMM && nt <= mmvMaxNT {
					continue
				}
				withBias := nt%2 == 1
				b := driver.DevicePtr(0)
				if withBias {
					b = db
				}
				got := make([]byte, nt*n*4)
				err := ms.dev.Do(func() error {
					if err := ms.s.MemsetD8(dout, 0xff, uint64(nt*n*4)); err != nil { // NaN: unwritten outputs fail
						return err
					}
					if err := ms.k.MatMul(ms.s, dout, dx, dw, wt, b, nt, k, n, opts); err != nil {
						return err
					}
					return ms.downloadSync(mmtD2H{got, dout})
				})
				if err != nil {
					t.Fatalf("%s nt=%d %+v: %v", wt, nt, opts, err)
				}
				out := mmtFloats(got)
				path := MatMulPath(wt, nt, opts)
				class := MatMulTolerance(wt, nt, opts)
				var maxDiff, maxRatio float64
				for tok := 0; tok < nt; tok++ {
					for j := 0; j < n; j++ {
						var ref, abs float64
						for i := 0; i < k; i++ {
							p := float64(deq[j*k+i]) * float64(x[tok*k+i])
							ref += p
							abs += math.Abs(p)
						}
						if withBias {
							ref += float64(bias[j])
						}
						d := math.Abs(float64(out[tok*n+j]) - ref)
						if math.IsNaN(d) {
							d = math.Inf(1)
						}
						maxDiff = math.Max(maxDiff, d)
						if class == "f16-weight-tile" {
							maxRatio = math.Max(maxRatio, d/(abs/2048+1e-5))
						}
					}
				}
				t.Logf("%-5s nt=%-3d k=%d n=%d %-18s (%s, bias=%v): max|diff| = %.3g", wt, nt, k, n, path, class, withBias, maxDiff)
				if !(maxDiff < 1e-3) {
					t.Errorf("%s nt=%d %s: max|diff| = %.3g, bar 1e-3", wt, nt, path, maxDiff)
				}
				if maxRatio > 1 {
					t.Errorf("%s nt=%d %s: error exceeds the f16-weight-tile bound by %.2fx", wt, nt, path, maxRatio)
				}
			}
		}
	}
}

// TestMatmulDevice_OneHotActivations_ReproduceCPUDequantExactly drives the
// mmv kernels with identity activations (x = e_i for every i), so
// out[i][j] = W[j][i] is the device dequantization itself: it must equal
// quant.Dequantize exactly (== on values; the sign of a zero may differ).
func TestMatmulDevice_OneHotActivations_ReproduceCPUDequantExactly(t *testing.T) {
	ms := mmtOpen(t)
	const n = 37
	rng := rand.New(rand.NewSource(7))
	for _, wt := range MatMulTypes() {
		k := mmtK(wt)
		wb, deq := mmtWeights(t, rng, wt, n, k, 1)
		eye := make([]float32, k*k)
		for i := 0; i < k; i++ {
			eye[i*k+i] = 1
		}
		got := make([]byte, k*n*4)
		opts := MatMulOptions{NoPrefillGEMM: true}
		err := ms.dev.Do(func() error {
			up := ms.uploads()
			dw := up.bytes(wb)
			dx := up.f32(eye)
			dout := up.zeros(k * n * 4)
			if up.err != nil {
				return up.err
			}
			if err := ms.k.MatMul(ms.s, dout, dx, dw, wt, 0, k, k, n, opts); err != nil {
				return err
			}
			return ms.downloadSync(mmtD2H{got, dout})
		})
		if err != nil {
			t.Fatalf("%s: %v", wt, err)
		}
		out := mmtFloats(got)
		bad := 0
		for i := 0; i < k; i++ {
			for j := 0; j < n; j++ {
				if g, w := out[i*n+j], deq[j*k+i]; g != w {
					if bad < 5 {
						t.Errorf("%s: W[%d][%d] device %v (%#08x), CPU %v (%#08x)", wt, j, i, g, math.Float32bits(g), w, math.Float32bits(w))
					}
					bad++
				}
			}
		}
		t.Logf("%-5s k=%d n=%d: %d of %d dequantized values differ from the CPU", wt, k, n, bad, k*n)
	}
}

// TestMatmulDevice_UnpreparedGEMMIsRefused checks that a GEMM whose dynamic
// shared memory needs an opt-in is refused with an error, never launched,
// when PrepareMatmul has not run for that module.
func TestMatmulDevice_UnpreparedGEMMIsRefused(t *testing.T) {
	if gemmSmemBytes() <= defaultDynSmem {
		t.Skip("the GEMM needs no opt-in")
	}
	ms := mmtOpen(t)
	cfg, err := levers.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	var k2 *Kernels
	err = ms.dev.Do(func() (err error) {
		k2, err = LoadKernels(ms.dev, KernelsOptions{Path: cfg.Kernels})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ms.dev.Do(k2.Close) }()
	err = ms.dev.Do(func() error {
		p, err := ms.upload(make([]byte, 64*1024))
		if err != nil {
			return err
		}
		return k2.MatMul(ms.s, p, p, p, quant.Q8_0, 0, 16, 32, 16, MatMulOptions{})
	})
	if err == nil {
		t.Fatal("un-opted GEMM launched without an error")
	}
	t.Logf("refused as expected: %v", err)
}

// BenchmarkMatmulDevice times MatMul at a 4096 x 4096 weight (decode and a
// 512-token prefill on both arms): weight GB/s for decode, GFLOP/s for
// prefill. Wall time over a synchronized batch of launches.
func BenchmarkMatmulDevice(b *testing.B) {
	cfg, err := levers.FromEnv()
	if err != nil {
		b.Fatal(err)
	}
	dev, err := driver.Open(driver.Options{Disable: cfg.DisableCUDA})
	if errors.Is(err, driver.ErrNoDevice) {
		b.Skipf("no CUDA device answers: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	ms := &mmtSession{dev: dev}
	const k, n, maxNT = 4096, 4096, 512
	err = dev.Do(func() error { return ms.loadMatmul(cfg.Kernels) })
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	x := make([]float32, maxNT*k)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	for _, wt := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.F16} {
		src := make([]float32, n*k)
		for i := range src {
			src[i] = (2*rng.Float32() - 1) * 0.05
		}
		nb, _ := wt.RowBytes(n * k)
		wb := make([]byte, nb)
		if err := quant.Quantize(wt, src, wb); err != nil {
			b.Fatal(err)
		}
		var dw, dx, dout driver.DevicePtr
		if err := dev.Do(func() (err error) {
			if dw, err = ms.upload(wb); err != nil {
				return err
			}
			if dx, err = ms.upload(driver.Float32Bytes(x)); err != nil {
				return err
			}
			dout, err = ms.upload(make([]byte, maxNT*n*4))
			return err
		}); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			nt   int
			opts MatMulOptions
		}{{1, MatMulOptions{}}, {8, MatMulOptions{}}, {512, MatMulOptions{}}, {512, MatMulOptions{NoPrefillGEMM: true}}} {
			name := fmt.Sprintf("%s/nt=%d/%s", wt, c.nt, MatMulPath(wt, c.nt, c.opts))
			b.Run(name, func(b *testing.B) {
				run := func(reps int) error {
					return dev.Do(func() error {
						for r := 0; r < reps; r++ {
							if err := ms.k.MatMul(ms.s, dout, dx, dw, wt, 0, c.nt, k, n, c.opts); err != nil {
								return err
							}
						}
						return ms.s.Synchronize()
					})
				}
				if err := run(5); err != nil { // warm up
					b.Fatal(err)
				}
				b.ResetTimer()
				if err := run(b.N); err != nil {
					b.Fatal(err)
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(nb)/sec/1e9, "wGB/s")
				b.ReportMetric(2*float64(c.nt)*k*n/sec/1e9, "GFLOP/s")
			})
		}
	}
	_ = dev.Do(func() error {
		for _, p := range ms.bufs {
			_ = dev.Free(p)
		}
		_ = ms.s.Destroy()
		return ms.k.Close()
	})
}

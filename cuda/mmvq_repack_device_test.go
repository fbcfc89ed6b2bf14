package cuda

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/quant"
)

// Tests of MINFER_MMVQ_REPACK (mmvq_repack.go, kernels/mmvq_repack.cu):
// the repacked copy's bytes, minfer_mmvqr_* bitwise against minfer_mmvq_*,
// whole-model decode with the lever on against off, and the census. The
// device tests skip with a message when no device answers.

// rpTypes are the types with a repacked layout.
var rpTypes = []quant.Type{quant.Q8_0, quant.Q6_K}

// rpKs are the row lengths: qwen2-0.5b's width and FFN width, qwen2-7b's
// width and FFN width (ffn_down's k). A Q6_K row needs whole 256-value
// super-blocks, so 1792 stands in for 896.
func rpKs(wt quant.Type) []int {
	if wt.BlockSize() == quant.QKK {
		return []int{1792, 3584, 4864, 18944}
	}
	return []int{896, 3584, 4864, 18944}
}

// rpNs are the row counts: small, 0.5b width, 7b width, and a tall matrix
// in the lm_head's regime (not a multiple of the 4 rows of a block).
var rpNs = []int{128, 896, 3584, 10001}

// rpF16 is a random finite f16 of magnitude in [2^-9, 2^1), either sign.
func rpF16(rng *rand.Rand) uint16 {
	return uint16(rng.Intn(2))<<15 | uint16(6+rng.Intn(10))<<10 | uint16(rng.Intn(1024))
}

// rpWeight is n rows of k values of wt as GGUF blocks with random quants
// and random finite scales (built directly: quantizing 190M values on the
// host would dominate the test).
func rpWeight(rng *rand.Rand, wt quant.Type, k, n int) []byte {
	bb, nb := wt.BlockBytes(), k/wt.BlockSize()*n
	w := make([]byte, nb*bb)
	rng.Read(w)
	for i := range nb {
		b := w[i*bb : (i+1)*bb]
		switch wt {
		case quant.Q8_0:
			d := rpF16(rng)
			b[0], b[1] = byte(d), byte(d>>8)
		case quant.Q6_K:
			d := rpF16(rng)
			b[208], b[209] = byte(d), byte(d>>8)
		}
	}
	return w
}

// rpDiff counts the positions where two f32 vectors differ bitwise and
// reports the first few, with the largest |diff|.
func rpDiff(t *testing.T, what string, got, want []float32) int {
	t.Helper()
	bad, worst := 0, 0.0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("%s: out[%d] repacked %v (%#08x), GGUF %v (%#08x)", what, i, got[i],
					math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			bad++
			worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs differ, max |diff| %g", what, bad, len(want), worst)
	}
	return bad
}

// rpFirstDiff is the first index where a and b differ (-1: equal; a
// length difference counts at the shorter length).
func rpFirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// rpRepack uploads the GGUF bytes and returns the device original and its
// repacked copy (RepackMMVQ), inside dev.Do.
func rpRepack(ms *mmtSession, wt quant.Type, wb []byte, k, n int) (src, dst driver.DevicePtr, err error) {
	if src, err = ms.upload(wb); err != nil {
		return 0, 0, err
	}
	if dst, err = ms.upload(make([]byte, MMVQRepackBytes(wt, k, n))); err != nil {
		return 0, 0, err
	}
	if err := ms.s.MemsetD8(dst, 0xa5, MMVQRepackBytes(wt, k, n)); err != nil { // unwritten bytes differ
		return 0, 0, err
	}
	return src, dst, ms.k.RepackMMVQ(ms.s, dst, src, wt, k, n)
}

// TestMMVQRepackDevice_BytesEqualHostRepack: minfer_repack_<t> of random
// GGUF blocks equals RepackHost of the same bytes, byte for byte, for every
// k of rpKs and two row counts (one odd).
func TestMMVQRepackDevice_BytesEqualHostRepack(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(61))
	for _, wt := range rpTypes {
		for _, k := range rpKs(wt) {
			for _, n := range []int{3, 896} {
				wb := rpWeight(rng, wt, k, n)
				want, err := RepackHost(wt, wb, k/wt.BlockSize()*n)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(want))
				err = ms.dev.Do(func() error {
					_, dst, err := rpRepack(ms, wt, wb, k, n)
					if err != nil {
						return err
					}
					return ms.downloadSync(mmtD2H{got, dst})
				})
				if err != nil {
					t.Fatalf("%s k=%d n=%d: %v", wt, k, n, err)
				}
				if i := rpFirstDiff(got, want); i >= 0 {
					t.Errorf("%s k=%d n=%d: repacked bytes differ from RepackHost first at byte %d of %d (device %#02x, host %#02x)",
						wt, k, n, i, len(want), got[i], want[i])
				}
			}
		}
	}
}

// TestMMVQRepackDevice_BitwiseEqualUnrepacked: over one device-quantized
// Q8_1 activation row (zero blocks, spikes, ties), minfer_mmvqr_<t> of the
// repacked copy (with a bias) gives bitwise minfer_mmvq_<t>'s outputs on the
// GGUF bytes, for Q8_0 and Q6_K, every k of rpKs and every n of rpNs; the
// fused forms likewise at n = 896 (q/k/v of 896 + 128 + 128 rows, FFN gate
// and up of 896 rows) and at 3584 / 512 / 512.
func TestMMVQRepackDevice_BitwiseEqualUnrepacked(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(62))
	for _, wt := range rpTypes {
		for _, k := range rpKs(wt) {
			x := mmvqActivation(rng, k, true)
			for _, n := range rpNs {
				wb := rpWeight(rng, wt, k, n)
				bias := make([]float32, n)
				for i := range bias {
					bias[i] = 2*rng.Float32() - 1
				}
				var ref rpRef
				var got []float32
				err := ms.dev.Do(func() error {
					src, dst, err := rpRepack(ms, wt, wb, k, n)
					if err != nil {
						return err
					}
					if ref, err = rpGGUFRun(ms, src, wt, x, bias, k, n); err != nil {
						return err
					}
					got, err = rpOut(ms, n, func(o driver.DevicePtr) error {
						return ms.k.MatMulQ8_1R(ms.s, o, ref.dq, ref.qb, dst, wt, ref.db, k, n)
					})
					return err
				})
				if err != nil {
					t.Fatalf("%s k=%d n=%d: %v", wt, k, n, err)
				}
				what := fmt.Sprintf("%s k=%d n=%d plain", wt, k, n)
				if bad := rpDiff(t, what, got, ref.want); bad == 0 {
					t.Logf("%s: %d outputs bitwise equal", what, n)
				}
			}
			for _, rows := range [][3]int{{896, 128, 128}, {3584, 512, 512}} {
				rpFused(t, ms, rng, wt, k, x, rows)
			}
		}
	}
}

// rpQuantize uploads x and quantizes it to Q8_1 on the device.
func rpQuantize(ms *mmtSession, x []float32, k int) (driver.DevicePtr, uint64, error) {
	dx, err := ms.upload(driver.Float32Bytes(x))
	if err != nil {
		return 0, 0, err
	}
	qb := ActQ8Bytes(k, 1)
	dq, err := ms.upload(make([]byte, qb))
	if err != nil {
		return 0, 0, err
	}
	return dq, qb, ms.k.QuantizeQ8_1(ms.s, dq, dx, k, 1)
}

// rpOut runs f into a fresh NaN-filled output of n f32 and downloads it.
func rpOut(ms *mmtSession, n int, f func(out driver.DevicePtr) error) ([]float32, error) {
	o, err := ms.upload(make([]byte, 4*n))
	if err != nil {
		return nil, err
	}
	if err := ms.s.MemsetD8(o, 0xff, uint64(4*n)); err != nil { // NaN: unwritten outputs fail
		return nil, err
	}
	if err := f(o); err != nil {
		return nil, err
	}
	return frDownload(ms, o, n)
}

// rpOutRes runs f in place over a fresh device copy of the residual res
// (the output is the residual, as the fused graph runs the _res_ forms)
// and downloads it.
func rpOutRes(ms *mmtSession, res []float32, f func(out driver.DevicePtr) error) ([]float32, error) {
	o, err := ms.upload(driver.Float32Bytes(res))
	if err != nil {
		return nil, err
	}
	if err := f(o); err != nil {
		return nil, err
	}
	return frDownload(ms, o, len(res))
}

// rpUploadQuantize uploads the weight bytes wb and quantizes the
// activation x to Q8_1 on the device (inside dev.Do): the inputs the
// decode-matmul kernel tests start from.
func rpUploadQuantize(ms *mmtSession, wb []byte, x []float32, k int) (w, dq driver.DevicePtr, qb uint64, err error) {
	if w, err = ms.upload(wb); err != nil {
		return 0, 0, 0, err
	}
	dq, qb, err = rpQuantize(ms, x, k)
	return w, dq, qb, err
}

// rpRef is what the repacked kernels are held to bitwise: the GGUF kernel
// minfer_mmvq_<t>'s output over one device-quantized activation row with a
// bias, and those inputs on the device for the kernel under test.
type rpRef struct {
	dq, db driver.DevicePtr // the Q8_1 activation and the bias
	qb     uint64
	want   []float32
}

// rpGGUFRun quantizes x to Q8_1 and uploads bias on the device, then runs
// minfer_mmvq_<wt> over the GGUF weight at w with them (inside dev.Do).
func rpGGUFRun(ms *mmtSession, w driver.DevicePtr, wt quant.Type, x, bias []float32, k, n int) (rpRef, error) {
	dq, qb, err := rpQuantize(ms, x, k)
	if err != nil {
		return rpRef{}, err
	}
	db, err := ms.upload(driver.Float32Bytes(bias))
	if err != nil {
		return rpRef{}, err
	}
	want, err := rpOut(ms, n, func(o driver.DevicePtr) error {
		return ms.k.MatMulQ8_1(ms.s, o, dq, qb, w, wt, db, k, n)
	})
	return rpRef{dq: dq, db: db, qb: qb, want: want}, err
}

// rpQ8_1Host is x as the Q8_1 kernels read it, through the CPU quantizer
// and back: the activation of the exact Q8_1 references.
func rpQ8_1Host(t *testing.T, x []float32) []float32 {
	t.Helper()
	qx := make([]byte, ActQ8Bytes(len(x), 1))
	if err := quant.Quantize(quant.Q8_1, x, qx); err != nil {
		t.Fatal(err)
	}
	a := make([]float32, len(x))
	if err := quant.Dequantize(quant.Q8_1, qx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

// rpFused compares the fused q/k/v (with biases) and FFN forms, repacked
// against GGUF, for one k and the row counts rows (q, k, v; the FFN uses
// rows[0]): bitwise.
func rpFused(t *testing.T, ms *mmtSession, rng *rand.Rand, wt quant.Type, k int, x []float32, rows [3]int) {
	t.Helper()
	var wbs [3][]byte
	var biases [3][]float32
	total := 0
	for i := range wbs {
		wbs[i] = rpWeight(rng, wt, k, rows[i])
		biases[i] = make([]float32, rows[i])
		for j := range biases[i] {
			biases[i][j] = 2*rng.Float32() - 1
		}
		total += rows[i]
	}
	up := rpWeight(rng, wt, k, rows[0])
	var qkvGot, qkvWant, ffnGot, ffnWant []float32
	err := ms.dev.Do(func() error {
		var src, dst, db [3]driver.DevicePtr
		var err error
		for i := range wbs {
			if src[i], dst[i], err = rpRepack(ms, wt, wbs[i], k, rows[i]); err != nil {
				return err
			}
			if db[i], err = ms.upload(driver.Float32Bytes(biases[i])); err != nil {
				return err
			}
		}
		usrc, udst, err := rpRepack(ms, wt, up, k, rows[0])
		if err != nil {
			return err
		}
		dq, qb, err := rpQuantize(ms, x, k)
		if err != nil {
			return err
		}
		if qkvWant, err = rpOut(ms, total, func(o driver.DevicePtr) error {
			return ms.k.MatMulQ8_1QKV(ms.s, o, dq, qb, src, wt, db, k, rows)
		}); err != nil {
			return err
		}
		if qkvGot, err = rpOut(ms, total, func(o driver.DevicePtr) error {
			return ms.k.MatMulQ8_1QKVR(ms.s, o, dq, qb, dst, wt, db, k, rows)
		}); err != nil {
			return err
		}
		if ffnWant, err = rpOut(ms, rows[0], func(o driver.DevicePtr) error {
			return ms.k.FFNQ8_1(ms.s, o, dq, qb, src[0], usrc, wt, k, rows[0])
		}); err != nil {
			return err
		}
		ffnGot, err = rpOut(ms, rows[0], func(o driver.DevicePtr) error {
			return ms.k.FFNQ8_1R(ms.s, o, dq, qb, dst[0], udst, wt, k, rows[0])
		})
		return err
	})
	if err != nil {
		t.Fatalf("%s k=%d fused %v: %v", wt, k, rows, err)
	}
	for _, c := range []struct {
		what      string
		got, want []float32
	}{{"qkv", qkvGot, qkvWant}, {"ffn", ffnGot, ffnWant}} {
		what := fmt.Sprintf("%s k=%d rows=%v %s", wt, k, rows, c.what)
		if bad := rpDiff(t, what, c.got, c.want); bad == 0 {
			t.Logf("%s: %d outputs bitwise equal", what, len(c.want))
		}
	}
}

// rpSteps is how many decode steps the repack test runs.
const rpSteps = 8

// rpLeverBitwise runs the decode census of model p (prefill, rpSteps
// decode steps, CUDA graphs on) with lever=0 and with lever=1, and checks
// the logits with it on are bitwise those with it off at every step and
// the decode was captured and replayed with it on: the start of the
// whole-model tests of the levers that must not change a bit. what names
// the lever-on logits in the messages; pins are the caller's other
// settings. Graphs are pinned on (dsGraphsOn) before them.
func rpLeverBitwise(t *testing.T, p, lever, what string, pins ...string) (cOff, cOn map[string]int64, bOff, bOn *Backend) {
	t.Helper()
	pins = append(slices.Clone(dsGraphsOn), pins...)
	gOff, cOff, bOff := dsDecodeCensus(t, p, rpSteps, append(slices.Clone(pins), lever+"=0")...)
	gOn, cOn, bOn := dsDecodeCensus(t, p, rpSteps, append(slices.Clone(pins), lever+"=1")...)
	for i := range gOff {
		if bad := rpDiff(t, fmt.Sprintf("step %d logits (%s)", i, what), gOn[i], gOff[i]); bad != 0 {
			t.Errorf("step %d: %d of %d logits differ between %s=1 and =0", i, bad, len(gOff[i]), lever)
		}
	}
	if st := bOn.CaptureStats(); st.Captures < 1 || st.Replays < 3 {
		t.Errorf("lever on: capture stats %+v: want a decode capture and replays", st)
	}
	return cOff, cOn, bOff, bOn
}

// rpMatching sums the launches of the kernels whose names match pattern.
func rpMatching(c map[string]int64, pattern string) (n int64, names []string) {
	for name, v := range c {
		if m, _ := path.Match(pattern, name); m {
			n += v
			names = append(names, name)
		}
	}
	return n, names
}

// TestMMVQRepackDevice_ModelDecodeBitwiseAndCensus: synthetic qwen2-tiny
// Q8_0 and Q6_K, qwen2-0.5b Q8_0 and Q4_K_M (mixed types: repacked and GGUF
// weights in one fused op), prefill then 8 decode steps with CUDA graphs on:
// MINFER_MMVQ_REPACK=1 gives bitwise the logits of =0. Census of the decode steps: with the
// lever on, minfer_mmvqr_* runs and (pure Q8_0 / Q6_K models) no decode
// launch of the GGUF minfer_mmvq*_<t> kernel is left; with it off, no
// minfer_mmvqr_*; the repacked bytes are counted only with it on. Decode
// is pinned to the one-warp MMVQ kernels (dsOneWarpDecode: the MMVQ path
// on, which the repacked copy needs, no split), and to the plain fused
// forms (MINFER_FUSE_NORM_MMVQ=0: its minfer_mmvqnr_* would not count as
// minfer_mmvqr_*).
func TestMMVQRepackDevice_ModelDecodeBitwiseAndCensus(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct {
		shape, typ string
		pure       string // the kernel suffix every decode matmul should leave, "" for a mix
	}{
		{"qwen2-tiny", "Q8_0", "q8_0"}, {"qwen2-tiny", "Q6_K", "q6_k"},
		{"qwen2-0.5b", "Q8_0", "q8_0"}, {"qwen2-0.5b", "Q4_K_M", ""},
	} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			cOff, cOn, bOff, bOn := rpLeverBitwise(t, dsSynth(t, m.shape, m.typ), "MINFER_MMVQ_REPACK", "repack on", slices.Concat(dsOneWarpDecode, dsTwoCopies, []string{"MINFER_FUSE_NORM_MMVQ=0"})...)
			rOff, _ := rpMatching(cOff, "minfer_mmvqr_*")
			rOn, namesOn := rpMatching(cOn, "minfer_mmvqr_*")
			t.Logf("decode launches of minfer_mmvqr_*: off %d, on %d %v; repacked bytes: on %d, off %d",
				rOff, rOn, namesOn, bOn.repackBytes, bOff.repackBytes)
			if rOff != 0 {
				t.Errorf("lever off: %d minfer_mmvqr_* launches, want 0", rOff)
			}
			if rOn == 0 {
				t.Errorf("lever on: %d minfer_mmvqr_* launches, want some", rOn)
			}
			if bOn.repackBytes == 0 || bOff.repackBytes != 0 {
				t.Errorf("repacked bytes: lever on %d, off %d: want > 0 and 0", bOn.repackBytes, bOff.repackBytes)
			}
			if m.pure != "" {
				for _, c := range []map[string]int64{cOn} {
					if n, names := rpMatching(c, "minfer_mmvq*_"+m.pure); n != rpCount(c, names, "minfer_mmvqr_") {
						t.Errorf("lever on: GGUF decode kernels still launched: %v (census %v)", names, c)
					}
				}
			}
		})
	}
}

// rpCount sums the launches of the names with prefix.
func rpCount(c map[string]int64, names []string, prefix string) (n int64) {
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			n += c[name]
		}
	}
	return n
}

// TestMMVQRepackGeometry_MatchesKernelSource (host): the launcher's
// geometry and kernel names are those of cuda/kernels/mmvq_repack.cu.
func TestMMVQRepackGeometry_MatchesKernelSource(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmvq_repack.cu")
	layout, _ := kernelDefines(t, "kernels/repacked.cuh") // the layout's sizes, shared with mmvq_nt.cu
	maps.Copy(defs, layout)
	for name, want := range map[string]int{"MINFER_MMVQR_ROWS": mmvqrRows, "MINFER_MMVQR_UNITS": mmvqrUnits,
		"MINFER_MMVQR_Q6_K_QBYTES": mmvqrQ6KQBytes, "MINFER_REPACK_THREADS": repackThreads} {
		if defs[name] != want {
			t.Errorf("mmvq_repack.cu / repacked.cuh %s = %d, launcher has %d", name, defs[name], want)
		}
	}
	if mmvqrThreads != 32*mmvqrRows {
		t.Errorf("mmvqrThreads = %d, want 32 * %d", mmvqrThreads, mmvqrRows)
	}
	if mmvqrQ6KQBytes%16 != 0 || mmvqrQ6KQBytes+16+2 != quant.Q6_K.BlockBytes() {
		t.Errorf("Q6_K repacked regions %d + 16 + 2 bytes, block %d", mmvqrQ6KQBytes, quant.Q6_K.BlockBytes())
	}
	for ty, sfx := range mmvqrTypes {
		for _, want := range []string{"MINFER_MMVQR_KERNEL(" + sfx + ",", "minfer_repack_" + sfx + "("} {
			if !strings.Contains(src, want) {
				t.Errorf("%s: mmvq_repack.cu has no %s", ty, want)
			}
		}
		for form, want := range map[string]string{"": "minfer_mmvqr_" + sfx, "qkv": "minfer_mmvqr_qkv_" + sfx, "ffn": "minfer_mmvqr_ffn_" + sfx} {
			if got := mmvqrKernel(ty, form); got != want {
				t.Errorf("mmvqrKernel(%s, %q) = %q, want %q", ty, form, got, want)
			}
		}
		if _, ok := mmvqTable[ty]; !ok {
			t.Errorf("%s has a repacked kernel but no GGUF mmvq kernel to be bitwise equal to", ty)
		}
	}
}

// TestRepackHost_LayoutAndSize (host): RepackHost moves each field of each
// block to its region (checked on hand-made blocks whose bytes name their
// block and offset) and the copy is as large as the GGUF bytes.
func TestRepackHost_LayoutAndSize(t *testing.T) {
	for _, wt := range rpTypes {
		const nb = 3
		bb := wt.BlockBytes()
		src := make([]byte, nb*bb)
		for i := range src {
			src[i] = byte(i*7 + i/bb)
		}
		got, err := RepackHost(wt, src, nb)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(src) || MMVQRepackBytes(wt, wt.BlockSize(), nb) != uint64(len(src)) {
			t.Errorf("%s: repacked %d bytes, MMVQRepackBytes %d, GGUF %d", wt, len(got), MMVQRepackBytes(wt, wt.BlockSize(), nb), len(src))
		}
		var want []byte
		switch wt {
		case quant.Q8_0:
			for i := range nb {
				want = append(want, src[i*bb+2:i*bb+34]...)
			}
			for i := range nb {
				want = append(want, src[i*bb:i*bb+2]...)
			}
		case quant.Q6_K:
			for i := range nb {
				want = append(want, src[i*bb:i*bb+192]...)
			}
			for i := range nb {
				want = append(want, src[i*bb+192:i*bb+208]...)
			}
			for i := range nb {
				want = append(want, src[i*bb+208:i*bb+210]...)
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: RepackHost layout differs first at byte %d", wt, rpFirstDiff(got, want))
		}
	}
	// Split over the cores: a size whose blocks the workers share unevenly
	// gives the serial reference's bytes.
	for _, wt := range rpTypes {
		nb := 3*repackHostChunk + 17
		src := make([]byte, nb*wt.BlockBytes())
		for i := range src {
			src[i] = byte(i*31 + i>>9)
		}
		got, err := RepackHost(wt, src, nb)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for part := 0; part < 3; part++ {
			for i := range nb {
				b := src[i*wt.BlockBytes() : (i+1)*wt.BlockBytes()]
				switch {
				case wt == quant.Q8_0 && part == 0:
					want = append(want, b[2:34]...)
				case wt == quant.Q8_0 && part == 1:
					want = append(want, b[0:2]...)
				case wt == quant.Q6_K && part == 0:
					want = append(want, b[0:192]...)
				case wt == quant.Q6_K && part == 1:
					want = append(want, b[192:208]...)
				case wt == quant.Q6_K && part == 2:
					want = append(want, b[208:210]...)
				}
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s, %d blocks over the cores: differs first at byte %d", wt, nb, rpFirstDiff(got, want))
		}
	}
	if _, err := RepackHost(quant.Q4_K, make([]byte, 144), 1); err == nil {
		t.Error("RepackHost of Q4_K: no error, want a refusal (no repacked layout)")
	}
	if MMVQRepackBytes(quant.Q8_0, 33, 2) != 0 || MMVQRepackBytes(quant.Q4_K, 256, 2) != 0 {
		t.Error("MMVQRepackBytes of a partial block or a type without a layout is not 0")
	}
}

// TestMMVQRepack_LaunchersRefuseBadArguments (host): the checks run before
// any launch: a misaligned repacked weight, a type without a layout, a
// short activation.
func TestMMVQRepack_LaunchersRefuseBadArguments(t *testing.T) {
	k := &Kernels{}
	cases := []struct {
		err  error
		want string
	}{
		{k.MatMulQ8_1R(nil, 0x1000, 0x2000, 1<<20, 0x3008, quant.Q8_0, 0, 896, 128), "16-byte aligned"},
		{k.MatMulQ8_1R(nil, 0x1000, 0x2000, 1<<20, 0x3000, quant.Q4_K, 0, 1024, 128), "no repacked kernel"},
		{k.MatMulQ8_1R(nil, 0x1000, 0x2000, 100, 0x3000, quant.Q8_0, 0, 896, 128), "Q8_1 activation"},
		{k.FFNQ8_1R(nil, 0x1000, 0x2000, 1<<20, 0x3000, 0x3004, quant.Q6_K, 1792, 128), "16-byte aligned"},
		{k.MatMulQ8_1QKVR(nil, 0x1000, 0x2000, 1<<20, [3]driver.DevicePtr{0x3000, 0x4000, 0}, quant.Q8_0,
			[3]driver.DevicePtr{}, 896, [3]int{896, 128, 128}), "weight 2"},
		{k.RepackMMVQ(nil, 0x1008, 0x2000, quant.Q8_0, 896, 4), "misaligned"},
		{k.RepackMMVQ(nil, 0x1000, 0x2000, quant.Q8_0, 100, 4), "whole blocks"},
	}
	for i, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("case %d: err %v, want one containing %q", i, c.err, c.want)
		}
	}
}

// BenchmarkRepackHost_Q8_0 (host): the load-time cost of MINFER_ONE_COPY's
// host repack, 64 MiB of Q8_0 blocks a call (`go test ./cuda -run '^$'
// -bench RepackHost`; bytes/s over GOMAXPROCS cores).
func BenchmarkRepackHost_Q8_0(b *testing.B) {
	n := 64 << 20 / quant.Q8_0.BlockBytes()
	src := make([]byte, n*quant.Q8_0.BlockBytes())
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := RepackHost(quant.Q8_0, src, n); err != nil {
			b.Fatal(err)
		}
	}
}

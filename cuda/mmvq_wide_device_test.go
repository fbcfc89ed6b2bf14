package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/engine/quant"
)

// Tests of MINFER_MMVQ_WIDE (mmvq.go, kernels/mmvq.cu minfer_mmvqw_*):
// bitwise against minfer_mmvq_* on the real shapes (unaligned rows
// included), within the exact Q8_1 reference, whole-model decode with the
// lever on against the repacked default, no repacked copy with it on, and
// the kernel geometry on the host. Device tests skip without a device.

// mwKs are the row lengths: Q8_0 896 (rows of 952 bytes: every other row
// starts 8 bytes off a 16-byte boundary, and odd n ends the matrix inside
// a 16-byte word), 1024, 3584, 4864, 18944 (rows of whole 16-byte words);
// Q6_K 1792 (1,470-byte rows: the lead cycles through every even offset),
// 3584, 4864, 18944.
func mwKs(wt quant.Type) []int {
	if wt == quant.Q6_K {
		return []int{1792, 3584, 4864, 18944}
	}
	return []int{896, 1024, 3584, 4864, 18944}
}

// mwNs: one row, a few (not a multiple of the 4 rows of a block), the 0.5b
// width and a tall matrix in the lm_head's regime.
var mwNs = []int{1, 7, 896, 10001}

// TestMMVQWideDevice_BitwiseEqualGGUFKernel: over one device-quantized Q8_1
// row (zero blocks, spikes, ties), minfer_mmvqw_<t> gives bitwise
// minfer_mmvq_<t>'s outputs on the same GGUF bytes, plain with a bias and
// the residual form in place, for Q8_0 and Q6_K, every k of mwKs and n of
// mwNs; the fused q/k/v (with biases) and FFN forms at 896 + 128 + 128 and
// 3584 + 512 + 512 rows.
func TestMMVQWideDevice_BitwiseEqualGGUFKernel(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(191))
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		for _, k := range mwKs(wt) {
			x := mmvqActivation(rng, k, true)
			for _, n := range mwNs {
				wb := rpWeight(rng, wt, k, n)
				bias, res := make([]float32, n), make([]float32, n)
				for i := range bias {
					bias[i], res[i] = 2*rng.Float32()-1, 8*rng.Float32()-4
				}
				var ref rpRef
				var got, gotRes, wantRes []float32
				err := ms.dev.Do(func() error {
					w, err := ms.upload(wb)
					if err != nil {
						return err
					}
					if ref, err = rpGGUFRun(ms, w, wt, x, bias, k, n); err != nil {
						return err
					}
					if got, err = rpOut(ms, n, func(o driver.DevicePtr) error {
						return ms.k.MatMulQ8_1W(ms.s, o, ref.dq, ref.qb, w, wt, ref.db, k, n)
					}); err != nil {
						return err
					}
					// The residual form in place (res is the output), as the
					// fused graph runs it.
					if wantRes, err = rpOutRes(ms, res, func(o driver.DevicePtr) error {
						return ms.k.MatMulQ8_1Res(ms.s, o, ref.dq, ref.qb, w, wt, 0, o, k, n)
					}); err != nil {
						return err
					}
					gotRes, err = rpOutRes(ms, res, func(o driver.DevicePtr) error {
						return ms.k.MatMulQ8_1WRes(ms.s, o, ref.dq, ref.qb, w, wt, 0, o, k, n)
					})
					return err
				})
				if err != nil {
					t.Fatalf("%s k=%d n=%d: %v", wt, k, n, err)
				}
				for _, c := range []struct {
					what      string
					got, want []float32
				}{{"plain", got, ref.want}, {"res", gotRes, wantRes}} {
					what := fmt.Sprintf("%s k=%d n=%d %s (lead of row 1: %d)", wt, k, n, c.what, MMVQWideRowLead(wt, k, 1))
					if bad := rpDiff(t, what, c.got, c.want); bad == 0 {
						t.Logf("%s: %d outputs bitwise equal", what, n)
					}
				}
			}
			for _, rows := range [][3]int{{896, 128, 128}, {3584, 512, 512}} {
				fusedCompare(t, ms, rng, mwLayout, wt, k, x, rows)
			}
		}
	}
}

// mwLayout is MINFER_MMVQ_WIDE's: the GGUF bytes themselves.
var mwLayout = fusedLayout{name: "wide",
	copy: func(_ *mmtSession, src driver.DevicePtr, _ []byte, _ quant.Type, _, _ int) (driver.DevicePtr, error) {
		return src, nil
	},
	qkv: func(ms *mmtSession, o, dq driver.DevicePtr, qb uint64, w [3]driver.DevicePtr, wt quant.Type, db [3]driver.DevicePtr, k int, rows [3]int) error {
		return ms.k.MatMulQ8_1QKVW(ms.s, o, dq, qb, w, wt, db, k, rows)
	},
	ffn: func(ms *mmtSession, o, dq driver.DevicePtr, qb uint64, gate, up driver.DevicePtr, wt quant.Type, k, n int) error {
		return ms.k.FFNQ8_1W(ms.s, o, dq, qb, gate, up, wt, k, n)
	}}

// TestMMVQWideDevice_MatchesExactQ8_1ReferenceWithin1e4Relative: on
// quantized weights (the CPU quantizer's bytes) every minfer_mmvqw output
// is within 1e-4 * sum_i |w_i a_i| (+1e-6) of the float64 dot of the
// CPU-dequantized weight and the dequantized Q8_1 activation: the CPU
// reference, independent of the GGUF kernel the bitwise test compares
// with. Unaligned rows (Q8_0 k = 896, Q6_K k = 1792) and aligned ones.
func TestMMVQWideDevice_MatchesExactQ8_1ReferenceWithin1e4Relative(t *testing.T) {
	ms := mmtOpen(t)
	const n = 147
	rng := rand.New(rand.NewSource(192))
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		for _, k := range mwKs(wt)[:3] {
			wb, deq := mmtWeights(t, rng, wt, n, k, float32(1/math.Sqrt(float64(k))))
			x := mmvqActivation(rng, k, false)
			a := rpQ8_1Host(t, x)
			var got []float32
			err := ms.dev.Do(func() error {
				w, dq, qb, err := rpUploadQuantize(ms, wb, x, k)
				if err != nil {
					return err
				}
				got, err = rpOut(ms, n, func(o driver.DevicePtr) error {
					return ms.k.MatMulQ8_1W(ms.s, o, dq, qb, w, wt, 0, k, n)
				})
				return err
			})
			if err != nil {
				t.Fatalf("%s k=%d: %v", wt, k, err)
			}
			worst := 0.0
			for j := range n {
				var ref, mag float64
				for i := range k {
					w := float64(deq[j*k+i])
					ref += w * float64(a[i])
					mag += math.Abs(w * float64(a[i]))
				}
				rel := math.Abs(float64(got[j])-ref) / (mag + 1e-6)
				if math.IsNaN(rel) {
					rel = math.Inf(1)
				}
				worst = max(worst, rel)
			}
			t.Logf("%s k=%d n=%d: max |mmvqw - ref| / sum|wa| = %.3g (bar 1e-4)", wt, k, n, worst)
			if !(worst <= 1e-4) {
				t.Errorf("%s k=%d: max |mmvqw - ref| / sum|wa| = %.3g, bar 1e-4", wt, k, worst)
			}
		}
	}
}

// TestMMVQWideDevice_ModelDecodeBitwiseOneCopyAndCensus: synthetic
// qwen2-tiny Q8_0 and Q6_K, qwen2-0.5b Q8_0 and Q4_K_M (a mix: wide and
// GGUF weights in one model), prefill then 8 decode steps with CUDA graphs
// on: MINFER_MMVQ_WIDE=1 gives bitwise the logits of the default (=0, the
// repacked copy). With the lever on: minfer_mmvqw_* runs, no minfer_mmvqr_*,
// and no repacked byte is allocated (the derived class is 0); off, no
// minfer_mmvqw_*. The off arm is pinned to the repacked one-warp default
// (dsOneWarpDecode, MINFER_MMVQ_REPACK=1), which an A/B's arm B may move.
func TestMMVQWideDevice_ModelDecodeBitwiseOneCopyAndCensus(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ string }{
		{"qwen2-tiny", "Q8_0"}, {"qwen2-tiny", "Q6_K"}, {"qwen2-0.5b", "Q8_0"}, {"qwen2-0.5b", "Q4_K_M"},
	} {
		t.Run(m.shape+"/"+m.typ, func(t *testing.T) {
			pins := append(slices.Clone(dsOneWarpDecode), "MINFER_MMVQ_REPACK=1", "MINFER_ONE_COPY=0")
			cOff, cOn, bOff, bOn := rpLeverBitwise(t, dsSynth(t, m.shape, m.typ), "MINFER_MMVQ_WIDE", "wide on", pins...)
			wOn, names := rpMatching(cOn, "minfer_mmvqw_*")
			wOff, _ := rpMatching(cOff, "minfer_mmvqw_*")
			rOn, _ := rpMatching(cOn, "minfer_mmvqr_*")
			t.Logf("decode launches of minfer_mmvqw_*: on %d %v, off %d; repacked bytes on %d, off %d",
				wOn, names, wOff, bOn.repackBytes, bOff.repackBytes)
			if wOn == 0 || wOff != 0 || rOn != 0 {
				t.Errorf("census: minfer_mmvqw_* on %d (want > 0), off %d (want 0); minfer_mmvqr_* on %d (want 0)", wOn, wOff, rOn)
			}
			if bOn.repackBytes != 0 || bOff.repackBytes == 0 {
				t.Errorf("repacked bytes: lever on %d (want 0: one copy), off %d (want > 0)", bOn.repackBytes, bOff.repackBytes)
			}
			if dm, err := bOn.DeviceMemory(); err != nil || dm.Derived != 0 {
				t.Errorf("lever on: derived memory %d (%v), want 0", dm.Derived, err)
			}
		})
	}
}

// TestMMVQWideGeometry_MatchesKernelSource (host): the launcher's geometry
// and kernel names are those of cuda/kernels/mmvq.cu, and the staging
// arithmetic holds for every lead a row can have: a chunk is whole 16-byte
// words and whole rounds of 32 units (so every chunk of a row keeps the
// row's lead and lane l's units run l, l + 32, ... across chunks), the
// words of a chunk fit the lanes' loads and the shared buffer with the
// 4 bytes minfer_mmvqw_ld16 reads past a unit.
func TestMMVQWideGeometry_MatchesKernelSource(t *testing.T) {
	defs, src := kernelDefines(t, "kernels/mmvq.cu")
	for name, want := range map[string]int{"MINFER_MMVQW_ROWS": mmvqwRows, "MINFER_MMVQW_Q8_0_CHUNK": mmvqwQ80Chunk,
		"MINFER_MMVQW_Q6_K_CHUNK": mmvqwQ6KChunk, "MINFER_MMVQW_Q8_0_VECS": mmvqwQ80Vecs, "MINFER_MMVQW_Q6_K_VECS": mmvqwQ6KVecs} {
		if defs[name] != want {
			t.Errorf("mmvq.cu %s = %d, launcher has %d", name, defs[name], want)
		}
	}
	if mmvqwThreads != 32*mmvqwRows {
		t.Errorf("mmvqwThreads = %d, want 32 * %d", mmvqwThreads, mmvqwRows)
	}
	for ty, sfx := range mmvqwTypes {
		if !strings.Contains(src, "MINFER_MMVQW_KERNEL("+sfx+",") {
			t.Errorf("%s: mmvq.cu instantiates no MINFER_MMVQW_KERNEL(%s, ...)", ty, sfx)
		}
		for form, want := range map[string]string{"": "minfer_mmvqw_" + sfx, "res": "minfer_mmvqw_res_" + sfx,
			"qkv": "minfer_mmvqw_qkv_" + sfx, "ffn": "minfer_mmvqw_ffn_" + sfx} {
			if got := mmvqwKernel(ty, form); got != want {
				t.Errorf("mmvqwKernel(%s, %q) = %q, want %q", ty, form, got, want)
			}
		}
		if _, ok := mmvqTable[ty]; !ok {
			t.Errorf("%s has a wide kernel but no GGUF mmvq kernel to be bitwise equal to", ty)
		}
		cb, vecs := mmvqwChunk(ty)
		bb, units := ty.BlockBytes(), ty.BlockSize()/16
		if cb*bb%16 != 0 || cb*units%32 != 0 {
			t.Errorf("%s: a chunk of %d blocks is %d bytes and %d units: want whole 16-byte words and rounds of 32", ty, cb, cb*bb, cb*units)
		}
		loads := (vecs - 1 + 31) / 32 // the kernel's LOADS
		for lead := 0; lead < 16; lead += 2 {
			words := MMVQWideChunkWords(ty, lead, cb)
			if words > 32*loads || words >= vecs {
				t.Errorf("%s lead %d: %d words, %d loads per lane, a buffer of %d", ty, lead, words, loads, vecs)
			}
			// The last byte any unit reads (a Q8_0 unit's quants end at the
			// chunk's end; a Q6_K unit's d at its super-block's) plus the 4
			// bytes ld16 reads past a 16-byte span.
			if last := lead + cb*bb + 4; last > 16*vecs {
				t.Errorf("%s lead %d: reads up to byte %d of a %d-byte buffer", ty, lead, last, 16*vecs)
			}
		}
	}
}

// TestMMVQWideRowLead_AlignedIffBlocksMultipleOf8 (host): on the real
// shapes a Q8_0 row starts 16-byte aligned for every row iff (k / 32) % 8
// == 0 (896: no; 1024, 2048, 3072, 3584, 4864, 18944: yes), a Q6_K row iff
// (k / 256) % 8 == 0; the lead is always even (the blocks are 2-byte
// aligned), which the kernel's 2-byte shift relies on.
func TestMMVQWideRowLead_AlignedIffBlocksMultipleOf8(t *testing.T) {
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q6_K} {
		for _, k := range []int{896, 1024, 1792, 2048, 3072, 3584, 4864, 18944} {
			if k%wt.BlockSize() != 0 {
				continue
			}
			aligned := true
			for r := range 64 {
				lead := MMVQWideRowLead(wt, k, r)
				aligned = aligned && lead == 0
				if lead%2 != 0 {
					t.Errorf("%s k=%d row %d: odd lead %d", wt, k, r, lead)
				}
			}
			if want := (k/wt.BlockSize())%8 == 0; aligned != want {
				t.Errorf("%s k=%d: every row aligned %v, (k/%d) %% 8 == 0 says %v", wt, k, aligned, wt.BlockSize(), want)
			}
		}
	}
	if MMVQWideRowLead(quant.Q8_0, 896, 1) != 8 {
		t.Errorf("Q8_0 k=896 row 1: lead %d, want 952 %% 16 = 8", MMVQWideRowLead(quant.Q8_0, 896, 1))
	}
}

// TestMatmulRoute_WideLeverPicksWideKernelsAndNoCopy (host): with
// MINFER_MMVQ_WIDE=1 decode of Q8_0 / Q6_K takes routeMMVQW (a decode
// route, with a residual form), every other type and token count keeps
// its route, and repackWanted says no for every type (one copy); with it
// off the repacked copy is wanted as before.
func TestMatmulRoute_WideLeverPicksWideKernelsAndNoCopy(t *testing.T) {
	scratch := MatMulOptions{ActQ8: 0x10000, ActQ8Bytes: 1 << 20, MMQ: true, MMVQNT: true}
	on, err := levers.Parse([]string{"MINFER_MMVQ_WIDE=1"})
	if err != nil {
		t.Fatal(err)
	}
	off := levers.Default()
	for _, wt := range MatMulTypes() {
		for _, nt := range []int{1, 2, 9} {
			b := &Backend{mm: scratch, lv: on}
			got, base := b.matmulRoute(&devWeight{typ: wt}, nt), routeFor(wt, nt, scratch)
			want := base
			if base == routeMMVQ && MMVQWideType(wt) {
				want = routeMMVQW
			}
			if got != want {
				t.Errorf("%s nt=%d: route %d, want %d", wt, nt, got, want)
			}
			if want == routeMMVQW && !got.decode() {
				t.Errorf("%s: routeMMVQW is not a decode route", wt)
			}
		}
		if (&Backend{mm: scratch, lv: on}).repackWanted(wt) {
			t.Errorf("%s: MINFER_MMVQ_WIDE=1 still wants a repacked copy", wt)
		}
		if got := (&Backend{mm: scratch, lv: off}).repackWanted(wt); got != MMVQRepackable(wt) {
			t.Errorf("%s: default repackWanted %v, want %v", wt, got, MMVQRepackable(wt))
		}
	}
	r := MemoryRules(on, 0)
	if r.DerivedLever != "" {
		t.Errorf("MINFER_MMVQ_WIDE=1: the plan names %q as dropping copies it does not make", r.DerivedLever)
	}
	if own, derived := r.Weight(memplan.Tensor{Name: "w", Type: quant.Q8_0, Dims: []int{3584, 512}}); derived != 0 || own == 0 {
		t.Errorf("MINFER_MMVQ_WIDE=1: a Q8_0 matrix plans own %d, derived %d (want no derived copy)", own, derived)
	}
}

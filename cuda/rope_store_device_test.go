package cuda

// Device tests of the fused QKV tail (minfer_qkv_rope_store,
// graph.OpQkvBiasRopeStore) and of the register-cached rms_norm. They skip
// with a message when no device answers.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

// rsI32Bytes is the little-endian bytes of v.
func rsI32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func rsRandF32(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

// rsRopeRef is engine/cpu's rope (ropeTable + rope) over x [hd, nh, nt] with
// the first nRot dims rotating: angles in float64, rounded once to f32.
func rsRopeRef(x []float32, pos []int32, hd, nh, nRot int, theta float32, neox bool) []float32 {
	y := append([]float32(nil), x...)
	half := nRot / 2
	for t, p := range pos {
		for i := 0; i < half; i++ {
			freq := math.Pow(float64(theta), -2*float64(i)/float64(nRot))
			s64, c64 := math.Sincos(float64(p) * freq)
			c, s := float32(c64), float32(s64)
			a, b := i, i+half
			if !neox {
				a, b = 2*i, 2*i+1
			}
			for h := 0; h < nh; h++ {
				o := (t*nh + h) * hd
				x0, x1 := x[o+a], x[o+b]
				y[o+a] = float32(x0*c) - float32(x1*s)
				y[o+b] = float32(x0*s) + float32(x1*c)
			}
		}
	}
	return y
}

// rsChainRopeStore ends the unfused chain both fused-op tests compare
// against (inside Do): rope q into outC and k into tkr, store tkr and v in
// the chain's regions (regs[2], regs[3]), then copy both q outputs (fused
// outF, chain outC) and the four regions (kF, vF fused; kC, vC chain) to
// the host and wait.
func rsChainRopeStore(ms *mmtSession, p QkvRopeStoreParams, q, k, v, outF, outC, tkr, dpos, dwin driver.DevicePtr,
	regs []driver.DevicePtr, qF, qC []float32, kF, vF, kC, vC []byte) error {
	nq, nk := p.NHead*p.HeadDim, p.NHeadKV*p.HeadDim
	if err := ms.k.Rope(ms.s, outC, q, dpos, p.NT, p.NHead, p.HeadDim, p.NRot, p.Theta, p.Neox); err != nil {
		return err
	}
	if err := ms.k.Rope(ms.s, tkr, k, dpos, p.NT, p.NHeadKV, p.HeadDim, p.NRot, p.Theta, p.Neox); err != nil {
		return err
	}
	if err := ms.k.KVStore(ms.s, regs[2], p.Format, tkr, dwin, p.NT, nk, p.NCtx); err != nil {
		return err
	}
	if err := ms.k.KVStore(ms.s, regs[3], p.Format, v, dwin, p.NT, nk, p.NCtx); err != nil {
		return err
	}
	qfb, qcb := make([]byte, 4*nq*p.NT), make([]byte, 4*nq*p.NT)
	if err := ms.downloadSync(mmtD2H{qfb, outF}, mmtD2H{qcb, outC}, mmtD2H{kF, regs[0]}, mmtD2H{vF, regs[1]},
		mmtD2H{kC, regs[2]}, mmtD2H{vC, regs[3]}); err != nil {
		return err
	}
	copy(qF, mmtFloats(qfb))
	copy(qC, mmtFloats(qcb))
	return nil
}

// rsShape is one fused-op geometry.
type rsShape struct {
	name              string
	nh, nkv, hd, nRot int
	noBias            bool
}

// rsFusedVsChain runs the fused kernel and the unfused chain (AddBias, Rope,
// KVStore for k and v; AddBias for q then Rope) on the same inputs and
// returns both q outputs and both K and V regions (bytes).
func rsFusedVsChain(t *testing.T, ms *mmtSession, rng *rand.Rand, sh rsShape, f kv.Format, neox bool, nt, start, nCtx int) (
	qF, qC []float32, kF, kC, vF, vC []byte, q, bq []float32, pos []int32) {
	t.Helper()
	const theta = 1e6
	nq, nk := sh.nh*sh.hd, sh.nkv*sh.hd
	q = rsRandF32(rng, nq*nt, 1)
	k := rsRandF32(rng, nk*nt, 1)
	v := rsRandF32(rng, nk*nt, 1)
	if !sh.noBias {
		bq = rsRandF32(rng, nq, 0.5)
	}
	bk, bv := rsRandF32(rng, nk, 0.5), rsRandF32(rng, nk, 0.5)
	pos = make([]int32, nt)
	for i := range pos {
		pos[i] = int32(start + 7*i + 11)
	}
	win := []int32{int32(start), int32(start + nt)}
	rb, err := kvRowBytes("test", f, nk, nCtx)
	if err != nil {
		t.Fatal(err)
	}
	regBytes := rb * nCtx
	qF, qC = make([]float32, nq*nt), make([]float32, nq*nt)
	kF, kC, vF, vC = make([]byte, regBytes), make([]byte, regBytes), make([]byte, regBytes), make([]byte, regBytes)
	p := QkvRopeStoreParams{NT: nt, NHead: sh.nh, NHeadKV: sh.nkv, HeadDim: sh.hd, NRot: sh.nRot, Theta: theta,
		Neox: neox, Format: f, NCtx: nCtx}
	err = ms.dev.Do(func() error {
		up := func(b []byte) driver.DevicePtr {
			if err != nil {
				return 0
			}
			var d driver.DevicePtr
			d, err = ms.upload(b)
			return d
		}
		dq, dk, dv := up(driver.Float32Bytes(q)), up(driver.Float32Bytes(k)), up(driver.Float32Bytes(v))
		var dbq driver.DevicePtr
		if bq != nil {
			dbq = up(driver.Float32Bytes(bq))
		}
		dbk, dbv := up(driver.Float32Bytes(bk)), up(driver.Float32Bytes(bv))
		dpos, dwin := up(rsI32Bytes(pos)), up(rsI32Bytes(win))
		regs := make([]driver.DevicePtr, 4) // kF, vF, kC, vC
		for i := range regs {
			regs[i] = up(bytes.Repeat([]byte{0x5a}, regBytes)) // cells outside the window must stay as they are
		}
		outF, outC := up(make([]byte, 4*nq*nt)), up(make([]byte, 4*nq*nt))
		tq, tk, tv, tkr := up(make([]byte, 4*nq*nt)), up(make([]byte, 4*nk*nt)), up(make([]byte, 4*nk*nt)), up(make([]byte, 4*nk*nt))
		if err != nil {
			return err
		}
		for _, o := range []driver.DevicePtr{outF, outC} {
			if err := ms.s.MemsetD8(o, 0xff, uint64(4*nq*nt)); err != nil { // NaN: unwritten outputs fail
				return err
			}
		}
		if err := ms.k.QkvBiasRopeStore(ms.s, QkvRopeStoreBuffers{Out: outF, Q: dq, K: dk, V: dv, BQ: dbq, BK: dbk, BV: dbv,
			Pos: dpos, Win: dwin, KRegion: regs[0], VRegion: regs[1]}, p); err != nil {
			return err
		}
		// The unfused chain: the bias adds (the matmul epilogue's one
		// rounded add), rope q and k, store k and v.
		if dbq != 0 {
			err = ms.k.AddBias(ms.s, tq, dq, dbq, nt, nq)
		} else {
			err = ms.k.Copy(ms.s, tq, dq, nq*nt)
		}
		if err != nil {
			return err
		}
		if err := ms.k.AddBias(ms.s, tk, dk, dbk, nt, nk); err != nil {
			return err
		}
		if err := ms.k.AddBias(ms.s, tv, dv, dbv, nt, nk); err != nil {
			return err
		}
		return rsChainRopeStore(ms, p, tq, tk, tv, outF, outC, tkr, dpos, dwin, regs,
			qF, qC, kF, vF, kC, vC)
	})
	if err != nil {
		t.Fatal(err)
	}
	return
}

// rsFirstByteDiff is the first differing byte, or -1.
func rsFirstByteDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestQkvRopeStoreDevice_BitwiseEqualsBiasRopeKVStoreChain: the fused
// kernel gives bitwise the roped q and byte-identical K and V regions of
// the unfused device chain (bias add + rope + kv_store) for every KV format,
// neox and interleaved rope, nt 1, 3 and 64, a window start > 0; shapes of
// qwen2-0.5b (14/2 heads of 64), qwen2-7b (28/4 heads of 128), a partial
// rotation (n_rot < head_dim) and a q without bias. The q output is also
// checked against engine/cpu's rope in float64 angles (within 1e-5: the
// double sin/cos of the device and of Go may round differently).
func TestQkvRopeStoreDevice_BitwiseEqualsBiasRopeKVStoreChain(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(61))
	shapes := []rsShape{
		{name: "qwen2-0.5b", nh: 14, nkv: 2, hd: 64, nRot: 64},
		{name: "qwen2-7b", nh: 28, nkv: 4, hd: 128, nRot: 128},
		{name: "partial-rot", nh: 4, nkv: 2, hd: 128, nRot: 64},
		{name: "no-q-bias", nh: 6, nkv: 3, hd: 64, nRot: 64, noBias: true},
	}
	const start, nCtx = 37, 160
	for _, sh := range shapes {
		for _, f := range []kv.Format{kv.F32, kv.F16, kv.Q8_0} {
			for _, neox := range []bool{true, false} {
				for _, nt := range []int{1, 3, 64} {
					name := fmt.Sprintf("%s/%s/neox=%v/nt%d", sh.name, f, neox, nt)
					qF, qC, kF, kC, vF, vC, q, bq, pos := rsFusedVsChain(t, ms, rng, sh, f, neox, nt, start, nCtx)
					for i := range qF {
						if math.Float32bits(qF[i]) != math.Float32bits(qC[i]) {
							t.Errorf("%s: q[%d] (token %d, head %d, dim %d) fused %v, chain %v (bitwise)", name, i,
								i/(sh.nh*sh.hd), i/sh.hd%sh.nh, i%sh.hd, qF[i], qC[i])
							break
						}
					}
					if i := rsFirstByteDiff(kF, kC); i >= 0 {
						t.Errorf("%s: K region byte %d (cell %d) fused %#x, chain %#x", name, i, i/kv.RowBytes(f, sh.nkv*sh.hd), kF[i], kC[i])
					}
					if i := rsFirstByteDiff(vF, vC); i >= 0 {
						t.Errorf("%s: V region byte %d (cell %d) fused %#x, chain %#x", name, i, i/kv.RowBytes(f, sh.nkv*sh.hd), vF[i], vC[i])
					}
					// Against the CPU reference (bias add then float64-angle rope).
					qb := append([]float32(nil), q...)
					if bq != nil {
						nq := sh.nh * sh.hd
						for i := range qb {
							qb[i] += bq[i%nq]
						}
					}
					want := rsRopeRef(qb, pos, sh.hd, sh.nh, sh.nRot, 1e6, neox)
					worst, at := 0.0, -1
					for i := range want {
						if d := math.Abs(float64(qF[i])-float64(want[i])) / math.Max(1, math.Abs(float64(want[i]))); d > worst || math.IsNaN(d) {
							worst, at = d, i
						}
					}
					if worst > 1e-5 || math.IsNaN(worst) {
						t.Errorf("%s: q vs CPU rope: max |diff| %g at %d (fused %v, cpu %v)", name, worst, at, qF[at], want[at])
					}
				}
			}
		}
	}
}

// rsOldRmsNorm emulates the rms_norm kernel's arithmetic exactly (the
// pre-change kernel and the register-cached one share it): block B =
// opsRowBlock(n); thread j sums x[j], x[j+B], ... in order; each warp folds
// its 32 partials by the xor butterfly (16, 8, 4, 2, 1); lane w of warp 0
// takes warp w's sum (0 beyond the warps) and folds again; scale =
// 1/f32(sqrt_double(mean + eps)); y = f32(x*scale) * w.
func rsOldRmsNorm(x, w []float32, n int, eps float32) []float32 {
	nb := int(opsRowBlock(n)[0])
	y := make([]float32, len(x))
	fold := func(v []float32) float32 {
		for o := 16; o > 0; o >>= 1 {
			nv := make([]float32, 32)
			for l := range nv {
				nv[l] = float32(v[l] + v[l^o])
			}
			v = nv
		}
		return v[0]
	}
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		part := make([]float32, nb)
		for j := range part {
			var s float32
			for i := j; i < n; i += nb {
				s = float32(s + float32(row[i]*row[i]))
			}
			part[j] = s
		}
		warps := make([]float32, 32)
		for wi := 0; wi < nb/32; wi++ {
			warps[wi] = fold(part[wi*32 : wi*32+32])
		}
		total := fold(warps)
		mean := float32(total / float32(n))
		scale := float32(1 / float32(math.Sqrt(float64(float32(mean+eps)))))
		for i, v := range row {
			o := float32(v * scale)
			if w != nil {
				o = float32(o * w[i])
			}
			y[r+i] = o
		}
	}
	return y
}

// rsCPURmsNorm is engine/cpu's rmsNorm (index-order f32 sum).
func rsCPURmsNorm(x, w []float32, n int, eps float32) []float32 {
	y := make([]float32, len(x))
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var sum float32
		for _, v := range row {
			sum = float32(sum + float32(v*v))
		}
		mean := float32(sum / float32(n))
		scale := float32(1 / float32(math.Sqrt(float64(float32(mean+eps)))))
		for i, v := range row {
			y[r+i] = float32(float32(v*scale) * w[i])
		}
	}
	return y
}

// TestRmsNormDevice_BitwiseOldKernelAndCPUWithin1e4: the register-cached
// rms_norm gives bitwise the result of the kernel it replaced (emulated on
// the host: same partial sums, same tree) for rows of 896, 3584, 1024, 5,
// 64, 128 (qk_norm), 4100 and 8192 (beyond the register cache), 1 and 512
// rows; and stays within 1e-4 (relative to max(1, |cpu|)) of engine/cpu's
// index-order sum (the tree-sum class: the host emulation puts the 8192
// row at ~9e-6 absolute). One case runs without a weight.
func TestRmsNormDevice_BitwiseOldKernelAndCPUWithin1e4(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(62))
	const eps = 1e-6
	for _, n := range []int{896, 3584, 1024, 5, 64, 128, 4100, 8192} {
		for _, rows := range []int{1, 512} {
			for _, noW := range []bool{false, true} {
				if noW && (rows != 1 || n != 896) {
					continue
				}
				name := fmt.Sprintf("n%d/rows%d/noweight=%v", n, rows, noW)
				x := rsRandF32(rng, n*rows, 2)
				var w []float32
				if !noW {
					w = rsRandF32(rng, n, 1)
				}
				got := make([]float32, n*rows)
				err := ms.dev.Do(func() error {
					up := ms.uploads()
					dx := up.f32(x)
					dw := up.optF32(w)
					dy := up.zeros(4 * n * rows)
					if up.err != nil {
						return up.err
					}
					if err := ms.s.MemsetD8(dy, 0xff, uint64(4*n*rows)); err != nil {
						return err
					}
					if err := ms.k.RmsNorm(ms.s, dy, dx, dw, rows, n, eps); err != nil {
						return err
					}
					yb := make([]byte, 4*n*rows)
					if err := ms.s.CopyDtoH(yb, dy); err != nil {
						return err
					}
					if err := ms.s.Synchronize(); err != nil {
						return err
					}
					copy(got, mmtFloats(yb))
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				old := rsOldRmsNorm(x, w, n, eps)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(old[i]) {
						t.Errorf("%s: y[%d] (row %d) = %v, old kernel %v (bitwise)", name, i, i/n, got[i], old[i])
						break
					}
				}
				if w == nil {
					continue
				}
				cpuY := rsCPURmsNorm(x, w, n, eps)
				worst, at := 0.0, 0
				for i := range cpuY {
					d := math.Abs(float64(got[i])-float64(cpuY[i])) / math.Max(1, math.Abs(float64(cpuY[i])))
					if d > worst || math.IsNaN(d) {
						worst, at = d, i
					}
				}
				t.Logf("%s: max |diff| vs cpu %.3g at %d", name, worst, at)
				if worst > 1e-4 || math.IsNaN(worst) {
					t.Errorf("%s: max |diff| vs cpu %g at %d (device %v, cpu %v)", name, worst, at, got[at], cpuY[at])
				}
			}
		}
	}
}

// TestWholeModel_FusedQkvRopeStoreMatchesUnfusedWithin1e3: qwen2 (q, k, v
// biases: the pattern fuses; qwen3's qk_norm keeps it from fusing) prefill
// and 8 decode steps, CUDA graphs on (captured at the 3rd decode, so the
// fused node also replays with fresh positions and window), with the fusion
// (MINFER_NO_FUSE_QKV=0) against without (=1), for f32, f16 and q8_0 KV:
// every step's logits within 1e-3 of the largest unfused logit. The
// arithmetic is the same, so the diff is expected to be 0; it is logged.
// Graphs are pinned on (dsGraphsOn) in the fused engine, whose replays are
// counted.
func TestWholeModel_FusedQkvRopeStoreMatchesUnfusedWithin1e3(t *testing.T) {
	dsNeedDevice(t)
	for _, m := range []struct{ shape, typ, cache string }{
		{"qwen2-tiny", "Q8_0", "f32"}, {"qwen2-tiny", "F16", "f16"}, {"qwen2-tiny", "Q4_K_M", "q8_0"},
		{"qwen2-0.5b", "Q8_0", "f32"},
	} {
		t.Run(m.shape+"/"+m.typ+"/kv_"+m.cache, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			fused := dsEngine(t, path, "cuda", 128, append([]string{"MINFER_NO_FUSE_QKV=0", "MINFER_CACHE_TYPE=" + m.cache}, dsGraphsOn...)...)
			unfused := dsEngine(t, path, "cuda", 128, "MINFER_NO_FUSE_QKV=1", "MINFER_CACHE_TYPE="+m.cache)
			got, want := dsSteps(t, fused, 8), dsSteps(t, unfused, 8)
			for i := range want {
				d := dsLogitDiff(got[i], want[i])
				bitwise := true
				for j := range want[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						bitwise = false
						break
					}
				}
				t.Logf("step %d: relative logit diff %.3g (bitwise equal: %v)", i, d, bitwise)
				if d > 1e-3 || math.IsNaN(d) {
					t.Errorf("step %d: fused vs unfused relative logit diff %.3g > 1e-3", i, d)
				}
			}
			if st := dsDeviceBackend(t, fused).CaptureStats(); st.Replays < 1 {
				t.Errorf("fused engine: no graph replay (%+v)", st)
			}
		})
	}
}

// TestCensus_QwenDecodeRunsFusedQkvRopeStoreOnlyWithTheLeverOff: liveness.
// With MINFER_NO_FUSE_QKV unset a qwen2 run (prefill + decodes) launches
// minfer_qkv_rope_store and never minfer_rope_f32 or minfer_kv_store, and
// one replayed decode step adds exactly n_layer fused launches; with
// MINFER_NO_FUSE_QKV=1 the step adds 2*n_layer rope and 2*n_layer kv_store
// launches and the fused kernel never runs. (dsReplayedStepCensus pins
// graphs on.)
func TestCensus_QwenDecodeRunsFusedQkvRopeStoreOnlyWithTheLeverOff(t *testing.T) {
	dsNeedDevice(t)
	const nLayer = 2 // qwen2-tiny
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	for _, lever := range []string{"0", "1"} {
		c1, c2, b := dsReplayedStepCensus(t, path, "MINFER_NO_FUSE_QKV="+lever)
		step := func(name string) int64 { return c2[name] - c1[name] }
		t.Logf("MINFER_NO_FUSE_QKV=%s: one decode step: qkv_rope_store %d, rope %d, kv_store %d; whole run: %d, %d, %d",
			lever, step("minfer_qkv_rope_store"), step("minfer_rope_f32"), step("minfer_kv_store"),
			c2["minfer_qkv_rope_store"], c2["minfer_rope_f32"], c2["minfer_kv_store"])
		if b.CaptureStats().Replays < 1 {
			t.Errorf("MINFER_NO_FUSE_QKV=%s: the decode step was not replayed: %+v", lever, b.CaptureStats())
		}
		if lever == "0" {
			if step("minfer_qkv_rope_store") != nLayer || c2["minfer_rope_f32"] != 0 || c2["minfer_kv_store"] != 0 {
				t.Errorf("fusion on: one step ran %d fused launches (want %d); the run ran %d rope and %d kv_store launches (want 0)",
					step("minfer_qkv_rope_store"), nLayer, c2["minfer_rope_f32"], c2["minfer_kv_store"])
			}
			continue
		}
		if c2["minfer_qkv_rope_store"] != 0 || step("minfer_rope_f32") != 2*nLayer || step("minfer_kv_store") != 2*nLayer {
			t.Errorf("MINFER_NO_FUSE_QKV=1: %d fused launches (want 0); one step ran %d rope and %d kv_store launches (want %d each)",
				c2["minfer_qkv_rope_store"], step("minfer_rope_f32"), step("minfer_kv_store"), 2*nLayer)
		}
	}
}

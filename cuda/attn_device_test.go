package cuda

// The helpers of the split-K decode attention tests
// (attn_decode2_device_test.go): a port of engine/cpu's attention, device
// regions of every KV format, kernel-level shapes and a backend run against
// the engine/cpu backend across graph replays. (The tests of the v1 split-K
// kernel went with it: MINFER_ATTN_DECODE_V2 retired.)

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// adRef is engine/cpu's attnJob (engine/cpu/attn.go) over f32 K/V rows
// (kv.LoadRow of the region bytes), step for step: f32 dot in d order,
// scale, max-subtracted exp in double rounded to f32, sum in cell order,
// p = e / sum, out += p * v in cell order.
func adRef(q, kf, vf []float32, rl, hd, nh, nkv, nt, start, window int, scale float32) []float32 {
	y := make([]float32, len(q))
	group := nh / nkv
	var wg sync.WaitGroup
	for task := range nt * nh { // tasks are independent, as in the CPU's pool
		wg.Go(func() { adRefTask(q, kf, vf, y, task, rl, hd, nh, group, start, window, scale) })
	}
	wg.Wait()
	return y
}

// adRefTask is one (token, head) of adRef.
func adRefTask(q, kf, vf, y []float32, task, rl, hd, nh, group, start, window int, scale float32) {
	t, h := task/nh, task%nh
	kvh := h / group
	cell := start + t
	first := 0
	if window > 0 {
		first = max(0, cell-window+1)
	}
	qq := q[task*hd : (task+1)*hd]
	sc := make([]float32, cell+1-first)
	mx := float32(math.Inf(-1))
	for i := range sc {
		o := (first+i)*rl + kvh*hd
		var s float32
		for d, qv := range qq {
			s += float32(qv * kf[o+d])
		}
		s *= scale
		sc[i] = s
		mx = max(mx, s)
	}
	var sum float32
	for i, s := range sc {
		e := float32(math.Exp(float64(s - mx)))
		sc[i] = e
		sum += e
	}
	inv := 1 / sum
	out := y[task*hd : (task+1)*hd]
	for i, e := range sc {
		p := e * inv
		o := (first+i)*rl + kvh*hd
		for d := range out {
			out[d] += float32(p * vf[o+d])
		}
	}
}

// adWorst returns the largest |got - want| / max(1, |want|) and where; a
// NaN on one side only is infinitely bad.
func adWorst(got, want []float32) (float64, int) {
	worst, at := 0.0, -1
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		var d float64
		switch {
		case math.IsNaN(g) && math.IsNaN(w):
			continue
		case math.IsNaN(g) || math.IsNaN(w):
			d = math.Inf(1)
		default:
			d = math.Abs(g-w) / math.Max(1, math.Abs(w))
		}
		if d > worst || at < 0 {
			worst, at = d, i
		}
	}
	return worst, at
}

// adRegion is one KV side: the region bytes and their f32 expansion.
type adRegion struct {
	bytes []byte
	f32   []float32
	dev   driver.DevicePtr
}

func adFill(r *rand.Rand, f kv.Format, nCtx, rl int) adRegion {
	rb := kv.RowBytes(f, rl)
	reg := adRegion{bytes: make([]byte, rb*nCtx), f32: make([]float32, rl*nCtx)}
	row := make([]float32, rl)
	for c := range nCtx {
		for i := range row {
			row[i] = float32(r.NormFloat64())
		}
		kv.StoreRow(f, reg.bytes[c*rb:(c+1)*rb], row)
		kv.LoadRow(f, reg.bytes[c*rb:(c+1)*rb], reg.f32[c*rl:(c+1)*rl])
	}
	return reg
}

// adKernel is one decode attention kernel family under test: its scratch
// size, its launcher and the size of its completion-counter section.
type adKernel struct {
	name         string
	scratchBytes func(AttnParams, kv.Format) (int, error)
	launch       func(k *Kernels, s *driver.Stream, out, q, kr, vr driver.DevicePtr, f kv.Format, win, scr driver.DevicePtr, scrB int, p AttnParams) error
	counterBytes func(AttnParams, kv.Format) uint64
	bar          float64 // max|diff| against adRef (0: 1e-3)
}

// within is the kernel's bar against adRef.
func (k adKernel) within() float64 {
	if k.bar == 0 {
		return 1e-3
	}
	return k.bar
}

// adShape is one kernel-level shape with its device buffers.
type adShape struct {
	ms          *mmtSession
	kern        adKernel
	f           kv.Format
	k, v        adRegion
	p           AttnParams // NT set per call
	rl          int
	scratch     driver.DevicePtr
	scratchB    int
	q, out, win driver.DevicePtr
}

func adOpenKernelShape(t *testing.T, ms *mmtSession, kern adKernel, f kv.Format, k, v adRegion, nh, nkv, hd, nCtx int) *adShape {
	t.Helper()
	sh := &adShape{ms: ms, kern: kern, f: f, k: k, v: v, rl: nkv * hd,
		p: AttnParams{NT: 1, NHead: nh, NHeadKV: nkv, HeadDim: hd, NCtx: nCtx}}
	sb, err := kern.scratchBytes(sh.p, f)
	if err != nil {
		t.Fatal(err)
	}
	sh.scratchB = sb
	err = ms.dev.Do(func() error {
		up := ms.uploads()
		sh.scratch = up.bytes(make([]byte, sb)) // zeroed, as the backend does
		sh.q = up.zeros(4 * hd * nh * AttnDecodeMaxNT)
		sh.out = up.zeros(4 * hd * nh * AttnDecodeMaxNT)
		sh.win = up.zeros(8)
		return up.err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

// run launches the shape's kernel for nt tokens at start (window w) with
// query q and returns the output; the output buffer is NaN-filled first so
// an unwritten row fails.
func (sh *adShape) run(t *testing.T, q []float32, nt, start, w int) []float32 {
	t.Helper()
	p := sh.p
	p.NT, p.Window = nt, w
	out := make([]byte, 4*len(q))
	winb := make([]byte, 8)
	binary.LittleEndian.PutUint32(winb, uint32(int32(start)))
	binary.LittleEndian.PutUint32(winb[4:], uint32(int32(start+nt)))
	ms := sh.ms
	err := ms.dev.Do(func() error {
		if err := ms.s.CopyHtoD(sh.q, driver.Float32Bytes(q)); err != nil {
			return err
		}
		if err := ms.s.CopyHtoD(sh.win, winb); err != nil {
			return err
		}
		if err := ms.s.MemsetD8(sh.out, 0xff, uint64(len(out))); err != nil {
			return err
		}
		if err := sh.kern.launch(ms.k, ms.s, sh.out, sh.q, sh.k.dev, sh.v.dev, sh.f, sh.win, sh.scratch, sh.scratchB, p); err != nil {
			return err
		}
		return ms.downloadSync(mmtD2H{out, sh.out})
	})
	if err != nil {
		t.Fatalf("%s %+v start %d: %v", sh.kern.name, p, start, err)
	}
	return mmtFloats(out)
}

// counters reads the scratch's counter section (every launch must leave it 0).
func (sh *adShape) counters(t *testing.T) []int32 {
	t.Helper()
	b := make([]byte, sh.kern.counterBytes(AttnParams{NT: AttnDecodeMaxNT, NHead: sh.p.NHead, NHeadKV: sh.p.NHeadKV, HeadDim: sh.p.HeadDim, NCtx: sh.p.NCtx}, sh.f))
	if len(b) == 0 { // a kernel without completion counters
		return nil
	}
	err := sh.ms.dev.Do(func() error {
		if err := sh.ms.s.CopyDtoH(b, sh.scratch); err != nil {
			return err
		}
		return sh.ms.s.Synchronize()
	})
	if err != nil {
		t.Fatal(err)
	}
	c := make([]int32, len(b)/4)
	for i := range c {
		c[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return c
}

// check runs one case and compares it to adRef.
func (sh *adShape) check(t *testing.T, r *rand.Rand, nt, start, w int, qScale float64, worst *float64, worstAt *string) {
	t.Helper()
	p := sh.p
	q := dsRand(r, p.HeadDim*p.NHead*nt, qScale)
	got := sh.run(t, q, nt, start, w)
	want := adRef(q, sh.k.f32, sh.v.f32, sh.rl, p.HeadDim, p.NHead, p.NHeadKV, nt, start, w, attnScale(p))
	d, at := adWorst(got, want)
	name := fmt.Sprintf("%s hd%d %d/%d heads nt%d start%d window%d", sh.f, p.HeadDim, p.NHead, p.NHeadKV, nt, start, w)
	if d > sh.kern.within() {
		task, e := at/p.HeadDim, at%p.HeadDim
		t.Errorf("%s: max|diff| %g at token %d head %d elem %d (got %v, cpu %v)", name, d, task/p.NHead, task%p.NHead, e, got[at], want[at])
	}
	if d > *worst {
		*worst, *worstAt = d, name
	}
}

// zeroCounters fails the test unless every completion counter is back at 0.
func (sh *adShape) zeroCounters(t *testing.T, what string) {
	t.Helper()
	for i, c := range sh.counters(t) {
		if c != 0 {
			t.Fatalf("%s: completion counter %d is %d after the launches, want 0", what, i, c)
		}
	}
}

// adSweepFormats checks kern against adRef for every KV format, head_dim 64
// and 128, GQA groups 1/4/7/8 of nkv KV heads, each window, nt = 1 at every
// length and nt 2..8 at four starts; then reruns one query at other starts
// on the same buffers (replay-like), requires a repeated launch to give the
// same bits, and the completion counters to be back at 0.
func adSweepFormats(t *testing.T, ms *mmtSession, r *rand.Rand, kern adKernel, nkv, nCtx int, lengths, windows []int) {
	t.Helper()
	worst, worstAt := 0.0, ""
	for _, f := range kv.Formats() {
		for _, hd := range []int{64, 128} {
			rl := nkv * hd
			k, v := adFill(r, f, nCtx, rl), adFill(r, f, nCtx, rl)
			adUpload(t, ms, &k, &v)
			for _, g := range []int{1, 4, 7, 8} {
				sh := adOpenKernelShape(t, ms, kern, f, k, v, g*nkv, nkv, hd, nCtx)
				for _, w := range windows {
					for _, L := range lengths {
						sh.check(t, r, 1, L-1, w, 1+2*r.Float64(), &worst, &worstAt)
					}
					for nt := 2; nt <= AttnDecodeMaxNT; nt++ {
						for _, start := range []int{0, 62, 999, nCtx - nt} {
							sh.check(t, r, nt, start, w, 1+2*r.Float64(), &worst, &worstAt)
						}
					}
				}
				// Replay-like: the same buffers, only the window changes; each
				// launch repeated gives the same bits.
				q := dsRand(r, hd*g*nkv, 2)
				for _, start := range []int{700, 3000, 5, 4000} {
					got := sh.run(t, q, 1, start, 0)
					want := adRef(q, k.f32, v.f32, rl, hd, g*nkv, nkv, 1, start, 0, attnScale(sh.p))
					if d, at := adWorst(got, want); d > kern.within() {
						t.Errorf("%s hd%d G%d: rerun at start %d: max|diff| %g at %d", f, hd, g, start, d, at)
					}
					again := sh.run(t, q, 1, start, 0)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(again[i]) {
							t.Errorf("%s hd%d G%d start %d: a repeated launch differs at %d: %v then %v", f, hd, g, start, i, got[i], again[i])
							break
						}
					}
				}
				sh.zeroCounters(t, fmt.Sprintf("%s hd%d G%d", f, hd, g))
			}
		}
	}
	t.Logf("worst max|diff| %g (%s)", worst, worstAt)
}

// adUpload puts both regions on the device.
func adUpload(t *testing.T, ms *mmtSession, k, v *adRegion) {
	t.Helper()
	err := ms.dev.Do(func() error {
		var err error
		if k.dev, err = ms.upload(k.bytes); err != nil {
			return err
		}
		v.dev, err = ms.upload(v.bytes)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// adGraph is one compiled attention graph on one backend: the decode step
// (store nt rows of k and v, attend) or the fill (store nt rows).
type adGraph struct {
	pl  *graph.Plan
	g   *graph.Graph
	nt  int
	out int
}

// adBuild compiles a graph over the q/k/v weights (rows picked by the
// token ids): fill = store only (output: the K region), else store and
// attend (output: attention).
func adBuild(t *testing.T, be graph.Backend, name string, nt, nCtx, hd, nh, nkv, window int, fill bool) *adGraph {
	t.Helper()
	rl := nkv * hd
	b := graph.NewBuilder(graph.Params{Arch: "test:" + name, NT: nt, NCtx: nCtx})
	ids := b.Input(graph.InputTokens, "ids")
	b.Input(graph.InputPositions, "pos")
	kvw := b.Input(graph.InputKVWindow, "kvw")
	sk := b.KvcacheStore("sk", b.GetRows("k", "k", rl, ids), kvw, 0, graph.SideK)
	sv := b.KvcacheStore("sv", b.GetRows("v", "v", rl, ids), kvw, 0, graph.SideV)
	if fill {
		b.Output(b.KvcacheLoad("y", kvw, 0, graph.SideK, rl, sk, sv))
	} else {
		qq := b.Reshape("q3", b.GetRows("q", "q", hd*nh, ids), graph.Sh(hd, nh, nt))
		b.Output(b.Attn("y", qq, kvw, 0, nkv, window, sk, sv))
	}
	g, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	pl, err := graph.Compile(g, []graph.Backend{be})
	if err != nil {
		t.Fatalf("%s on %s: %v", name, be.Name(), err)
	}
	t.Cleanup(func() { pl.Close() })
	return &adGraph{pl: pl, g: g, nt: nt, out: g.Output}
}

// step runs the graph with token ids id0.. at KV start and returns its output.
func (a *adGraph) step(t *testing.T, id0, start int) []float32 {
	t.Helper()
	ids, pos := make([]int32, a.nt), make([]int32, a.nt)
	for i := range ids {
		ids[i], pos[i] = int32(id0+i), int32(start+i)
	}
	for _, w := range []struct {
		id int
		v  []int32
	}{{a.g.Tokens, ids}, {a.g.Positions, pos}, {a.g.KVWindow, []int32{int32(start), int32(start + a.nt)}}} {
		if w.id < 0 {
			continue
		}
		if err := a.pl.WriteI32(w.id, w.v); err != nil {
			t.Fatal(err)
		}
	}
	a.pl.SetKVLength(start + a.nt) // as the engine's step does (the decode route by depth)
	if err := a.pl.Run(); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, a.g.Nodes[a.out].Shape.N())
	if err := a.pl.Read(a.out, y); err != nil {
		t.Fatal(err)
	}
	return y
}

// adBackendRun fills cells [0, filled) of a 0.5b-shaped attention layer and
// then decodes: nt = 1 steps and nt = 4 steps, each at the next cells, on
// the CUDA backend (levers cfg) and the engine/cpu backend, and returns the
// worst difference and the CUDA backend.
func adBackendRun(t *testing.T, cfg levers.Config, f kv.Format, window int) (float64, *Backend) {
	t.Helper()
	const hd, nh, nkv, nCtx, filled, steps = 64, 14, 2, 700, 640, 6
	rl := nkv * hd
	r := rand.New(rand.NewPCG(67, uint64(f)))
	ws := []graph.Weight{
		dsF32Weight("q", dsRand(r, hd*nh*nCtx, 2), hd*nh, nCtx),
		dsF32Weight("k", dsRand(r, rl*nCtx, 1), rl, nCtx),
		dsF32Weight("v", dsRand(r, rl*nCtx, 1), rl, nCtx),
	}
	dev := dsBackend(t, cfg)
	host := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(func() { host.Close() })
	spec := graph.KVSpec{Format: f, NLayer: 1, NCtx: nCtx, RowLen: rl}
	for _, be := range []graph.Backend{dev, host} {
		for _, w := range ws {
			if err := be.RegisterWeight(w); err != nil {
				t.Fatal(err)
			}
		}
		if err := be.AllocKV(spec); err != nil {
			t.Fatal(err)
		}
		adBuild(t, be, "ad-fill", filled, nCtx, hd, nh, nkv, window, true).step(t, 0, 0)
	}
	worst := 0.0
	for _, nt := range []int{1, 4} {
		gd := adBuild(t, dev, fmt.Sprintf("ad-decode-%d", nt), nt, nCtx, hd, nh, nkv, window, false)
		gh := adBuild(t, host, fmt.Sprintf("ad-decode-%d", nt), nt, nCtx, hd, nh, nkv, window, false)
		for i := range steps { // runs 1, 2 direct, 3 captured, then replays
			start := filled + (nt-1)*steps + i*nt
			if nt == 1 {
				start = filled + i
			}
			got, want := gd.step(t, start, start), gh.step(t, start, start)
			d, at := adWorst(got, want)
			if d > 1e-3 {
				t.Errorf("%s nt%d window %d step %d (cell %d): max|diff| %g at %d (got %v, cpu %v)", f, nt, window, i, start, d, at, got[at], want[at])
			}
			worst = max(worst, d)
		}
	}
	return worst, dev
}

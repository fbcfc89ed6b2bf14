package cuda

// The cases and helpers of the tiled prefill attention tests
// (attn_prefill2_device_test.go), and the kill switch MINFER_NO_FA_PREFILL's
// census test. (The tests of the v1 tiled kernel went with it:
// MINFER_FA_PREFILL_V2 retired.) The device tests skip with a message when
// no device answers.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/model"
)

// fapCase is one prefill attention shape: nt queries at cells start ..
// start+nt-1 of a region of nCtx cells, over a prefix of start cells
// stored by an earlier forward.
type fapCase struct {
	nt, hd, nh, nkv, window, start, nCtx int
}

func (c fapCase) String() string {
	return fmt.Sprintf("nt%d/hd%d/heads%d-%d/win%d/start%d/ctx%d", c.nt, c.hd, c.nh, c.nkv, c.window, c.start, c.nCtx)
}

// fapCases: nt 9, 64, 65, 512, 1000, 4096; head_dim 64 and 128 (and 80, 48:
// the zero-padded variants); GQA ratios 1, 2, 3, 4, 7, 8; window 0 and a
// sliding window below nt; start 0, start > 0 (prefill after a cached
// prefix) and a chunk ending at the last cell of the region.
var fapCases = []fapCase{
	{nt: 9, hd: 64, nh: 14, nkv: 2, nCtx: 64},
	{nt: 64, hd: 128, nh: 16, nkv: 8, nCtx: 128},
	{nt: 65, hd: 64, nh: 8, nkv: 1, start: 5, nCtx: 128},
	{nt: 512, hd: 64, nh: 14, nkv: 2, nCtx: 512},
	{nt: 512, hd: 128, nh: 28, nkv: 4, nCtx: 1024},
	{nt: 1000, hd: 128, nh: 2, nkv: 2, nCtx: 1024},
	{nt: 1000, hd: 64, nh: 14, nkv: 2, start: 24, nCtx: 1024},
	{nt: 100, hd: 64, nh: 14, nkv: 2, window: 37, nCtx: 128},
	{nt: 300, hd: 128, nh: 16, nkv: 8, window: 100, start: 200, nCtx: 512},
	{nt: 65, hd: 128, nh: 8, nkv: 1, start: 700, nCtx: 1024},
	{nt: 64, hd: 64, nh: 4, nkv: 2, start: 1000 - 64, nCtx: 1000},
	{nt: 9, hd: 128, nh: 7, nkv: 1, window: 5, start: 3, nCtx: 64},
	{nt: 70, hd: 80, nh: 8, nkv: 2, start: 10, nCtx: 128},
	{nt: 33, hd: 48, nh: 6, nkv: 2, window: 20, nCtx: 64},
	{nt: 4096, hd: 64, nh: 2, nkv: 1, nCtx: 4096},
}

// fapData is one case's operands: the prefix rows, the chunk's q, k, v.
type fapData struct {
	pk, pv, q, k, v []float32
}

func fapMake(r *rand.Rand, c fapCase) fapData {
	rl := c.nkv * c.hd
	return fapData{
		pk: dsRand(r, rl*c.start, 1), pv: dsRand(r, rl*c.start, 1),
		q: dsRand(r, c.hd*c.nh*c.nt, 1.5), k: dsRand(r, rl*c.nt, 1), v: dsRand(r, rl*c.nt, 1),
	}
}

// fapGraphs runs the case on one backend: a first forward stores the
// prefix (cells 0 .. start-1), the second stores the chunk and attends.
func fapGraphs(t *testing.T, be graph.Backend, f kv.Format, c fapCase, d fapData) ([]float32, error) {
	t.Helper()
	rl := c.nkv * c.hd
	spec := &graph.KVSpec{Format: f, NLayer: 1, NCtx: c.nCtx, RowLen: rl}
	if c.start > 0 {
		pre := dsCase{name: "prefix", nt: c.start, nCtx: c.nCtx, kv: spec,
			weights: []graph.Weight{dsF32Weight("pk", d.pk, rl, c.start), dsF32Weight("pv", d.pv, rl, c.start)}}
		pre.build = func(b *graph.Builder, ids, pos, kvw int) int {
			sk := b.KvcacheStore("sk", b.GetRows("pk", "pk", rl, ids), kvw, 0, graph.SideK)
			sv := b.KvcacheStore("sv", b.GetRows("pv", "pv", rl, ids), kvw, 0, graph.SideV)
			return b.KvcacheLoad("ld", kvw, 0, graph.SideK, rl, sk, sv)
		}
		if _, err := dsRun(t, pre, be); err != nil {
			return nil, fmt.Errorf("prefix: %w", err)
		}
		spec = nil // allocated by the prefix forward
	}
	main := dsCase{name: "chunk", nt: c.nt, nCtx: c.nCtx, kv: spec, start: c.start,
		weights: []graph.Weight{dsF32Weight("q", d.q, c.hd*c.nh, c.nt), dsF32Weight("k", d.k, rl, c.nt), dsF32Weight("v", d.v, rl, c.nt)}}
	main.build = func(b *graph.Builder, ids, pos, kvw int) int {
		sk := b.KvcacheStore("sk", b.GetRows("k", "k", rl, ids), kvw, 0, graph.SideK)
		sv := b.KvcacheStore("sv", b.GetRows("v", "v", rl, ids), kvw, 0, graph.SideV)
		qq := b.Reshape("q3", b.GetRows("q", "q", c.hd*c.nh, ids), graph.Sh(c.hd, c.nh, c.nt))
		return b.Attn("y", qq, kvw, 0, c.nkv, c.window, sk, sv)
	}
	return dsRun(t, main, be)
}

// fapWorst is the largest |got - want| and where it is (NaN placement must
// agree).
type fapWorst struct {
	diff        float64
	t, h, d     int
	got, want   float32
	nanMismatch int
}

func (w fapWorst) String() string {
	return fmt.Sprintf("max|diff| %.3g at token %d head %d dim %d (got %v, want %v)", w.diff, w.t, w.h, w.d, w.got, w.want)
}

// fapSweep runs every KV format and fapCases shape through the CPU
// attention and a device backend with the levers env (the launch census
// on), and hands each case's comparison and the device to check.
func fapSweep(t *testing.T, seed uint64, env []string, check func(t *testing.T, dev *Backend, c fapCase, w fapWorst)) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	for _, f := range kv.Formats() {
		for _, c := range fapCases {
			d := fapMake(r, c)
			t.Run(fmt.Sprintf("%s/%s", f, c), func(t *testing.T) {
				host := cpu.New(cpu.Options{Threads: runtime.NumCPU()})
				defer host.Close()
				want, err := fapGraphs(t, host, f, c, d)
				if err != nil {
					t.Fatalf("cpu: %v", err)
				}
				// The sweep is of the tiled kernels: MINFER_NO_FA_PREFILL is
				// pinned off (an A/B's arm B may set it for the suite gate).
				dev := dsBackend(t, dsLevers(t, append([]string{"MINFER_LAUNCH_CENSUS=1", "MINFER_NO_FA_PREFILL=0"}, env...)...))
				got, err := fapGraphs(t, dev, f, c, d)
				if err != nil {
					t.Fatalf("cuda: %v", err)
				}
				check(t, dev, c, fapCompare(got, want, c.hd, c.nh))
			})
		}
	}
}

func fapCompare(got, want []float32, hd, nh int) fapWorst {
	var w fapWorst
	for i := range want {
		g, x := got[i], want[i]
		gn, xn := math.IsNaN(float64(g)), math.IsNaN(float64(x))
		if gn != xn {
			w.nanMismatch++
			continue
		}
		if gn {
			continue
		}
		if d := math.Abs(float64(g) - float64(x)); d > w.diff || math.IsInf(d, 0) {
			w.diff, w.got, w.want = d, g, x
			w.t, w.h, w.d = i/(hd*nh), i/hd%nh, i%hd
		}
	}
	return w
}

// fapDirect is one direct-launch session: random K / V regions of nCtx
// cells in format, a q of nt tokens and the window buffer.
type fapDirect struct {
	ms             *mmtSession
	kr, vr, q, win driver.DevicePtr
	p              AttnParams
	f              kv.Format
}

func fapDirectOpen(t *testing.T, r *rand.Rand, f kv.Format, p AttnParams) *fapDirect {
	t.Helper()
	ms := mmtOpen(t)
	rl := p.NHeadKV * p.HeadDim
	rb := kv.RowBytes(f, rl)
	region := func() []byte {
		b := make([]byte, rb*p.NCtx)
		for c := range p.NCtx {
			kv.StoreRow(f, b[c*rb:(c+1)*rb], dsRand(r, rl, 1))
		}
		return b
	}
	fd := &fapDirect{ms: ms, p: p, f: f}
	err := ms.dev.Do(func() error {
		var err error
		if fd.kr, err = ms.upload(region()); err != nil {
			return err
		}
		if fd.vr, err = ms.upload(region()); err != nil {
			return err
		}
		if fd.q, err = ms.upload(driver.Float32Bytes(dsRand(r, p.HeadDim*p.NHead*p.NT, 1.5))); err != nil {
			return err
		}
		fd.win, err = ms.upload(make([]byte, 8))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestAttnPrefillDevice_CensusNamesKernelUnlessLeverOff: a prefill forward
// (24 tokens) with the backend's census on runs the tiled kernel for every
// layer's attention and never the plain one; with MINFER_NO_FA_PREFILL=1
// it is the other way round. The two forwards' logits agree within 1e-3
// of the largest logit, and the lever-off one matches the CPU as well.
// MINFER_FA_PREFILL_TC is pinned off: this is the v2 kernel's switch and
// 1e-3 bar (the tensor-core kernel's census test is its own).
func TestAttnPrefillDevice_CensusNamesKernelUnlessLeverOff(t *testing.T) {
	dsNeedDevice(t)
	prompt := make([]int32, 24)
	for i := range prompt {
		prompt[i] = int32(7 + 13*i%400)
	}
	for _, m := range []struct{ shape, typ string }{{"qwen2-tiny", "F32"}, {"qwen3-tiny", "F16"}} {
		t.Run(m.shape, func(t *testing.T) {
			path := dsSynth(t, m.shape, m.typ)
			logits := map[string][]float32{}
			for _, lever := range []string{"0", "1"} {
				e := dsEngine(t, path, "cuda", 128, "MINFER_LAUNCH_CENSUS=1", "MINFER_FA_PREFILL_TC=0", "MINFER_NO_FA_PREFILL="+lever)
				y, err := e.Forward(prompt, false)
				if err != nil {
					t.Fatal(err)
				}
				logits[lever] = y
				census := dsDeviceBackend(t, e).Kernels().Census()
				fa := int64(0)
				for name, n := range census {
					if strings.HasPrefix(name, "minfer_attn_prefill2_") {
						fa += n
					}
				}
				plain := census["minfer_attn_f32"]
				t.Logf("MINFER_NO_FA_PREFILL=%s: tiled prefill launches %d, plain %d", lever, fa, plain)
				if lever == "0" && (fa < 1 || plain != 0) {
					t.Errorf("lever off: tiled launches %d, plain %d (want >= 1 and 0)", fa, plain)
				}
				if lever == "1" && (fa != 0 || plain < 1) {
					t.Errorf("lever on: tiled launches %d, plain %d (want 0 and >= 1)", fa, plain)
				}
			}
			host := dsEngine(t, path, "cpu", 128)
			want, err := host.Forward(prompt, false)
			if err != nil {
				t.Fatal(err)
			}
			dFA, dPlain, dCPU := dsLogitDiff(logits["0"], logits["1"]), dsLogitDiff(logits["1"], want), dsLogitDiff(logits["0"], want)
			t.Logf("relative logit diff: tiled vs plain %.3g, plain vs cpu %.3g, tiled vs cpu %.3g", dFA, dPlain, dCPU)
			if dFA > 1e-3 || dCPU > 1e-3 {
				t.Errorf("relative logit diff tiled vs plain %.3g, tiled vs cpu %.3g: above 1e-3", dFA, dCPU)
			}
		})
	}
}

// fapCaptureReplayAtMovingStarts runs the chunks with the prefill kernel
// the lever setting selects (its launches named by prefix), direct and with
// graphs, and requires captures, replays, launches of that kernel and
// bitwise equal logits. The graph arm pins graphs and prefill capture on
// (an A/B's arm B may turn either off).
func fapCaptureReplayAtMovingStarts(t *testing.T, lever, prefix string) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "F32")
	run := func(e *model.Engine) [][]float32 {
		if _, err := e.Forward(dsPrompt[:5], false); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for i := range 5 {
			chunk := make([]int32, 24)
			for j := range chunk {
				chunk[j] = int32(300 + 5*j + 11*i)
			}
			l, err := e.Forward(chunk, false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	direct := run(dsEngine(t, path, "cuda", 128, "MINFER_NO_CUDA_GRAPH=1", lever))
	e := dsEngine(t, path, "cuda", 128, lever, "MINFER_LAUNCH_CENSUS=1", "MINFER_NO_CUDA_GRAPH=0", "MINFER_NO_PREFILL_CAPTURE=0")
	graphs := run(e)
	b := dsDeviceBackend(t, e)
	st := b.CaptureStats()
	t.Logf("%s: capture stats: %+v", lever, st)
	if st.Captures < 1 || st.Replays < 2 {
		t.Errorf("captures %d, replays %d: want the 24-token chunk captured and replayed twice", st.Captures, st.Replays)
	}
	if fapCensus(b.Kernels().Census(), prefix) == 0 {
		t.Errorf("no %s* launch: the chunks did not take the path under test", prefix)
	}
	dsBitwise(t, lever+": prefill graphs vs direct", graphs, direct)
}

// fapCensus sums the launches of the kernels whose names start with prefix.
func fapCensus(census map[string]int64, prefix string) int64 {
	n := int64(0)
	for name, c := range census {
		if strings.HasPrefix(name, prefix) {
			n += c
		}
	}
	return n
}

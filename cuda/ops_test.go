package cuda

import (
	"math"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// The launchers check their arguments before touching the module, so a
// Kernels without one is enough to see every refusal (no device needed).
func TestOpsLaunchers_RefuseBadArgumentsNamingTheOp(t *testing.T) {
	k := &Kernels{}
	var s *driver.Stream
	const p = driver.DevicePtr(0x1000)
	attn := func(a AttnParams, f kv.Format) error { return k.Attention(s, p, p, p, p, f, p, a) }
	good := AttnParams{NT: 1, NHead: 14, NHeadKV: 2, HeadDim: 64, NCtx: 128}
	with := func(f func(*AttnParams)) AttnParams { a := good; f(&a); return a }
	cases := []struct {
		name, op, want string
		err            error
	}{
		{"head_dim above 128", "attn", "head_dim 130", attn(with(func(a *AttnParams) { a.HeadDim = 130 }), kv.F16)},
		{"odd head_dim", "attn", "head_dim 63", attn(with(func(a *AttnParams) { a.HeadDim = 63 }), kv.F32)},
		{"heads not a multiple of kv heads", "attn", "14 heads over 3", attn(with(func(a *AttnParams) { a.NHeadKV = 3 }), kv.F32)},
		{"no tokens", "attn", "0 tokens", attn(with(func(a *AttnParams) { a.NT = 0 }), kv.F32)},
		{"more tokens than cells", "attn", "129 tokens for 128 cells", attn(with(func(a *AttnParams) { a.NT = 129 }), kv.F32)},
		{"q8_0 row not whole blocks", "attn", "multiple of 32", attn(with(func(a *AttnParams) { a.NHeadKV = 1; a.NHead = 1; a.HeadDim = 48 }), kv.Q8_0)},
		{"bad kv format", "attn", "KV format", attn(good, kv.Format(7))},
		{"rms_norm no rows", "rms_norm", "0 rows", k.RmsNorm(s, p, p, p, 0, 64, 1e-6)},
		{"rms_norm empty rows", "rms_norm", "rows of 0", k.RmsNorm(s, p, p, 0, 4, 0, 1e-6)},
		{"rms_norm negative eps", "rms_norm", "eps", k.RmsNorm(s, p, p, 0, 4, 64, -1)},
		{"softmax no rows", "softmax", "-1 rows", k.SoftmaxRows(s, p, p, -1, 8, 1)},
		{"add nothing", "add", "0 elements", k.Add(s, p, p, p, 0)},
		{"mul negative", "mul", "-3 elements", k.Mul(s, p, p, p, -3)},
		{"silu nothing", "silu", "0 elements", k.Silu(s, p, p, 0)},
		{"swiglu nothing", "swiglu", "0 elements", k.SwiGLU(s, p, p, p, 0)},
		{"scale nothing", "scale", "0 elements", k.Scale(s, p, p, 2, 0)},
		{"copy nothing", "copy", "0 elements", k.Copy(s, p, p, 0)},
		{"add_bias no rows", "add_bias", "0 rows", k.AddBias(s, p, p, p, 0, 8)},
		{"mul_rows no rows", "mul_rows", "0 rows", k.MulRows(s, p, p, p, 0, 8)},
		{"rope odd head_dim", "rope", "head_dim 63", k.Rope(s, p, p, p, 1, 2, 63, 63, 1e6, true)},
		{"rope n_rot above head_dim", "rope", "n_rot 130", k.Rope(s, p, p, p, 1, 2, 128, 130, 1e6, true)},
		{"rope bad theta", "rope", "theta", k.Rope(s, p, p, p, 1, 2, 128, 128, 0, false)},
		{"rope no tokens", "rope", "0 rows", k.Rope(s, p, p, p, 0, 2, 128, 128, 1e6, true)},
		{"get_rows partial block", "get_rows", "whole number", k.GetRows(s, p, p, quant.Q4_K, 10, p, 1, 100)},
		{"get_rows unknown type", "get_rows", "no device decoder", k.GetRows(s, p, p, quant.Q2_K, 10, p, 1, 256)},
		{"get_rows no weight rows", "get_rows", "weight of 0 rows", k.GetRows(s, p, p, quant.F32, 0, p, 1, 256)},
		{"kv_store q8_0 row", "kv_store", "multiple of 32", k.KVStore(s, p, kv.Q8_0, p, p, 1, 40, 16)},
		{"kv_store too many tokens", "kv_store", "17 tokens for 16 cells", k.KVStore(s, p, kv.F16, p, p, 17, 64, 16)},
		{"kv_load no cells", "kv_load", "in 0 cells", k.KVLoad(s, p, p, kv.F32, p, 64, 0)},
		{"kv_move out of range", "kv_move", "out of range of 16 cells", k.KVMove(s, p, p, kv.F32, 64, 16, 10, 0, 7)},
		{"kv_move without scratch", "kv_move", "no scratch", k.KVMove(s, p, 0, kv.F32, 64, 16, 1, 0, 3)},
		{"permute not a permutation", "permute", "not a permutation", k.Permute(s, p, p, [4]int{2, 3, 4, 1}, [4]int{0, 1, 1, 3})},
		{"permute empty dim", "permute", "shape", k.Permute(s, p, p, [4]int{2, 0, 4, 1}, [4]int{0, 1, 2, 3})},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		msg := c.err.Error()
		if !strings.HasPrefix(msg, "cuda: "+c.op+": ") || !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q, want it to name %q and say %q", c.name, msg, c.op, c.want)
		}
	}
	// Moves that move nothing launch nothing (no module here: a launch would panic).
	if err := k.KVMove(s, p, 0, kv.Q8_0, 64, 16, 3, 3, 5); err != nil {
		t.Errorf("kv_move onto itself: %v", err)
	}
	if err := k.KVMove(s, p, 0, kv.Q8_0, 64, 16, 3, 5, 0); err != nil {
		t.Errorf("kv_move of 0 cells: %v", err)
	}
}

// permuteStrides must address the input exactly as engine/cpu's permute.
func TestOpsPermuteStrides_MatchCPUIndexing(t *testing.T) {
	out := [4]int{3, 2, 4, 5}
	for _, perm := range [][4]int{{0, 1, 2, 3}, {0, 2, 1, 3}, {1, 0, 2, 3}, {2, 0, 3, 1}, {3, 2, 1, 0}} {
		st, err := permuteStrides(out, perm)
		if err != nil {
			t.Fatal(err)
		}
		var in [4]int
		for i, p := range perm {
			in[p] = out[i]
		}
		seen := map[int64]bool{}
		for i3 := 0; i3 < out[3]; i3++ {
			for i2 := 0; i2 < out[2]; i2++ {
				for i1 := 0; i1 < out[1]; i1++ {
					for i0 := 0; i0 < out[0]; i0++ {
						o := [4]int{i0, i1, i2, i3}
						var ix [4]int // input coordinates: input axis perm[i] = output coordinate i
						for i, p := range perm {
							ix[p] = o[i]
						}
						want := int64(ix[0] + in[0]*(ix[1]+in[1]*(ix[2]+in[2]*ix[3])))
						got := int64(i0)*st[0] + int64(i1)*st[1] + int64(i2)*st[2] + int64(i3)*st[3]
						if got != want {
							t.Fatalf("perm %v at %v: offset %d, want %d", perm, o, got, want)
						}
						seen[got] = true
					}
				}
			}
		}
		if len(seen) != 120 {
			t.Fatalf("perm %v: %d distinct input offsets, want 120", perm, len(seen))
		}
	}
}

func TestOpsGeometry(t *testing.T) {
	if g := opsGrid1(1); g != [3]uint32{1, 1, 1} {
		t.Errorf("grid of 1: %v", g)
	}
	if g := opsGrid1(257); g[0] != 2 {
		t.Errorf("grid of 257: %v", g)
	}
	if g := opsGrid1(1 << 40); g[0] != opsMaxBlocks {
		t.Errorf("grid of 2^40: %v", g)
	}
	for n, want := range map[int]uint32{1: 32, 33: 64, 64: 64, 128: 128, 896: 256} {
		if b := opsRowBlock(n); b[0] != want {
			t.Errorf("row block of %d: %d, want %d", n, b[0], want)
		}
	}
	if got, want := attnScale(AttnParams{HeadDim: 128}), float32(1/math.Sqrt(128)); got != want {
		t.Errorf("default scale %g, want %g", got, want)
	}
	if got := attnScale(AttnParams{HeadDim: 128, Scale: 0.5}); got != 0.5 {
		t.Errorf("explicit scale %g", got)
	}
	if got := KVMoveScratchBytes(kv.Q8_0, 128, 3); got != 3*4*34 {
		t.Errorf("q8_0 scratch %d", got)
	}
}

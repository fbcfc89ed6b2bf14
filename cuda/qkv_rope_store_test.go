package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/kv"
)

// TestQkvRopeStoreLauncher_RefusesBadArgumentsNamingTheOp: every refusal
// happens on the host, before the module is touched (a Kernels without one).
func TestQkvRopeStoreLauncher_RefusesBadArgumentsNamingTheOp(t *testing.T) {
	with := qrsWith(QkvRopeStoreParams{NT: 1, NHead: 14, NHeadKV: 2, HeadDim: 64, NRot: 64, Theta: 1e6, Neox: true, Format: kv.Q8_0, NCtx: 128})
	qrsCheckRefusals(t, "qkv_rope_store", []qrsRefusal[QkvRopeStoreParams]{
		{"no tokens", "0 tokens for 128 cells", with(func(p *QkvRopeStoreParams) { p.NT = 0 })},
		{"more tokens than cells", "129 tokens", with(func(p *QkvRopeStoreParams) { p.NT = 129 })},
		{"odd head_dim", "head_dim 63", with(func(p *QkvRopeStoreParams) { p.HeadDim, p.NRot = 63, 62 })},
		{"n_rot above head_dim", "n_rot 66", with(func(p *QkvRopeStoreParams) { p.NRot = 66 })},
		{"odd n_rot", "n_rot 31", with(func(p *QkvRopeStoreParams) { p.NRot = 31 })},
		{"no kv heads", "over 0 KV heads", with(func(p *QkvRopeStoreParams) { p.NHeadKV = 0 })},
		{"bad theta", "theta", with(func(p *QkvRopeStoreParams) { p.Theta = 0 })},
		{"q8_0 row not whole blocks", "multiple of 32", with(func(p *QkvRopeStoreParams) { p.NHeadKV, p.HeadDim, p.NRot = 1, 48, 48 })},
		{"bad format", "KV format", with(func(p *QkvRopeStoreParams) { p.Format = kv.Format(9) })},
		{"K row beyond shared memory", "shared memory", with(func(p *QkvRopeStoreParams) { p.NHeadKV, p.HeadDim, p.NRot = 128, 128, 128 })},
	}, func(k *Kernels, s *driver.Stream, p QkvRopeStoreParams) error {
		return k.QkvBiasRopeStore(s, QkvRopeStoreBuffers{}, p)
	})
}

// TestQkvRopeStoreGeometry_OnePairPerThreadAndKVBlocksFirst: blocks 0 and 1
// are the K and V rows; the q heads are grouped so that a block of 256
// threads holds one rotation pair per thread.
func TestQkvRopeStoreGeometry_OnePairPerThreadAndKVBlocksFirst(t *testing.T) {
	for _, c := range []struct {
		nt, nh, nkv, hd, nRot int
		grid                  [3]uint32
		qhpb                  int
		smem                  uint32
	}{
		{1, 14, 2, 64, 64, [3]uint32{1, 2 + 2, 1}, 8, 4 * 128},     // qwen2-0.5b decode: 4 blocks
		{64, 28, 4, 128, 128, [3]uint32{64, 2 + 7, 1}, 4, 4 * 512}, // qwen2-7b prefill
		{3, 4, 2, 128, 64, [3]uint32{3, 2 + 1, 1}, 4, 4 * 256},     // partial rotation: 32 pairs a head
		{1, 2, 1, 1024, 1024, [3]uint32{1, 2 + 2, 1}, 1, 4 * 1024}, // 512 pairs a head: one head a block, looping
	} {
		p := QkvRopeStoreParams{NT: c.nt, NHead: c.nh, NHeadKV: c.nkv, HeadDim: c.hd, NRot: c.nRot, Theta: 1e4, Format: kv.F32, NCtx: 1024}
		grid, qhpb, smem, rb, err := qkvRopeStoreGeometry(p)
		if err != nil {
			t.Fatal(err)
		}
		if grid != c.grid || qhpb != c.qhpb || smem != c.smem || rb != 4*c.nkv*c.hd {
			t.Errorf("%+v: grid %v, %d heads a block, smem %d, row bytes %d; want %v, %d, %d, %d",
				c, grid, qhpb, smem, rb, c.grid, c.qhpb, c.smem, 4*c.nkv*c.hd)
		}
	}
	for _, c := range []struct {
		nh, nRot, hpb int
		block         uint32
	}{{14, 64, 8, 256}, {2, 64, 2, 64}, {28, 128, 4, 256}, {3, 6, 3, 9}, {1, 1024, 1, 256}} {
		hpb, block := ropeGeometry(c.nh, c.nRot)
		if hpb != c.hpb || block[0] != c.block {
			t.Errorf("rope geometry of %d heads, n_rot %d: %d heads of %d threads, want %d of %d", c.nh, c.nRot, hpb, block[0], c.hpb, c.block)
		}
	}
}

// TestQkvRopeStoreSources_ShareTheRopeAndStoreHelpers: the bitwise claim
// rests on the fused kernel and the unfused kernels using the same rope
// (rope.cuh) and KV store (kvput.cuh) code.
func TestQkvRopeStoreSources_ShareTheRopeAndStoreHelpers(t *testing.T) {
	fused, rope, kvs := kernelSource(t, "qkv_rope_store.cu"), kernelSource(t, "rope.cu"), kernelSource(t, "kv.cu")
	for _, c := range []struct{ src, file, want string }{
		{fused, "qkv_rope_store.cu", "rope_angle("}, {fused, "qkv_rope_store.cu", "rope_rotate("},
		{fused, "qkv_rope_store.cu", "kv_put("}, {rope, "rope.cu", "rope_angle("},
		{rope, "rope.cu", "rope_rotate("}, {kvs, "kv.cu", "kv_put("},
	} {
		if !strings.Contains(c.src, c.want) {
			t.Errorf("%s does not call %s", c.file, c.want)
		}
	}
}

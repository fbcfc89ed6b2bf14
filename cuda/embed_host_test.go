package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

// Host tests of MINFER_EMBED_HOST's memory plan (the device side is in
// embed_host_device_test.go).

// embdBytes is the Q8_0 token-embedding table of qwen2-7b: 152064 rows of
// 3584 values, 3584 / 32 blocks of 34 bytes each (552 MiB).
const embdBytes = 152064 * 3584 / 32 * 34

// TestPlan_EmbedHostMovesOnlyTheUntiedEmbeddingOutOfDeviceMemory: on
// qwen2-7b Q8_0 (untied) the lever moves exactly the embedding table out
// of the weights, the total and the need into the host-mapped class (and
// its repacked copy, which nothing reads, is gone either way); on
// qwen2-0.5b (tied: the logits matmul reads the table) nothing moves.
func TestPlan_EmbedHostMovesOnlyTheUntiedEmbeddingOutOfDeviceMemory(t *testing.T) {
	off := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, "MINFER_MMVQ_REPACK=1", "MINFER_EMBED_HOST=0")
	on := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, "MINFER_MMVQ_REPACK=1", "MINFER_EMBED_HOST=1")
	if def := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, "MINFER_MMVQ_REPACK=1"); def != on {
		t.Errorf("the default plan differs from MINFER_EMBED_HOST=1's (on by default):\n%+v\n%+v", def, on)
	}
	if on.HostMapped != embdBytes || off.HostMapped != 0 {
		t.Errorf("host-mapped: on %d, off %d; want %d (the embedding) and 0", on.HostMapped, off.HostMapped, uint64(embdBytes))
	}
	if off.Weights-on.Weights != embdBytes || off.Total()-on.Total() != embdBytes || off.Need()-on.Need() != embdBytes {
		t.Errorf("weights %d -> %d, total %d -> %d, need %d -> %d: each should drop by the %d-byte table",
			off.Weights, on.Weights, off.Total(), on.Total(), off.Need(), on.Need(), uint64(embdBytes))
	}
	if on.Derived != off.Derived {
		t.Errorf("derived %d on, %d off: the gathered table has no repacked copy either way", on.Derived, off.Derived)
	}
	if s := on.Summary(); !strings.Contains(s, "host-mapped (host memory) 0.5") {
		t.Errorf("summary %q does not show the host-mapped table", s)
	}
	if s := on.Classes(false); strings.Contains(s, "host-mapped") {
		t.Errorf("the refusal's classes %q count host memory", s)
	}
	for _, shape := range []string{"qwen2-0.5b", "qwen3-0.6b"} {
		tied := planOf(t, shape, quant.Q8_0, 4096, kv.F16, "MINFER_EMBED_HOST=1")
		base := planOf(t, shape, quant.Q8_0, 4096, kv.F16)
		if tied.HostMapped != 0 || tied.Weights != base.Weights {
			t.Errorf("%s (tied): host-mapped %d, weights %d vs %d: a tied table must stay on the device", shape, tied.HostMapped, tied.Weights, base.Weights)
		}
	}
}

// TestPlan_GatheredEmbeddingHasNoRepackedCopy: with two copies and the
// table on the device, the untied embedding (read only by the gather, from
// its GGUF bytes) gets none: the derived class is the other Q8_0 matrices
// only.
func TestPlan_GatheredEmbeddingHasNoRepackedCopy(t *testing.T) {
	p := planOf(t, "qwen2-7b", quant.Q8_0, 4096, kv.F16, "MINFER_MMVQ_REPACK=1", "MINFER_ONE_COPY=0", "MINFER_EMBED_HOST=0")
	if p.Weights-p.Derived < embdBytes || p.Weights-p.Derived > embdBytes+8<<20 {
		t.Errorf("weights %d, derived %d: the difference should be the %d-byte embedding and the f32 vectors", p.Weights, p.Derived, uint64(embdBytes))
	}
}

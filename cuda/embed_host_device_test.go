package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
)

// Device tests of MINFER_EMBED_HOST: the gather from mapped host memory
// against the device copy, and whole-model decode with the lever on.

// TestEmbedHostDevice_GetRowsFromMappedMemoryBitwiseDeviceCopy: for every
// type the gather decodes, minfer_get_rows_host over a table in mapped host
// memory gives bitwise minfer_get_rows' rows over the same bytes on the
// device, for ids at both ends, repeated, and out of range (NaN rows).
func TestEmbedHostDevice_GetRowsFromMappedMemoryBitwiseDeviceCopy(t *testing.T) {
	ms := mmtOpen(t)
	rng := rand.New(rand.NewSource(193))
	const n = 301
	for _, wt := range MatMulTypes() {
		if !getRowsTypes[wt] {
			continue
		}
		k := 512
		wb, _ := mmtWeights(t, rng, wt, n, k, 1)
		ids := []int32{0, n - 1, 7, 7, 150, -1, n, 299}
		nt := len(ids)
		var got, want []byte
		err := ms.dev.Do(func() error {
			h, err := ms.dev.AllocHostMapped(len(wb))
			if err != nil {
				return err
			}
			defer h.Free()
			copy(h.Bytes(), wb)
			dw, err := ms.upload(wb)
			if err != nil {
				return err
			}
			idb := make([]byte, 4*nt)
			for i, id := range ids {
				u := uint32(id)
				idb[4*i], idb[4*i+1], idb[4*i+2], idb[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			}
			did, err := ms.upload(idb)
			if err != nil {
				return err
			}
			run := func(f func(o driver.DevicePtr) error) ([]byte, error) {
				o, err := ms.upload(make([]byte, 4*k*nt))
				if err != nil {
					return nil, err
				}
				if err := f(o); err != nil {
					return nil, err
				}
				b := make([]byte, 4*k*nt)
				if err := ms.s.CopyDtoH(b, o); err != nil {
					return nil, err
				}
				return b, ms.s.Synchronize()
			}
			if want, err = run(func(o driver.DevicePtr) error { return ms.k.GetRows(ms.s, o, dw, wt, n, did, nt, k) }); err != nil {
				return err
			}
			got, err = run(func(o driver.DevicePtr) error { return ms.k.GetRowsHost(ms.s, o, h.Ptr(), wt, n, did, nt, k) })
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", wt, err)
		}
		if i := rpFirstDiff(got, want); i >= 0 {
			t.Errorf("%s: host-mapped gather differs from the device copy's first at byte %d of %d", wt, i, len(want))
		}
		if f := mmtFloats(got); !math.IsNaN(float64(f[5*k])) || math.IsNaN(float64(f[0])) {
			t.Errorf("%s: out-of-range id row %v, in-range row %v (want NaN, a value)", wt, f[5*k], f[0])
		}
	}
}

// TestEmbedHostDevice_ModelDecodeBitwiseTableOffTheDevice: qwen3-tiny Q8_0
// (untied), prefill then 8 decode steps with CUDA graphs on:
// MINFER_EMBED_HOST=1 gives bitwise the logits of =0; the gathers run
// minfer_get_rows_host (none with it off) and replay from captured graphs;
// the table's bytes leave the device weights for the host-mapped class.
// qwen2-tiny (tied) with the lever on keeps its table on the device.
func TestEmbedHostDevice_ModelDecodeBitwiseTableOffTheDevice(t *testing.T) {
	dsNeedDevice(t)
	cOff, cOn, bOff, bOn := rpLeverBitwise(t, dsSynth(t, "qwen3-tiny", "Q8_0"), "MINFER_EMBED_HOST", "embedding in host memory")
	hOn, _ := rpMatching(cOn, "minfer_get_rows_host")
	hOff, _ := rpMatching(cOff, "minfer_get_rows_host")
	if hOn == 0 || hOff != 0 {
		t.Errorf("census: minfer_get_rows_host on %d (want > 0), off %d (want 0)", hOn, hOff)
	}
	emb := bOff.weights["token_embd.weight"]
	if emb == nil || bOn.weights["token_embd.weight"] == nil || !bOn.weights["token_embd.weight"].host {
		t.Fatalf("token_embd.weight: off %v, on not host-mapped", emb)
	}
	rb, _ := emb.typ.RowBytes(emb.rowLen)
	table := uint64(rb) * uint64(emb.rows)
	mOn, err1 := bOn.DeviceMemory()
	mOff, err2 := bOff.DeviceMemory()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	t.Logf("table %d bytes; weights off %d on %d; host-mapped on %d", table, mOff.Weights, mOn.Weights, mOn.HostMapped)
	if mOn.HostMapped != table || mOff.HostMapped != 0 || mOff.Weights-mOn.Weights != table {
		t.Errorf("host-mapped on %d off %d, device weights off %d on %d: want the %d-byte table moved off the device",
			mOn.HostMapped, mOff.HostMapped, mOff.Weights, mOn.Weights, table)
	}
	_, cTied, bTied := dsDecodeCensus(t, dsSynth(t, "qwen2-tiny", "Q8_0"), rpSteps, "MINFER_EMBED_HOST=1")
	if n, _ := rpMatching(cTied, "minfer_get_rows_host"); n != 0 || bTied.pool.hostBytes != 0 {
		t.Errorf("tied qwen2-tiny with the lever on: %d host gathers, %d host-mapped bytes; want the table on the device", n, bTied.pool.hostBytes)
	}
}

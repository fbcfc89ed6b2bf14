package memplan

import (
	"errors"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/quant"
)

const gib = 1 << 30

// plan is a 28-layer model of 512-value KV rows with one Q8_0 matrix, on
// a device with a derived copy of it and one extra KV row per cell.
func plan(t *testing.T, nCtx int, f kv.Format, derived bool) Plan {
	t.Helper()
	r := Rules{Backend: "dev", Overhead: 512 << 20, OverheadWhat: "context",
		Weight: func(t Tensor) (uint64, uint64) {
			if derived {
				return t.Bytes(), t.Bytes()
			}
			return t.Bytes(), 0
		},
		KVCellExtra: func(rowLen int, f kv.Format) uint64 { return uint64(kv.RowBytes(f, rowLen)) },
		Scratch:     func(graph.Params, []Tensor, int) uint64 { return 1 << 20 },
	}
	if derived {
		r.DerivedLever = "MINFER_MMVQ_REPACK=0"
	}
	m := Model{Label: "m-7b Q8_0", NCtxTrain: 32768, Prefill: 512, GraphBytes: 3 << 20,
		Params:  graph.Params{NLayer: 28, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: nCtx, KVFormat: f},
		Tensors: []Tensor{{Name: "w", Type: quant.Q8_0, Dims: []int{4096, 262144}, Layer: 0}}}
	p, err := New(m, r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The refusal is one line naming the model, the context, every class,
// the free memory, the largest context that fits and each setting that
// lowers the plan (the derived copy's lever when there is a copy).
func TestRefusal_OneLineNamesEveryClassTheFreeMemoryTheFitAndTheLevers(t *testing.T) {
	p := plan(t, 4_000_000, kv.F16, true)
	err := p.Check(100 * gib)
	if !errors.Is(err, graph.ErrOutOfMemory) {
		t.Fatalf("check: %v, want a refusal matching ErrOutOfMemory", err)
	}
	line := err.Error()
	for _, want := range []string{"m-7b Q8_0 at -c 4000000 needs ", "GiB (weights 1.1, copies (MINFER_MMVQ_REPACK) 1.1, KV f16 ",
		", scratch 4.0 MiB)", "; 100.0 GiB free on dev: the largest context that fits is about ",
		"; -c N, MINFER_CACHE_TYPE=q8_0 or MINFER_MMVQ_REPACK=0 lowers it"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(line, "\n") || strings.Contains(line, "context 0.5") {
		t.Errorf("refusal is more than one line or holds the overhead against the free memory: %q", line)
	}
	// Nothing fits: said so, without "-c N".
	line = p.Check(1 * gib).Error()
	if !strings.Contains(line, "no context fits (without the KV cache it needs 2.1 GiB)") || strings.Contains(line, "-c N") {
		t.Errorf("refusal with 1 GiB free: %s", line)
	}
}

// MaxCtx is the largest context whose plan fits: the plan at that context
// fits and one more cell does not.
func TestMaxCtx_IsTheLargestContextThatFits(t *testing.T) {
	p := plan(t, 4_000_000, kv.F16, false)
	free := uint64(139 * gib)
	n := p.MaxCtx(free)
	if at := plan(t, n, kv.F16, false); !at.Fits(free) {
		t.Errorf("plan at the largest context %d does not fit", n)
	}
	if over := plan(t, n+1, kv.F16, false); over.Fits(free) {
		t.Errorf("plan at %d fits too", n+1)
	}
	// q8_0 rows are about half of f16's: more context fits.
	if q := plan(t, 4_000_000, kv.Q8_0, false).MaxCtx(free); q < n*18/10 {
		t.Errorf("q8_0 fits %d cells, f16 %d: want about twice", q, n)
	}
}

func TestFormatCtx_RoundsDownToWhatFits(t *testing.T) {
	for n, want := range map[int]string{2_449_999: "2.4M", 2_400_000: "2.4M", 45_999: "45K", 9_999: "9999", 0: "0"} {
		if got := FormatCtx(n); got != want {
			t.Errorf("FormatCtx(%d) = %q, want %q", n, got, want)
		}
	}
}

// A context past the trained length gets one warning naming both; at or
// under it none.
func TestBeyondTraining_WarnsOnlyPastTheTrainedLength(t *testing.T) {
	if w := BeyondTraining("m", 32768, 32768); w != "" {
		t.Errorf("at the trained length: %q", w)
	}
	if w := BeyondTraining("m", 100, 0); w != "" {
		t.Errorf("trained length unknown: %q", w)
	}
	w := plan(t, 1_000_000, kv.F16, false).BeyondTraining()
	if !strings.Contains(w, "-c 1000000") || !strings.Contains(w, "32768 tokens") || strings.Contains(w, "\n") {
		t.Errorf("warning %q", w)
	}
}

// Mapped weights (the CPU) are in the total but not held against the
// free memory; the overhead is in the total only.
func TestNeed_LeavesOutMappedWeightsAndTheOverhead(t *testing.T) {
	p := plan(t, 1000, kv.F16, false)
	if p.Total() != p.Need()+p.Overhead {
		t.Errorf("total %d, need %d + overhead %d", p.Total(), p.Need(), p.Overhead)
	}
	p.MappedWeights = true
	if p.Need() != p.KV+p.Scratch+p.Derived {
		t.Errorf("mapped: need %d holds the weights", p.Need())
	}
}

// TestNew_HostMappedTensorsLeaveTheDeviceClasses: a tensor the rules keep
// in mapped host memory counts in HostMapped only: not in the weights, the
// derived copies, the total or what must be free; the summary names it and
// the refusal's classes do not.
func TestNew_HostMappedTensorsLeaveTheDeviceClasses(t *testing.T) {
	emb := Tensor{Name: "token_embd.weight", Type: quant.Q8_0, Dims: []int{4096, 1000}, Layer: -1, Gathered: true}
	w := Tensor{Name: "w", Type: quant.Q8_0, Dims: []int{4096, 4096}, Layer: 0}
	m := Model{Label: "m", Prefill: 512, Params: graph.Params{NLayer: 2, NHead: 4, NHeadKV: 4, HeadDim: 64, NCtx: 1024, KVFormat: kv.F16},
		Tensors: []Tensor{emb, w}}
	r := Rules{Backend: "dev", Weight: func(t Tensor) (uint64, uint64) { return t.Bytes(), t.Bytes() }}
	base, err := New(m, r)
	if err != nil {
		t.Fatal(err)
	}
	r.HostMapped = func(t Tensor) bool { return t.Gathered }
	p, err := New(m, r)
	if err != nil {
		t.Fatal(err)
	}
	if p.HostMapped != emb.Bytes() || p.Weights != w.Bytes() || p.Derived != w.Bytes() {
		t.Errorf("host-mapped %d, weights %d, derived %d; want %d, %d, %d", p.HostMapped, p.Weights, p.Derived, emb.Bytes(), w.Bytes(), w.Bytes())
	}
	if base.Total()-p.Total() != 2*emb.Bytes() || base.Need()-p.Need() != 2*emb.Bytes() {
		t.Errorf("total %d -> %d, need %d -> %d: want both down by the table and its copy", base.Total(), p.Total(), base.Need(), p.Need())
	}
	if !strings.Contains(p.Summary(), "host-mapped (host memory) ") || strings.Contains(p.Classes(false), "host-mapped") {
		t.Errorf("summary %q / refusal classes %q", p.Summary(), p.Classes(false))
	}
}

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/synth"
)

// planOf is the CUDA plan of a synthetic shape of matrix type typ (1-D
// tensors F32, as the converter writes them) at nCtx cells of kvf under
// the levers settings.
func planOf(t *testing.T, shape string, typ quant.Type, nCtx int, kvf kv.Format, settings ...string) memplan.Plan {
	t.Helper()
	lv, err := levers.Parse(settings)
	if err != nil {
		t.Fatal(err)
	}
	h, ts := planTensors(t, shape, typ)
	p, err := model.PlanMemory(h, ts, nCtx, kvf, lv, MemoryRules(lv, planSMs))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

// The issue's example: qwen2-7b Q8_0 at -c 4000000 needs 222.9 GiB
// (weights 7.5, KV f16 213.6, scratch 1.8) and with 139.1 GiB free the
// largest context that fits is about 2.4M. Without the repacked copy and
// with the embedding table on the device (the build the issue measured) the
// plan's classes match it within 0.1 GiB (weights, KV) and 2 GiB
// (scratch); with the copy it is its own class and the context that fits
// is smaller.
func TestPlan_Qwen2_7B_Q8_0_At4M_MatchesTheIssuesExample(t *testing.T) {
	const free = uint64(1391 * (1 << 30) / 10)
	p := planOf(t, "qwen2-7b", quant.Q8_0, 4_000_000, kv.F16, "MINFER_MMVQ_REPACK=0", "MINFER_EMBED_HOST=0")
	if got := gib(p.Weights); got < 7.0 || got > 7.6 {
		t.Errorf("weights %.2f GiB, want about 7.5", got)
	}
	if p.Derived != 0 {
		t.Errorf("derived %d bytes with MINFER_MMVQ_REPACK=0", p.Derived)
	}
	// 2 (K, V) x 28 layers x 512 values x 2 bytes, plus the cell-move row.
	if got := gib(p.KV); got < 213.5 || got > 217.5 {
		t.Errorf("KV %.2f GiB, want 213.6 and its cell-move row", got)
	}
	if got := gib(p.Scratch); got > 3.8 {
		t.Errorf("scratch %.2f GiB, want about 1.8", got)
	}
	err := p.Check(free)
	var r *memplan.Refusal
	if !errors.As(err, &r) || !errors.Is(err, graph.ErrOutOfMemory) {
		t.Fatalf("check against 139.1 GiB: %v, want a refusal", err)
	}
	line := err.Error()
	for _, want := range []string{"qwen2-7b Q8_0 at -c 4000000 needs ", "weights 7.", "KV f16 21", "scratch ", "139.1 GiB free on cuda",
		"the largest context that fits is about 2.", "-c N or MINFER_CACHE_TYPE=q8_0 lowers it"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal %q lacks %q", line, want)
		}
	}
	if n := p.MaxCtx(free); n < 2_300_000 || n > 2_450_000 {
		t.Errorf("largest context %d, want about 2.4M", n)
	}
	t.Log(line)

	// The defaults: one copy, and the untied table in host memory.
	if def := planOf(t, "qwen2-7b", quant.Q8_0, 4_000_000, kv.F16); def.Derived != 0 || def.Weights != p.Weights-embdBytes || def.HostMapped != embdBytes {
		t.Errorf("defaults: weights %d derived %d host-mapped %d, want %d, none and %d", def.Weights, def.Derived, def.HostMapped,
			p.Weights-embdBytes, uint64(embdBytes))
	}
	rp := planOf(t, "qwen2-7b", quant.Q8_0, 4_000_000, kv.F16, "MINFER_MMVQ_REPACK=1", "MINFER_ONE_COPY=0", "MINFER_EMBED_HOST=0")
	if d := gib(rp.Derived); d < 6.9 || d > 7.6 {
		t.Errorf("repacked copies %.2f GiB, want one more copy of the Q8_0 matrices", d)
	}
	if line := rp.Check(free).Error(); !strings.Contains(line, "copies (MINFER_MMVQ_REPACK) 7.") || !strings.Contains(line, "or MINFER_MMVQ_REPACK=0 lowers it") {
		t.Errorf("refusal with the copy does not name it and its lever: %s", line)
	}
}

// At the issue's measured shape (-c 32768, f16 KV) the plan's weights and
// KV are the table's "weights + f16 KV" column (9,513 MiB for 7B Q8_0)
// within 1%, with the embedding table on the device as it was then.
func TestPlan_Qwen2_7B_Q8_0_At32K_WeightsAndKVMatchTheMeasuredColumn(t *testing.T) {
	p := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, "MINFER_MMVQ_REPACK=0", "MINFER_EMBED_HOST=0")
	got := float64(p.Weights+p.KV-p.KVPerCell*32768+2*28*512*2*32768) / (1 << 20)
	if got < 9513*0.99 || got > 9513*1.01 {
		t.Errorf("weights + KV %.0f MiB, want 9,513 within 1%%", got)
	}
}

// The rules follow the levers: the repacked copy is derived only where the
// backend would make it (its type's decode takes mmvq) beside the GGUF
// bytes (MINFER_ONE_COPY off, or its default yielding).
func TestMemoryRules_RepackCopyOnlyWhereTheBackendMakesIt(t *testing.T) {
	q8 := memplan.Tensor{Name: "w", Type: quant.Q8_0, Dims: []int{3584, 512}}
	norm := memplan.Tensor{Name: "n", Type: quant.F32, Dims: []int{3584}}
	for _, c := range []struct {
		settings []string
		derived  bool
	}{
		{[]string{"MINFER_MMVQ_REPACK=1", "MINFER_ONE_COPY=0"}, true},
		{[]string{"MINFER_MMVQ_REPACK=0"}, false},
		{[]string{"MINFER_MMVQ_REPACK=1", "MINFER_NO_Q80_MMVQ=1"}, false},
		{[]string{"MINFER_MMVQ_REPACK=1", "MINFER_ONE_COPY=1"}, false}, // the copy is the matrix's only one
		{nil, false},                           // the default: one copy
		{[]string{"MINFER_MMQ_ASYNC=1"}, true}, // the default one copy yields: async MMQ reads the GGUF bytes
	} {
		lv, err := levers.Parse(c.settings)
		if err != nil {
			t.Fatal(err)
		}
		r := MemoryRules(lv, 0)
		own, derived := r.Weight(q8)
		if own != q8.Bytes() || (derived > 0) != c.derived {
			t.Errorf("%v: own %d derived %d, want %d and a copy %v", c.settings, own, derived, q8.Bytes(), c.derived)
		}
		if own, derived := r.Weight(norm); own != 4*3584 || derived != 0 {
			t.Errorf("%v: a norm is %d + %d bytes, want its f32 values", c.settings, own, derived)
		}
	}
}

// A driver out-of-memory and the test seam's failed cuMemAlloc match
// graph.ErrOutOfMemory through the pool's wrapping; any other driver error
// does not.
func TestOutOfMemory_DriverOOMAndInjectedAllocMatchErrOutOfMemory(t *testing.T) {
	wrap := func(e *driver.Error) error { return outOfMemory(fmt.Errorf("cuda: pool: allocate 8 bytes: %w", e)) }
	if err := wrap(&driver.Error{Code: driver.CodeOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Call: "cuMemAlloc_v2(8 bytes)"}); !errors.Is(err, graph.ErrOutOfMemory) {
		t.Errorf("driver OOM: %v does not match ErrOutOfMemory", err)
	}
	if err := wrap(&driver.Error{Code: driver.CodeUnknown, Name: "CUDA_ERROR_UNKNOWN", Call: "cuMemAlloc_v2(8 bytes)", Injected: true}); !errors.Is(err, graph.ErrOutOfMemory) {
		t.Errorf("injected cuMemAlloc_v2: %v does not match ErrOutOfMemory", err)
	}
	if err := wrap(&driver.Error{Code: driver.CodeInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE", Call: "cuMemAlloc_v2(8 bytes)"}); errors.Is(err, graph.ErrOutOfMemory) {
		t.Errorf("invalid value: %v matches ErrOutOfMemory", err)
	}
	if err := wrap(&driver.Error{Code: driver.CodeUnknown, Call: "cuLaunchKernel(x)", Injected: true}); errors.Is(err, graph.ErrOutOfMemory) {
		t.Errorf("injected launch: %v matches ErrOutOfMemory", err)
	}
}

// The pool counts each allocation under its class and forgets them at
// Close (no device needed: the counting is the pool's own).
func TestMemCount_AddsByClassAndIgnoresUnknownClasses(t *testing.T) {
	var m memCount
	m.add(MemWeights, 10)
	m.add(MemKV, 5)
	m.add(MemKV, 7)
	m.add(numMemClasses, 99)
	m.add(-1, 99)
	if m[MemWeights] != 10 || m[MemKV] != 12 || m[MemDerived] != 0 {
		t.Errorf("counts %v", m)
	}
	d := DeviceMemory{Weights: 1, Derived: 2, KV: 3, Activations: 4, Workspace: 5, FreeAtOpen: 100, Free: 80}
	if d.Counted() != 15 || d.DriverUsed() != 20 {
		t.Errorf("counted %d, driver used %d", d.Counted(), d.DriverUsed())
	}
}

// The weights' arena: pieces are 256-byte aligned, packed into the
// current chunk while they fit, and a piece that does not fit (or the
// first one) asks for a new chunk; only weights and derived copies use it.
func TestArena_PiecesAlignedPackedAndANewChunkWhenFull(t *testing.T) {
	var a arena
	if _, ok := a.fit(100); ok {
		t.Fatal("an arena without a chunk fits a piece")
	}
	a.base, a.size = 1<<30, 1024
	off, ok := a.fit(100)
	if !ok || off != 0 {
		t.Fatalf("first piece at %d (%v)", off, ok)
	}
	a.used = off + 100
	if off, ok = a.fit(300); !ok || off != 256 {
		t.Fatalf("second piece at %d (%v), want 256 (aligned)", off, ok)
	}
	a.used = off + 300
	if _, ok = a.fit(500); ok {
		t.Fatalf("a piece past the chunk's end fits (used %d of %d)", a.used, a.size)
	}
	if off, ok = a.fit(1024 - 768); !ok || off != 768 {
		t.Fatalf("a piece ending exactly at the chunk's end: %d (%v)", off, ok)
	}
	for c := range numMemClasses {
		if got, want := arenaClass(c), c == MemWeights || c == MemDerived; got != want {
			t.Errorf("class %s in an arena: %v", memClassNames[c], got)
		}
	}
}

// planTensors are the hyperparameters and the plan's tensors of a
// synthesized shape of weight type typ (no file written).
func planTensors(t *testing.T, shape string, typ quant.Type) (model.HParams, []memplan.Tensor) {
	t.Helper()
	return planTensorsOf(t, synth.Options{Shape: shape, Type: typ})
}

// planTensorsOf is planTensors for synthesis options o (a type mix too).
func planTensorsOf(t *testing.T, o synth.Options) (model.HParams, []memplan.Tensor) {
	t.Helper()
	s, err := synth.ShapeByName(o.Shape)
	if err != nil {
		t.Fatal(err)
	}
	_, types, err := synth.MatrixTypes(o)
	if err != nil {
		t.Fatal(err)
	}
	h := s.HParams()
	ts, err := model.PlanTensors(h, func(name string) (quant.Type, bool) {
		if t, ok := types[name]; ok {
			return t, true
		}
		return quant.F32, true
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, ts
}

// The plan's scratch counts the tensor-core attention's partials
// (AttnPrefillTCScratchBytes, one buffer) where a prefill launch through
// those kernels may split (the default), beside the lean decode kernel's
// own scratch or without it (MINFER_NO_SPLITK_ATTN=1); not with the FMA
// tiles.
func TestPlan_ScratchCountsTheTensorCorePartials(t *testing.T) {
	tc, d2 := sevenBScratchParts(t)
	fma := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, "MINFER_FA_PREFILL_TC=0").Scratch // with d2
	for _, c := range []struct {
		settings []string
		want     uint64
	}{
		{nil, fma + tc},
		{[]string{"MINFER_NO_SPLITK_ATTN=1"}, fma - d2 + tc},
	} {
		if got := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, c.settings...).Scratch; got != c.want {
			t.Errorf("%v: scratch %d, want %d (FMA tiles and lean decode %d, the decode scratch %d, the partials %d)", c.settings, got, c.want,
				fma, d2, tc)
		}
	}
}

// TestPlan_ScratchHoldsBothDecodeFamiliesWhereTheRouteCanTakeEither: with
// the tensor-core decode routed by depth and its threshold inside the
// context, the plan counts the lean kernel's scratch and the tensor-core
// partials together (attnRoute holds both from the first decode step, so
// the crossing allocates nothing); from FROM=0 the partials alone, past
// the context the lean scratch alone. The FMA prefill tiles keep the
// prefill's partials out of the sums.
func TestPlan_ScratchHoldsBothDecodeFamiliesWhereTheRouteCanTakeEither(t *testing.T) {
	tc, d2 := sevenBScratchParts(t)
	lean := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, "MINFER_FA_PREFILL_TC=0").Scratch // with d2
	for _, c := range []struct {
		from string
		want uint64
	}{
		{"", lean + tc}, // the default, 12288
		{"32768", lean + tc},
		{"0", lean - d2 + tc},
		{"32769", lean},
	} {
		settings := []string{"MINFER_FA_PREFILL_TC=0", "MINFER_ATTN_DECODE_TC=1"}
		if c.from != "" {
			settings = append(settings, "MINFER_ATTN_DECODE_TC_FROM="+c.from)
		}
		if got := planOf(t, "qwen2-7b", quant.Q8_0, 32768, kv.F16, settings...).Scratch; got != c.want {
			t.Errorf("FROM %q: scratch %d, want %d (lean decode %d, its scratch %d, the partials %d)", c.from, got, c.want, lean, d2, tc)
		}
	}
}

// sevenBScratchParts is qwen2-7b's tensor-core partials (prefill and the
// tensor-core decode share them) and its lean decode scratch at context
// 32768, f16 KV: the parts the scratch plan tests add up.
func sevenBScratchParts(t *testing.T) (tc, d2 uint64) {
	t.Helper()
	d, err := AttnDecode2ScratchBytes(AttnParams{NT: 1, NHead: 28, NHeadKV: 4, HeadDim: 128, NCtx: 32768}, kv.F16)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(AttnPrefillTCScratchBytes(128, planSMs)), uint64(d)
}

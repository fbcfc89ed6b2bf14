package harness

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

const actQuantClass = "activation-quantization: rel L2 <= 0.05, top-1 equal at every position, top-2 margin > 0.2 where compared"

func TestParseTolerance_RelL2ClauseSetsEveryField(t *testing.T) {
	tol, err := ParseTolerance(actQuantClass)
	if err != nil {
		t.Fatal(err)
	}
	want := Tolerance{Raw: actQuantClass, Class: "activation-quantization", RelBounded: true, RelL2: 0.05, Top1Equal: true, MarginBar: 0.2}
	if tol != want {
		t.Fatalf("got %+v\nwant %+v", tol, want)
	}
	if !strings.Contains(tol.String(), "rel L2 <= 0.05") {
		t.Errorf("the report phrase hides the rel L2 clause: %q", tol.String())
	}

	both, err := ParseTolerance("x: max|diff| <= 0.5, rel L2 <= 0.03, top-1 equal at every position")
	if err != nil || !both.Bounded || both.MaxAbsDiff != 0.5 || !both.RelBounded || both.RelL2 != 0.03 || both.MarginBar != 0 {
		t.Errorf("both bounds: %+v %v", both, err)
	}
	abs, err := ParseTolerance("x: max|diff| <= 0.5, top-1 equal at every position")
	if err != nil || !abs.Bounded || abs.RelBounded || abs.RelL2 != 0 {
		t.Errorf("max|diff| only: %+v %v", abs, err)
	}
}

func TestParseTolerance_UnknownMalformedOrUnboundedClassErrors(t *testing.T) {
	for _, s := range []string{
		"x: rel L2 <= 0.05, wobble",
		"x: rel L2 < 0.05",
		"x: rel L2 <= abc",
		"x: rel L2 <= -1",
		"x: rel L2 <= 0.05, top-1 equal at every position, B vs exact rel L2 <= -0.01",
		"x: rel L2 <= 0.05, top-1 equal at every position, B vs exact rel L2 < 0.01",
		"x: rel L2 <= 0.05, B vs exact rel L2 <= 0.01",
		"x: top-1 equal at every position, B vs exact rel L2 <= 0.01",
		"x: top-1 equal at every position, top-2 margin > 0.2 where compared",
		"no colon rel L2 <= 0.05",
	} {
		if tol, err := ParseTolerance(s); err == nil {
			t.Errorf("%q accepted: %+v", s, tol)
		}
	}
}

func TestParseTolerance_BvsExactClauseSetsItsBoundNotTheRelL2Bound(t *testing.T) {
	tol, err := ParseTolerance(levers.TolActPrecision)
	if err != nil {
		t.Fatal(err)
	}
	want := Tolerance{Raw: levers.TolActPrecision, Class: "activation-precision", RelBounded: true, RelL2: 0.05, Top1Equal: true, MarginBar: 0.2,
		ExactBounded: true, ExactRelL2: 0.01}
	if tol != want {
		t.Fatalf("got %+v\nwant %+v", tol, want)
	}
	// In either order: "B vs exact rel L2" must not be read as "rel L2".
	tol, err = ParseTolerance("x: B vs exact rel L2 <= 0.02, top-1 equal at every position, rel L2 <= 0.05")
	if err != nil || tol.RelL2 != 0.05 || tol.ExactRelL2 != 0.02 || !tol.ExactBounded {
		t.Errorf("reordered: %+v %v", tol, err)
	}
}

// The f16 GEMM's levers declare the clause: MINFER_MMQ_F16_KQ, and
// MINFER_ONE_COPY, whose Q8_0 prefill runs that GEMM over the one copy and
// the int8 MMQ over the GGUF bytes (TestParseTolerance_
// AcceptsEveryRegistryDeclaration parses every lever's class).
func TestParseTolerance_F16GEMMLeversDeclareBvsExactAt001(t *testing.T) {
	for _, name := range []string{"MINFER_MMQ_F16_KQ", "MINFER_ONE_COPY"} {
		l, ok := levers.Lookup(name)
		if !ok {
			t.Fatalf("%s is not registered", name)
		}
		tol, err := ParseTolerance(l.Tolerance)
		if err != nil || !tol.ExactBounded || tol.ExactRelL2 != 0.01 || tol.MarginBar != 0.2 {
			t.Errorf("%s declares %+v %v", name, tol, err)
		}
	}
}

// `minfer levers --json` carries a rule's KV cache need (needs.kv_cache)
// and its any_depth setting (needs.any_depth), and Pins turns a lever's
// declaration into the settings a run fixes: its Requires, then
// MINFER_CACHE_TYPE where the run's backend's rule reads one format, then
// the any_depth setting (By any_depth, its Why naming the correctness
// gates' short contexts); a rule of another backend pins nothing. The
// engine's registry, printed as minfer prints it, gives
// MINFER_ATTN_DECODE_TC its f16 cache and MINFER_ATTN_DECODE_TC_FROM=0 on
// CUDA.
func TestLever_PinsAreRequiresTheKVCacheAndTheAnyDepthSettingTheBackendsRuleReads(t *testing.T) {
	data := []byte(`[{"name":"MINFER_X","kind":"opt-in","backend":"any","arm_a":"0","arm_b":"1","requires":["MINFER_Y=0"],
		"liveness":{"on":"1","cuda":{"census":["minfer_x_*"],"needs":{"max_nt":8,"kv_cache":"f16","any_depth":"MINFER_X_FROM=0"}},"cpu":{"census":["cpu_x"],"needs":{}},"why":"w"}}]`)
	ls, err := ParseLevers(data)
	if err != nil {
		t.Fatal(err)
	}
	x := ls[0]
	if got := x.Rule("cuda").Needs; got.KVCache != "f16" || got.AnyDepth != "MINFER_X_FROM=0" {
		t.Fatalf("needs read as %+v", got)
	}
	cuda, cpu := x.Pins("cuda"), x.Pins("cpu")
	if len(cuda) != 3 || cuda[0].Name != "MINFER_Y" || cuda[0].Value != "0" || cuda[0].By != PinRequires ||
		cuda[1].Name != CacheTypeLever || cuda[1].Value != "f16" || cuda[1].By != PinKVCache || !strings.Contains(cuda[1].Why, "MINFER_X's path runs only over a KV cache of f16") ||
		cuda[2].Name != "MINFER_X_FROM" || cuda[2].Value != "0" || cuda[2].By != PinAnyDepth || !strings.Contains(cuda[2].Why, "the correctness gates' models run short contexts") {
		t.Errorf("cuda pins %+v", cuda)
	}
	if len(cpu) != 1 || cpu[0].Name != "MINFER_Y" {
		t.Errorf("cpu pins %+v: want the Requires pin alone", cpu)
	}
	var reg []Lever
	for _, l := range levers.All() {
		reg = append(reg, Lever{Lever: l})
	}
	b, err := json.Marshal(reg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"any_depth":"MINFER_ATTN_DECODE_TC_FROM=0"`) {
		t.Error("levers --json carries no any_depth")
	}
	if ls, err = ParseLevers(b); err != nil {
		t.Fatal(err)
	}
	tc, err := FindLever(ls, "MINFER_ATTN_DECODE_TC")
	if err != nil {
		t.Fatal(err)
	}
	if p := tc.Pins("cuda"); len(p) != 3 || p[1] != (Pin{Name: "MINFER_CACHE_TYPE", Value: "f16", By: PinKVCache, Why: p[1].Why}) ||
		p[2] != (Pin{Name: "MINFER_ATTN_DECODE_TC_FROM", Value: "0", By: PinAnyDepth, Why: p[2].Why}) {
		t.Errorf("MINFER_ATTN_DECODE_TC's cuda pins %+v: want its Requires, then MINFER_CACHE_TYPE=f16, then MINFER_ATTN_DECODE_TC_FROM=0", p)
	}
}

package levers

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

// registryProblems lists what is wrong with one entry's declarations
// (GATES.md "every lever is declared once"): an A/B lever needs a liveness
// rule for every backend it runs on (or says why it has none), a known
// tolerance class, valid requirements, census patterns that are globs of
// the backend's names, and weight-type needs its typed patterns can meet.
func registryProblems(l Lever) []string {
	var bad []string
	if !l.HasArms() || l.Reserved != "" {
		if l.Liveness != nil || l.Workload != "" || l.Bars != nil || l.Memory != nil {
			bad = append(bad, "a lever abtest does not run declares liveness, workload, bars or a memory bar")
		}
		return bad
	}
	if l.Bars == nil || !(l.Bars.PP >= 1) || !(l.Bars.TG >= 1) || !(l.Bars.Claim > 0) || l.Bars.MaxRounds < 9 || l.Bars.MaxRounds > 45 {
		bad = append(bad, "bars missing or out of range")
	}
	switch m := l.Memory; {
	case m == nil || !(m.Frac >= 0) || !(m.MiB >= 0):
		bad = append(bad, "memory bar missing or negative")
	case m.AboveDefault() && m.Cost == "":
		bad = append(bad, "a memory bar above the default ("+DefaultMemory.String()+") names no cost")
	case !m.AboveDefault() && m.Cost != "":
		bad = append(bad, "a declared memory cost with the default bar")
	}
	switch l.Tolerance {
	case "", TolKVPrecision, TolActQuant, TolActPrecision, TolF16WeightTile, TolF16AttnTile, TolAccumOrder, TolVerifyChunk:
	default:
		bad = append(bad, "tolerance is not one of the Tol* classes: "+l.Tolerance)
	}
	for _, r := range l.Requires {
		name, v, ok := strings.Cut(r, "=")
		o, found := Lookup(name)
		if !ok || !found || name == l.Name || o.Validate(v) != nil {
			bad = append(bad, "bad requirement "+r)
		}
	}
	lv := l.Liveness
	if lv == nil {
		if l.Name != "MINFER_NO_PINNED_READBACK" { // the one lever with no census evidence (its runs stay INCONCLUSIVE)
			bad = append(bad, "no liveness rule")
		}
		return bad
	}
	armValue := func(v string) string { // "unset" reads as the default
		if v == "unset" {
			return l.Default
		}
		return v
	}
	armB := l.ArmB
	if l.NeedsB() {
		// Arm B is the user's (a kernels file): the rule must name the
		// values that do not run the path, arm A's among them.
		armB = "candidate-the-user-names"
		if len(lv.OffValues) == 0 {
			bad = append(bad, "a lever whose arm B has no default needs liveness OffValues (its candidate is open-ended)")
		}
	}
	if lv.RunsPath(armValue(l.ArmA)) == lv.RunsPath(armValue(armB)) || l.ArmA == armB || lv.Why == "" {
		bad = append(bad, "liveness On must be exactly one arm's value, with a why")
	}
	wantCUDA, wantCPU := l.Backend == "cuda" || l.Backend == "any", l.Backend == "cpu" || l.Backend == "any"
	if (lv.CUDA != nil) != wantCUDA || (lv.CPU != nil) != wantCPU {
		bad = append(bad, "a liveness rule per backend it runs on ("+l.Backend+")")
	}
	for _, r := range []struct {
		rule   *PathRule
		prefix string
	}{{lv.CUDA, "minfer_"}, {lv.CPU, "cpu_"}} {
		if r.rule == nil {
			continue
		}
		if len(r.rule.Census) == 0 && len(r.rule.OffCensus) == 0 && !r.rule.Graphs && !r.rule.PDL && !r.rule.PrefillGraphs {
			bad = append(bad, "a rule with no evidence")
		}
		for _, t := range r.rule.Needs.WeightTypes {
			if _, err := quant.ParseType(t); err != nil {
				bad = append(bad, "unknown weight type "+t)
			}
		}
		if n := r.rule.Needs; n.MaxNT != 0 && n.MaxNT < n.MinNT {
			bad = append(bad, "needs MaxNT < MinNT")
		}
		bad = append(bad, kvCacheProblems(l, r.rule.Needs.KVCache)...)
		bad = append(bad, anyDepthProblems(l, r.rule.Needs.AnyDepth)...)
		for _, p := range slices.Concat(r.rule.Census, r.rule.OffCensus) {
			// spec_* names are the speculative decoder's counts, on
			// either backend (CensusSpec*); kernels_* where the CUDA
			// backend's kernels came from (CensusKernels*); pinned_steps
			// its forwards in one handoff (CensusPinnedSteps).
			pseudo := strings.HasPrefix(p, "spec_") || r.prefix == "minfer_" && (p == CensusKernelsFile || p == CensusKernelsNVRTC || p == CensusPinnedSteps)
			if _, err := path.Match(p, r.prefix); err != nil || !strings.HasPrefix(p, r.prefix) && !pseudo {
				bad = append(bad, "census pattern "+p+" is not a glob of "+r.prefix+"* names")
			}
			bad = append(bad, typedPatternProblems(p, r.rule.Needs.WeightTypes)...)
		}
	}
	return bad
}

// kvCacheProblems: a rule's KV cache need is a format abtest can pin, one
// of MINFER_CACHE_TYPE's values other than auto (auto names no format: the
// engine picks one per model), never declared by the cache lever itself
// (the pin would overwrite its arms) and never against a Requires pin of
// another cache.
func kvCacheProblems(l Lever, kc string) []string {
	if kc == "" {
		return nil
	}
	var bad []string
	ct, _ := Lookup("MINFER_CACHE_TYPE")
	if kc == "auto" || ct.Validate(kc) != nil {
		bad = append(bad, fmt.Sprintf("needs kv_cache %q: want one of MINFER_CACHE_TYPE's formats (%s)", kc, strings.Join(slices.DeleteFunc(slices.Clone(ct.Values), func(v string) bool { return v == "auto" }), ", ")))
	}
	if l.Name == ct.Name {
		bad = append(bad, "the cache lever declares a kv_cache need: the pin would replace its own arms")
	}
	for _, r := range l.Requires {
		if name, v, _ := strings.Cut(r, "="); name == ct.Name && v != kc {
			bad = append(bad, fmt.Sprintf("needs kv_cache %s but requires %s", kc, r))
		}
	}
	return bad
}

// anyDepthProblems: a rule's any_depth setting is NAME=VALUE of another
// lever that takes VALUE, never one its Requires pin otherwise (abtest pins
// it in the correctness gates beside them).
func anyDepthProblems(l Lever, ad string) []string {
	if ad == "" {
		return nil
	}
	name, v, ok := strings.Cut(ad, "=")
	o, found := Lookup(name)
	if !ok || !found || name == l.Name || o.Validate(v) != nil {
		return []string{fmt.Sprintf("any_depth %q: want NAME=VALUE of another lever, a value it takes", ad)}
	}
	for _, r := range l.Requires {
		if rn, rv, _ := strings.Cut(r, "="); rn == name && rv != v {
			return []string{fmt.Sprintf("any_depth %s but requires %s", ad, r)}
		}
	}
	return nil
}

// typedPatternProblems: a pattern that ends in a weight type (".._q8_0",
// ".._q[456]_k") launches only for those types, so every type the rule
// needs must be one of them (else a workload can meet the need and still
// never run the pattern).
func typedPatternProblems(p string, need []string) []string {
	star := strings.LastIndex(p, "*")
	suffix := p[star+1:]
	var typed []string
	for _, t := range quant.WeightTypes() {
		if ok, _ := path.Match("*"+suffix, "x_"+strings.ToLower(t.String())); ok && strings.HasPrefix(suffix, "_") {
			typed = append(typed, t.String())
		}
	}
	if len(typed) == 0 || len(need) == 0 {
		return nil
	}
	var bad []string
	for _, t := range need {
		if !slices.Contains(typed, t) {
			bad = append(bad, "needs weight type "+t+" but pattern "+p+" launches only for "+strings.Join(typed, ", "))
		}
	}
	return bad
}

func TestRegistry_EveryABLeverDeclaresLivenessClassBarsAndRequirements(t *testing.T) {
	for _, l := range All() {
		for _, p := range registryProblems(l) {
			t.Errorf("%s: %s", l.Name, p)
		}
	}
}

// TestRegistry_ProblemsAreFound: the check fails an entry with each defect.
func TestRegistry_ProblemsAreFound(t *testing.T) {
	good, _ := Lookup("MINFER_NO_Q80_MMVQ")
	if p := registryProblems(good); len(p) != 0 {
		t.Fatalf("the registry's own entry fails: %v", p)
	}
	for what, mutate := range map[string]func(*Lever){
		"no rule":           func(l *Lever) { l.Liveness = nil },
		"on is neither arm": func(l *Lever) { x := *l.Liveness; x.On = "2"; l.Liveness = &x },
		"cpu rule on a cuda lever": func(l *Lever) {
			x := *l.Liveness
			x.CPU = &PathRule{Census: []string{"cpu_x"}}
			l.Liveness = &x
		},
		"pattern of another backend": func(l *Lever) {
			x := *l.Liveness
			x.CUDA = &PathRule{Census: []string{"cpu_matmul_*"}}
			l.Liveness = &x
		},
		"typed pattern cannot meet its need": func(l *Lever) {
			x := *l.Liveness
			r := *x.CUDA
			r.Needs.WeightTypes = []string{"Q4_K"}
			x.CUDA = &r
			l.Liveness = &x
		},
		"kv cache need is not a format": func(l *Lever) {
			x := *l.Liveness
			r := *x.CUDA
			r.Needs.KVCache = "f8"
			x.CUDA = &r
			l.Liveness = &x
		},
		"unknown class":       func(l *Lever) { l.Tolerance = "vibes: max|diff| <= 9" },
		"bad requirement":     func(l *Lever) { l.Requires = []string{"MINFER_NOPE=1"} },
		"rounds cap above 45": func(l *Lever) { b := *l.Bars; b.MaxRounds = 99; l.Bars = &b },
		"memory bar above the default without a cost": func(l *Lever) { l.Memory = &MemoryBar{Frac: 1, MiB: 64} },
		"memory bar missing":                          func(l *Lever) { l.Memory = nil },
	} {
		l := good
		mutate(&l)
		if p := registryProblems(l); len(p) == 0 {
			t.Errorf("%s: not found", what)
		}
	}
}

// The lever that loads a second model (its plan allowed, Paired) declares
// that cost; every other A/B lever has the default memory bar, the repacked
// layout too now that it is the matrices' only copy (MINFER_ONE_COPY).
func TestRegistry_MemoryBarsDefaultUnlessACostIsDeclared(t *testing.T) {
	for _, l := range All() {
		if l.Memory == nil {
			continue
		}
		if got := l.Memory.AboveDefault(); got != (l.Name == "MINFER_DRAFT") {
			t.Errorf("%s: memory bar %s", l.Name, l.Memory)
		}
		if l.Memory.Paired != l.PairedModel {
			t.Errorf("%s: a paired memory bar (%v) on a lever whose value names a model (%v)", l.Name, l.Memory.Paired, l.PairedModel)
		}
	}
	l, _ := Lookup("MINFER_MMVQ_REPACK")
	if s := l.Memory.String(); s != DefaultMemory.String() {
		t.Errorf("repack bar %q, want the default", s)
	}
	if s := DefaultMemory.String(); s != "B <= A + 1% + 64 MiB" {
		t.Errorf("default bar %q", s)
	}
}

func TestParseMutation_SitesFractionsAndPhantomLever(t *testing.T) {
	for v, want := range map[string]Mutation{
		"":                   {},
		"skip_bias":          {Site: MutateSkipBias},
		"slow_decode":        {Site: MutateSlowDecode, Frac: 1},
		"slow_decode=0.03":   {Site: MutateSlowDecode, Frac: 0.03},
		"slow_prefill=0.5":   {Site: MutateSlowPrefill, Frac: 0.5},
		"phantom=MINFER_MMQ": {Site: MutatePhantom, Lever: "MINFER_MMQ"},
		"fail_device_test":   {Site: MutateFailDeviceTest},
	} {
		got, err := ParseMutation(v)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", v, got, err, want)
		}
	}
	for _, v := range []string{"typo", "slow_decode=0", "slow_decode=-1", "slow_decode=11", "slow_decode=x", "skip_bias=1",
		"phantom", "phantom=MINFER_NOPE", "phantom=MINFER_OP_TIMING"} {
		if m, err := ParseMutation(v); err == nil {
			t.Errorf("%q accepted: %+v", v, m)
		}
	}
}

// TestParse_PhantomMakesOnlyItsLeverReadAsBaseline: phantom=MINFER_MMQ
// turns MMQ off whatever the arm asked, and nothing else.
func TestParse_PhantomMakesOnlyItsLeverReadAsBaseline(t *testing.T) {
	c, err := Parse([]string{"MINFER_MMQ=1", "MINFER_NO_FUSE_FFN=1", "MINFER_TEST_MUTATE=phantom=MINFER_MMQ"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MMQ || !c.NoFuseFFN || c.TestMutate != MutatePhantom || c.Set()["MINFER_MMQ"] != "1" {
		t.Fatalf("%+v", c)
	}
	plain, _ := Parse([]string{"MINFER_MMQ=1"})
	if !plain.MMQ {
		t.Fatal("MINFER_MMQ=1 reads as off without the mutation")
	}
}

// MINFER_KERNELS is A/B-able with arm B given (a kernels file has no
// default): arm A is the NVRTC build, the rule's off values are unset and
// nvrtc, and any file runs the path. A phantom reads as the NVRTC build.
func TestRegistry_KernelsLeverArmBIsTheUsers(t *testing.T) {
	l, _ := Lookup("MINFER_KERNELS")
	if !l.HasArms() || !l.NeedsB() || l.ArmA != KernelsNVRTC || l.Tolerance != "" || l.Workload != "" {
		t.Fatalf("MINFER_KERNELS: arms A=%q B=%q tolerance %q workload %q; want A=nvrtc, B given, bitwise, the default workload", l.ArmA, l.ArmB, l.Tolerance, l.Workload)
	}
	if l.Bars == nil || l.Memory == nil {
		t.Errorf("MINFER_KERNELS has no bars or memory bar: %+v %+v", l.Bars, l.Memory)
	}
	lv := l.Liveness
	if lv.RunsPath(KernelsNVRTC) || lv.RunsPath("") || !lv.RunsPath("/abs/minfer-kernels.fatbin") {
		t.Errorf("liveness: nvrtc %v, unset %v, a file %v; want false, false, true", lv.RunsPath(KernelsNVRTC), lv.RunsPath(""), lv.RunsPath("/abs/minfer-kernels.fatbin"))
	}
	if r := lv.CUDA; r == nil || !slices.Equal(r.Census, []string{CensusKernelsFile}) || !slices.Equal(r.OffCensus, []string{CensusKernelsNVRTC}) || !r.SameKernels {
		t.Errorf("MINFER_KERNELS's CUDA rule %+v", lv.CUDA)
	}
	if !strings.Contains(l.Doc, "bitwise") || !strings.Contains(l.Doc, "finding") {
		t.Errorf("the doc does not say a parity difference is the finding: %s", l.Doc)
	}
	// Without OffValues the check refuses such a lever.
	x := l
	y := *x.Liveness
	y.OffValues = nil
	x.Liveness = &y
	if p := registryProblems(x); len(p) == 0 {
		t.Error("a lever with arm B given and no OffValues passes the registry check")
	}
	c, err := Parse([]string{"MINFER_KERNELS=/abs/k.fatbin", "MINFER_TEST_MUTATE=phantom=MINFER_KERNELS"})
	if err != nil || c.Kernels != KernelsNVRTC || c.Set()["MINFER_KERNELS"] != "/abs/k.fatbin" {
		t.Errorf("phantom: Kernels %q (set %q), %v; want nvrtc, the file kept in Set", c.Kernels, c.Set()["MINFER_KERNELS"], err)
	}
	if c, err := Parse([]string{"MINFER_KERNELS=nvrtc"}); err != nil || c.Kernels != KernelsNVRTC {
		t.Errorf("MINFER_KERNELS=nvrtc: %q, %v", c.Kernels, err)
	}
}

// A path that reads one KV cache format declares it (Needs.KVCache) as one
// of MINFER_CACHE_TYPE's formats, so abtest can pin it: auto names none (the
// engine picks per model), an unknown name or a case slip none minfer
// accepts; the cache lever itself may not declare one, nor a lever whose
// Requires pin another cache. MINFER_ATTN_DECODE_TC reads f16 and does not
// require it (the engine would refuse the lever beside auto, which gives a
// 7B f16).
func TestRegistry_KVCacheNeedIsAFormatOfTheCacheLever(t *testing.T) {
	tc, _ := Lookup("MINFER_ATTN_DECODE_TC")
	if tc.Liveness == nil || tc.Liveness.CUDA == nil || tc.Liveness.CUDA.Needs.KVCache != "f16" {
		t.Fatalf("MINFER_ATTN_DECODE_TC's CUDA rule needs %+v, want kv_cache f16", tc.Liveness)
	}
	if p := registryProblems(tc); len(p) != 0 {
		t.Fatalf("the registry's own entry fails: %v", p)
	}
	for _, r := range tc.Requires {
		if strings.HasPrefix(r, "MINFER_CACHE_TYPE=") {
			t.Errorf("MINFER_ATTN_DECODE_TC requires %s: the engine would refuse it beside auto", r)
		}
	}
	if c, err := Parse([]string{"MINFER_ATTN_DECODE_TC=1"}); err != nil || !c.RequiresMet("MINFER_ATTN_DECODE_TC") {
		t.Errorf("MINFER_ATTN_DECODE_TC=1 with the auto cache: requires met %v, %v", c.RequiresMet("MINFER_ATTN_DECODE_TC"), err)
	}
	with := func(l Lever, kc string) Lever {
		x := *l.Liveness
		r := *x.CUDA
		r.Needs.KVCache = kc
		x.CUDA = &r
		l.Liveness = &x
		return l
	}
	for _, kc := range []string{"f32", "f16", "q8_0"} {
		if p := kvCacheProblems(tc, kc); len(p) != 0 {
			t.Errorf("kv_cache %q refused: %v", kc, p)
		}
	}
	for _, kc := range []string{"auto", "f8", "F16", "q4_0", " f16"} {
		if p := registryProblems(with(tc, kc)); len(p) == 0 {
			t.Errorf("kv_cache %q accepted", kc)
		}
	}
	req := with(tc, "f16")
	req.Requires = append(slices.Clone(req.Requires), "MINFER_CACHE_TYPE=q8_0")
	if p := registryProblems(req); len(p) == 0 {
		t.Error("kv_cache f16 beside a required MINFER_CACHE_TYPE=q8_0 accepted")
	}
	ct, _ := Lookup("MINFER_CACHE_TYPE")
	x := *ct.Liveness
	r := *x.CUDA
	r.Needs.KVCache = "f16"
	x.CUDA = &r
	ct.Liveness = &x
	if p := registryProblems(ct); len(p) == 0 {
		t.Error("the cache lever declaring a kv_cache need accepted")
	}
}

// MINFER_ATTN_DECODE_TC_FROM is a count of KV cells (an Int lever like
// MINFER_DRAFT_N): unset it is the registry's 12288 (the H100's crossing), set it is
// what it says, 0 included (always the tensor cores); a negative, a
// fraction, a word or nothing is refused with one error naming it. The
// tensor-core decode's CUDA rule declares it at 0 as the setting under
// which the path runs from the first KV cell (needs.any_depth), and the
// registry check refuses an any_depth that names no lever, the lever
// itself, a value the lever refuses or one against a Requires pin.
func TestRegistry_AttnDecodeTCFromIsACellCountAndTheAnyDepthSetting(t *testing.T) {
	l, ok := Lookup("MINFER_ATTN_DECODE_TC_FROM")
	if !ok || l.Kind != Int || l.Default != "12288" || l.Backend != "cuda" || l.Issue != "#20" || !strings.Contains(l.Doc, "cross") {
		t.Fatalf("MINFER_ATTN_DECODE_TC_FROM: %+v", l)
	}
	if c := Default(); c.AttnDecodeTCFrom != 12288 || c.AttnDecodeTC {
		t.Errorf("defaults: from %d, tensor cores %v; want 12288, off", c.AttnDecodeTCFrom, c.AttnDecodeTC)
	}
	for v, want := range map[string]int{"0": 0, "48": 48, "32768": 32768} {
		if c, err := Parse([]string{"MINFER_ATTN_DECODE_TC_FROM=" + v}); err != nil || c.AttnDecodeTCFrom != want {
			t.Errorf("MINFER_ATTN_DECODE_TC_FROM=%s: %d, %v; want %d", v, c.AttnDecodeTCFrom, err, want)
		}
	}
	for _, v := range []string{"-1", "1.5", "deep", "", "8k"} {
		_, err := Parse([]string{"MINFER_ATTN_DECODE_TC_FROM=" + v})
		if err == nil || !strings.Contains(err.Error(), "MINFER_ATTN_DECODE_TC_FROM") || !strings.Contains(err.Error(), "non-negative integer") {
			t.Errorf("MINFER_ATTN_DECODE_TC_FROM=%q: %v, want the refusal naming it", v, err)
		}
	}
	tc, _ := Lookup("MINFER_ATTN_DECODE_TC")
	if tc.Liveness == nil || tc.Liveness.CUDA == nil || tc.Liveness.CUDA.Needs.AnyDepth != "MINFER_ATTN_DECODE_TC_FROM=0" {
		t.Fatalf("MINFER_ATTN_DECODE_TC's CUDA rule: %+v, want any_depth MINFER_ATTN_DECODE_TC_FROM=0", tc.Liveness)
	}
	if !strings.Contains(tc.Doc, "MINFER_ATTN_DECODE_TC_FROM") {
		t.Error("MINFER_ATTN_DECODE_TC's doc does not say it routes by depth from MINFER_ATTN_DECODE_TC_FROM")
	}
	if c, err := Parse([]string{"MINFER_ATTN_DECODE_TC=1", tc.Liveness.CUDA.Needs.AnyDepth}); err != nil || c.AttnDecodeTCFrom > 1 {
		t.Errorf("the any_depth setting parses to from %d, %v: want the first cell", c.AttnDecodeTCFrom, err)
	}
	for _, ad := range []string{"MINFER_ATTN_DECODE_TC_FROM=-1", "MINFER_NOPE=0", "MINFER_ATTN_DECODE_TC=1", "MINFER_ATTN_DECODE_TC_FROM", "MINFER_NO_SPLITK_ATTN=1"} {
		if p := anyDepthProblems(tc, ad); len(p) == 0 {
			t.Errorf("any_depth %q accepted", ad)
		}
	}
}

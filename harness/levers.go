package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/engine/levers"
)

// Lever is one entry of `minfer levers --json`: the registry's own
// declaration (engine/levers.Lever, one declaration of the document) as the
// binary the harness drives prints it, plus the value set in that process.
// The harness reads the registry from the binary, never from the engine's
// package; only the type is shared. Kind arrives as KindS (opt-out, opt-in,
// presence, enum, int, path, mutation).
type Lever struct {
	levers.Lever
	Current *string `json:"current,omitempty"`
}

// The registry's declarations, read back from `minfer levers --json`: one
// declaration of each (engine/levers), not a copy that could drift.
type (
	// Bars are a lever's pre-registered A/B bars.
	Bars = levers.Bars
	// Liveness is a lever's liveness rule: the arm whose lever value is On
	// runs the path; each backend has its evidence.
	Liveness = levers.Liveness
	// PathRule is one backend's evidence of the path in an arm's census.
	PathRule = levers.PathRule
	// Needs is what a workload must have for the path to run.
	Needs = levers.Needs
)

// DefaultBars are GATES.md's defaults (a registry without bars).
var DefaultBars = levers.DefaultBars

// MemoryBar is a lever's memory bar (B <= A x (1 + Frac) + MiB, and the
// cost it declares when above the default).
type MemoryBar = levers.MemoryBar

// DefaultMemory is GATES.md's default memory bar: B <= A + 1% + 64 MiB.
var DefaultMemory = levers.DefaultMemory

// MemoryOrDefault returns the lever's memory bar, or the default (a
// registry from before the memory bar, or a run between builds).
func (l Lever) MemoryOrDefault() MemoryBar {
	if l.Memory == nil {
		return DefaultMemory
	}
	return *l.Memory
}

// BarsOrDefault returns the lever's bars, or the defaults.
func (l Lever) BarsOrDefault() Bars {
	if l.Bars == nil {
		return DefaultBars
	}
	return *l.Bars
}

// Rule returns the liveness rule of the backend ("cuda" or "cpu"), nil
// when the lever declares none there.
func (l Lever) Rule(backend string) *PathRule {
	if l.Liveness == nil {
		return nil
	}
	if backend == "cpu" {
		return l.Liveness.CPU
	}
	return l.Liveness.CUDA
}

// Pin is a setting of another lever that a run of a lever fixes in both
// arms because the lever's path needs it: a Requires entry, the KV cache
// format its rule reads (Needs.KVCache), or, in the correctness gates
// only, the setting under which a path routed by depth runs from the first
// KV cell (Needs.AnyDepth).
type Pin struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// By is the declaration that pins it: PinRequires, PinKVCache or
	// PinAnyDepth.
	By string `json:"by"`
	// Why says so in a phrase, for a refusal and the report.
	Why string `json:"why"`
}

// The declarations a Pin comes from.
const (
	PinRequires = "requires" // levers.Lever.Requires
	PinKVCache  = "kv_cache" // the backend's rule's Needs.KVCache
	// PinAnyDepth: the backend's rule's Needs.AnyDepth, pinned in the
	// correctness gates only (gates.AnyDepthGate), never in the A/B.
	PinAnyDepth = "any_depth"
)

// CacheTypeLever is the lever whose value a rule's Needs.KVCache pins.
const CacheTypeLever = "MINFER_CACHE_TYPE"

// Pins are the settings a run of l on backend ("cuda", "cpu") pins in both
// arms: every Requires entry, then MINFER_CACHE_TYPE=<Needs.KVCache> where
// the backend's rule declares the format its path reads, so that every arm
// process (and the CPU reference, built from arm A's settings) runs where
// the path can: a model's auto cache may be another format (the trained
// correctness models' f32). Last, the rule's Needs.AnyDepth (PinAnyDepth):
// the setting under which a path routed by depth runs from the first KV
// cell, which the gates apply where they run the correctness models' short
// contexts and not where they time the declared workload. A Requires or
// any_depth entry that does not parse is returned as it is (Name the whole
// entry, Value ""), for the caller to refuse.
func (l Lever) Pins(backend string) []Pin {
	var out []Pin
	for _, r := range l.Requires {
		name, v, _ := strings.Cut(r, "=")
		out = append(out, Pin{Name: name, Value: v, By: PinRequires, Why: fmt.Sprintf("%s requires %s=%s", l.Name, name, v)})
	}
	if r := l.Rule(backend); r != nil && r.Needs.KVCache != "" {
		kc := r.Needs.KVCache
		out = append(out, Pin{Name: CacheTypeLever, Value: kc, By: PinKVCache,
			Why: fmt.Sprintf("%s's path runs only over a KV cache of %s (its %s liveness rule needs kv_cache %s)", l.Name, kc, backend, kc)})
	}
	if r := l.Rule(backend); r != nil && r.Needs.AnyDepth != "" {
		name, v, _ := strings.Cut(r.Needs.AnyDepth, "=")
		out = append(out, Pin{Name: name, Value: v, By: PinAnyDepth,
			Why: fmt.Sprintf("%s's path is routed by depth and runs from the first KV cell only with %s=%s, while the correctness gates' models run short contexts (its %s liveness rule's any_depth)", l.Name, name, v, backend)})
	}
	return out
}

// RunsOn reports whether the lever's path exists on the backend ("cuda",
// "cpu"): a lever of backend cuda does not run on the CPU.
func (l Lever) RunsOn(backend string) bool {
	return l.Backend == "any" || l.Backend == backend
}

// Unset is the arm value that leaves a lever's variable out of the
// environment (presence levers, or "the default").
const Unset = "unset"

// ParseLevers decodes the registry printed by `minfer levers --json`.
func ParseLevers(data []byte) ([]Lever, error) {
	var ls []Lever
	if err := json.Unmarshal(data, &ls); err != nil {
		return nil, fmt.Errorf("levers --json: %w", err)
	}
	if len(ls) == 0 {
		return nil, fmt.Errorf("levers --json: empty registry")
	}
	for i, l := range ls {
		if !strings.HasPrefix(l.Name, "MINFER_") {
			return nil, fmt.Errorf("levers --json: entry %d has name %q, want MINFER_*", i, l.Name)
		}
	}
	return ls, nil
}

// ABAble reports whether the lever declares its two arms (a lever whose
// arm B has no default, levers.Lever.NeedsB, runs only as NAME=B: not in
// a nightly's "all" nor a pull request's workload matrix).
func (l Lever) ABAble() bool { return l.ArmA != "" && l.ArmB != "" }

// FindLever returns the lever called name; the error lists the A/B-able
// levers so a usage message can show them.
func FindLever(ls []Lever, name string) (Lever, error) {
	for _, l := range ls {
		if l.Name == name {
			return l, nil
		}
	}
	var names []string
	for _, l := range ls {
		if l.HasArms() {
			names = append(names, l.Name)
		}
	}
	sort.Strings(names)
	return Lever{}, fmt.Errorf("unknown lever %q; levers with arms: %s", name, strings.Join(names, ", "))
}

// ValidValues lists the values a usage message offers.
func (l Lever) ValidValues() []string {
	switch l.KindS {
	case "opt-in", "opt-out":
		return []string{"0", "1"}
	case "presence":
		return []string{Unset, "1"}
	}
	var out []string
	for _, v := range l.Values {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Validate checks that v is a value the lever accepts (Unset always is).
func (l Lever) Validate(v string) error {
	if v == Unset {
		return nil
	}
	bad := func() error {
		return fmt.Errorf("%s=%q: valid values are %s", l.Name, v, strings.Join(l.ValidValues(), ", "))
	}
	switch l.KindS {
	case "opt-in", "opt-out":
		if v != "0" && v != "1" {
			return bad()
		}
	case "enum":
		for _, x := range l.Values {
			if x == v && x != "" {
				return nil
			}
		}
		return bad()
	case "int":
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return bad()
		}
	case "mutation":
		if !l.seamValue(v) {
			return bad()
		}
	}
	return nil
}

// seamValue checks a test-seam value against the registry's list: "SITE",
// "SITE[=F]" (SITE or SITE=F with 0 < F <= 10) or "SITE=LEVER" (SITE=a
// MINFER_* name). minfer checks it again at start.
func (l Lever) seamValue(v string) bool {
	site, arg, hasArg := strings.Cut(v, "=")
	for _, x := range l.Values {
		name, form, _ := strings.Cut(strings.TrimSuffix(x, "]"), "[")
		if f, ok := strings.CutPrefix(x, site+"="); ok && f == "LEVER" {
			return hasArg && strings.HasPrefix(arg, "MINFER_")
		}
		if name != site || site == "" {
			continue
		}
		if !hasArg {
			return true
		}
		if form == "=F" {
			f, err := strconv.ParseFloat(arg, 64)
			return err == nil && f > 0 && f <= 10
		}
		return false
	}
	return false
}

// Tolerance is a lever's declared tolerance class for the A-vs-B parity gate,
// parsed from "name: clause, clause, ..." with the clauses "max|diff| <= X",
// "rel L2 <= X", "top-1 equal at every position", "top-2 margin > M where
// compared" and "B vs exact rel L2 <= X". A class may bound max|diff|, rel
// L2 or both (both must hold). The zero class (Bitwise) demands identical
// bits.
type Tolerance struct {
	Raw        string  `json:"raw"`
	Class      string  `json:"class"`
	Bitwise    bool    `json:"bitwise"`
	Bounded    bool    `json:"bounded"`      // the class bounds max|diff|
	MaxAbsDiff float64 `json:"max_abs_diff"` // the bound when Bounded
	// RelBounded: the class bounds the relative L2 distance of B's logits
	// from A's (sqrt(sum (b-a)^2 / sum a^2), gates.CompareLogits) by RelL2.
	RelBounded bool    `json:"rel_bounded"`
	RelL2      float64 `json:"rel_l2"`
	Top1Equal  bool    `json:"top1_equal"`
	// MarginBar: positions whose top-2 margin (A's) is at or below it are
	// exempt from the top-1 check, and a greedy divergence at a step whose
	// top-2 margin is at or below it is allowed. 0: no exemption.
	MarginBar float64 `json:"margin_bar"`
	// ExactBounded: an A-vs-B top-1 disagreement is excused where B's top-1
	// is the exact evaluation's (MINFER_CPU_EXACT=1) and B is within
	// ExactRelL2 of it, top-1 equal above MarginBar (gates.Parity): for a
	// lever whose arm A quantizes what B carries (nearly) exactly, A's own
	// rounding is no defect of B. It excuses top-1 only.
	ExactBounded bool    `json:"exact_bounded,omitempty"`
	ExactRelL2   float64 `json:"exact_rel_l2,omitempty"`
}

// ParseTolerance parses a declared tolerance class; "" is bitwise.
func ParseTolerance(s string) (Tolerance, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Tolerance{Class: "bitwise", Bitwise: true, Bounded: true, Top1Equal: true}, nil
	}
	t := Tolerance{Raw: s}
	name, rest, ok := strings.Cut(s, ":")
	if !ok {
		return t, fmt.Errorf("tolerance %q: want \"class: clause, clause\"", s)
	}
	t.Class = strings.TrimSpace(name)
	for _, c := range strings.Split(rest, ",") {
		c = strings.TrimSpace(c)
		switch {
		case c == "":
		case strings.HasPrefix(c, "B vs exact rel L2"):
			// Gate 1's A vs B only: the greedy gate has no exact reference,
			// so there a divergence stays judged by MarginBar alone.
			v, err := numberAfter(c, "<=")
			if err != nil {
				return t, fmt.Errorf("tolerance %q: %w", s, err)
			}
			if v < 0 {
				return t, fmt.Errorf("tolerance %q: clause %q: a negative bound", s, c)
			}
			t.ExactRelL2, t.ExactBounded = v, true
		case strings.HasPrefix(c, "max|diff|"):
			v, err := numberAfter(c, "<=")
			if err != nil {
				return t, fmt.Errorf("tolerance %q: %w", s, err)
			}
			t.MaxAbsDiff, t.Bounded = v, true
		case strings.HasPrefix(c, "rel L2"):
			v, err := numberAfter(c, "<=")
			if err != nil {
				return t, fmt.Errorf("tolerance %q: %w", s, err)
			}
			if v < 0 {
				return t, fmt.Errorf("tolerance %q: clause %q: a negative bound", s, c)
			}
			t.RelL2, t.RelBounded = v, true
		case strings.HasPrefix(c, "top-1 equal"):
			t.Top1Equal = true
		case strings.HasPrefix(c, "top-2 margin"):
			v, err := numberAfter(c, ">")
			if err != nil {
				return t, fmt.Errorf("tolerance %q: %w", s, err)
			}
			t.MarginBar = v
		default:
			return t, fmt.Errorf("tolerance %q: unknown clause %q", s, c)
		}
	}
	if !t.Bounded && !t.RelBounded {
		return t, fmt.Errorf("tolerance %q: a class bounds max|diff| or rel L2 (or both)", s)
	}
	if t.ExactBounded && !t.Top1Equal {
		return t, fmt.Errorf("tolerance %q: \"B vs exact\" excuses top-1 disagreements, so the class needs \"top-1 equal\"", s)
	}
	return t, nil
}

func numberAfter(clause, op string) (float64, error) {
	_, v, ok := strings.Cut(clause, op)
	if !ok {
		return 0, fmt.Errorf("clause %q: want %q and a number", clause, op)
	}
	fields := strings.Fields(v)
	if len(fields) == 0 {
		return 0, fmt.Errorf("clause %q: no number", clause)
	}
	x, err := strconv.ParseFloat(strings.TrimPrefix(fields[0], "="), 64)
	if err != nil {
		return 0, fmt.Errorf("clause %q: %w", clause, err)
	}
	return x, nil
}

// String renders the class as a report phrase.
func (t Tolerance) String() string {
	if t.Bitwise {
		return "bitwise (no tolerance class declared)"
	}
	return t.Raw
}

// Workload is a lever's declared workload: the synthesized model (Shape and
// Type, "" for the run's default model) and the prefill size (PP, 0 for the
// run's default) without which its path never runs.
type Workload struct {
	Raw   string `json:"raw"`
	Shape string `json:"shape,omitempty"`
	Type  string `json:"type,omitempty"`
	PP    int    `json:"pp,omitempty"`
	Depth int    `json:"depth,omitempty"`
}

// ParseWorkload parses the registry's grammar (engine/levers Lever.Workload):
// space-separated terms, each at most once, in any order: SHAPE:TYPE (the
// model `minfer synth --shape SHAPE --type TYPE` writes), ppN (N >= 1
// prefill tokens) and dN (N >= 1 cells of KV cache filled before each
// bench test: the A/B and profile gates run at that depth). "" is the default workload (the zero Workload).
func ParseWorkload(s string) (Workload, error) {
	w := Workload{Raw: strings.TrimSpace(s)}
	for _, term := range strings.Fields(s) {
		if ok, err := countTerm(term, "d", &w.Depth); ok {
			if err != nil {
				return Workload{}, fmt.Errorf("workload %q: term %q: want one dN (a KV depth) with N >= 1", s, term)
			}
			continue
		}
		if ok, err := countTerm(term, "pp", &w.PP); ok {
			if err != nil {
				return Workload{}, fmt.Errorf("workload %q: term %q: want one ppN with N >= 1", s, term)
			}
			continue
		}
		sh, ty, ok := strings.Cut(term, ":")
		if !ok || !plainName(sh) || !plainName(ty) || w.Shape != "" {
			return Workload{}, fmt.Errorf("workload %q: term %q: want one SHAPE:TYPE, one ppN and/or one dN", s, term)
		}
		w.Shape, w.Type = sh, ty
	}
	return w, nil
}

// countTerm reads a workload term PREFIX<N> into *v: ok when term has the
// prefix and is no SHAPE:TYPE; an error when N is not a count >= 1 or *v
// was set by an earlier term.
func countTerm(term, prefix string, v *int) (ok bool, err error) {
	n, ok := strings.CutPrefix(term, prefix)
	if !ok || strings.Contains(term, ":") {
		return false, nil
	}
	c, err := strconv.Atoi(n)
	if err != nil || c < 1 || *v != 0 {
		return true, errors.New("want one count >= 1")
	}
	*v = c
	return true, nil
}

// plainName: letters, digits, '.', '_' and '-' (a shape or type name
// becomes part of a file name).
func plainName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// HasModel reports whether the workload names its own model.
func (w Workload) HasModel() bool { return w.Shape != "" }

// ModelName is "SHAPE:TYPE" ("" when the workload keeps the default model).
func (w Workload) ModelName() string {
	if !w.HasModel() {
		return ""
	}
	return w.Shape + ":" + w.Type
}

// SynthFileName is the file name abtest (and scripts/nightly.sh,
// scripts/abtest-device.sh) give the model `minfer synth --shape SHAPE
// --type TYPE --seed SEED` writes: SHAPE-TYPE-seedSEED.gguf.
func SynthFileName(shape, typ string, seed uint64) string {
	return fmt.Sprintf("%s-%s-seed%d.gguf", shape, typ, seed)
}

// MatchesModel reports whether model (a path; "" is minfer's embedded
// default) is the workload's model. The rule is the file name: a
// synthesized model is named SynthFileName(SHAPE, TYPE, any seed) (or
// SHAPE-TYPE.gguf), compared without regard to case. A model under another
// name does not match even if its weights are the same shape and type: the
// harness does not open the file to find out, so the mismatch note it
// prints is a prompt to check, not a proof. A workload without a model
// matches every model.
func (w Workload) MatchesModel(model string) bool {
	if !w.HasModel() {
		return true
	}
	if model == "" {
		return false
	}
	base := strings.ToLower(filepath.Base(model))
	stem := strings.ToLower(w.Shape + "-" + w.Type)
	return base == stem+".gguf" || strings.HasPrefix(base, stem+"-seed") && strings.HasSuffix(base, ".gguf")
}

// WorkloadMismatch says, in one sentence, which workload the lever declares
// when a run on model (a path, "" the embedded default) with pp prefill
// tokens is not it ("" when the lever declares none or the run matches):
// "MINFER_FUSE_QKNORM's path needs qwen3-0.6b:Q8_0; this run used
// qwen2-0.5b-Q8_0-seed1.gguf". A workload that does not parse is said too.
func (l Lever) WorkloadMismatch(model string, pp int) string {
	if strings.TrimSpace(l.Workload) == "" {
		return ""
	}
	w, err := ParseWorkload(l.Workload)
	if err != nil {
		return fmt.Sprintf("%s declares a workload abtest cannot read: %v", l.Name, err)
	}
	var used []string
	if !w.MatchesModel(model) {
		name := "minfer's embedded default model"
		if model != "" {
			name = filepath.Base(model)
		}
		used = append(used, name)
	}
	if w.PP > 0 && pp != w.PP {
		used = append(used, fmt.Sprintf("pp%d", pp))
	}
	if len(used) == 0 {
		return ""
	}
	return fmt.Sprintf("%s's path needs %s; this run used %s", l.Name, w.Raw, strings.Join(used, " "))
}

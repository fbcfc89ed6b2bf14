package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Lever is one entry of `minfer levers --json`. The harness reads the
// registry from the binary it drives, never from the engine's packages.
type Lever struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"` // opt-out, opt-in, presence, enum, int, path
	Default   string   `json:"default"`
	Values    []string `json:"values"`
	Doc       string   `json:"doc"`
	Backend   string   `json:"backend"`
	Path      string   `json:"path"`
	Issue     string   `json:"issue"`
	ArmA      string   `json:"arm_a,omitempty"`
	ArmB      string   `json:"arm_b,omitempty"`
	Tolerance string   `json:"tolerance,omitempty"`
	// Reserved: the path is not built yet; the lever switches nothing and
	// abtest refuses to run it (a run could only measure noise).
	Reserved string  `json:"reserved,omitempty"`
	Current  *string `json:"current,omitempty"`
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

// ABAble reports whether the lever declares its two arms.
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
		if l.ABAble() {
			names = append(names, l.Name)
		}
	}
	sort.Strings(names)
	return Lever{}, fmt.Errorf("unknown lever %q; levers with arms: %s", name, strings.Join(names, ", "))
}

// ValidValues lists the values a usage message offers.
func (l Lever) ValidValues() []string {
	switch l.Kind {
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
	switch l.Kind {
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
	}
	return nil
}

// Tolerance is a lever's declared tolerance class for the A-vs-B parity gate,
// parsed from "name: clause, clause, ..." with the clauses "max|diff| <= X",
// "rel L2 <= X", "top-1 equal at every position" and "top-2 margin > M where
// compared". A class may bound max|diff|, rel L2 or both (both must hold).
// The zero class (Bitwise) demands identical bits.
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

package gates

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/gpumem"
	"github.com/minfer-go/minfer/schema"
)

// Memory is the other side of gate 3's bill (GATES.md, issue 19): each arm
// process's peak device memory, sampled from outside the process
// (harness.Runner.GPUMem), held to the lever's memory bar.

// Statuses of the memory check.
const (
	MemWithin      = "within"
	MemOver        = "over"
	MemNotMeasured = "not measured"
)

// MemArm is one arm's device memory over its gate-3 processes (the
// untimed warmup and every round).
type MemArm struct {
	PeakBytes uint64 `json:"peak_bytes,omitempty"` // the largest peak of its measured processes
	Processes int    `json:"processes"`
	Measured  int    `json:"measured"`
	Method    string `json:"method,omitempty"` // pid, appearance (gpumem.Usage)
	// Why is the first reason one of its processes was not measured.
	Why string `json:"why,omitempty"`
	// Engine is the engine's own device_memory field of its last bench
	// JSON (raw), the cross-check; "" where the JSON has none.
	Engine string `json:"engine,omitempty"`
}

// MemoryCheck is gate 3's memory evidence and verdict.
type MemoryCheck struct {
	Status string            `json:"status"`
	A      MemArm            `json:"a"`
	B      MemArm            `json:"b"`
	Bar    harness.MemoryBar `json:"bar"`
	// LimitBytes is the bar applied to arm A's peak: A x (1 + Frac) + MiB.
	LimitBytes uint64 `json:"limit_bytes,omitempty"`
	Why        string `json:"why,omitempty"` // not measured
	// PairedWhat is the paired model's plan the limit includes (Bar.Paired).
	PairedWhat string `json:"paired,omitempty"`
	Source     string `json:"source,omitempty"`
	CrossCheck string `json:"cross_check"`
}

// Line is the report's memory line: "memory: A 10.1 GiB, B 17.8 GiB
// (+76%); ...", or "memory: not measured (why)".
func (m *MemoryCheck) Line() string {
	if m == nil {
		return "memory: not measured (gate 3, which measures it, did not run)"
	}
	if m.Status == MemNotMeasured {
		return "memory: not measured (" + m.Why + ")"
	}
	s := fmt.Sprintf("memory: A %s, B %s (%s)", gpumem.GiB(m.A.PeakBytes), gpumem.GiB(m.B.PeakBytes), RelPct(m.A.PeakBytes, m.B.PeakBytes))
	verdict := "within the bar"
	if m.Status == MemOver {
		verdict = "**over the bar, FAIL**"
	}
	s += fmt.Sprintf(" — %s: %s (%s at this A", verdict, m.Bar.String(), gpumem.GiB(m.LimitBytes))
	if m.PairedWhat != "" {
		s += "; the paired model: " + m.PairedWhat
	}
	return s + ")"
}

// PairedPlan is the engine's memory plan of the model a paired lever's arm
// B names (MINFER_DRAFT's draft): what it needs on the device beside the
// run's model, and the plan's own words.
type PairedPlan struct {
	Model string `json:"model"`
	Bytes uint64 `json:"need_bytes"`
	What  string `json:"what"`
}

// Details says how the figures were taken, for the line after it.
func (m *MemoryCheck) Details() string {
	if m == nil || m.Status == MemNotMeasured {
		if m != nil && m.CrossCheck != "" {
			return "Cross-check: " + m.CrossCheck + "."
		}
		return ""
	}
	arm := func(a MemArm) string {
		s := fmt.Sprintf("%d of %d processes measured (by %s)", a.Measured, a.Processes, a.Method)
		if a.Why != "" {
			s += "; one not measured: " + a.Why
		}
		return s
	}
	return fmt.Sprintf("Peak device memory of each arm process, sampled from outside it by %s every %s for its lifetime; the arm's figure is its largest: A %s; B %s. Cross-check: %s.",
		m.Source, gpumem.DefaultInterval, arm(m.A), arm(m.B), m.CrossCheck)
}

// RelPct is b against a as a signed percentage ("+76%", "-0.4%").
func RelPct(a, b uint64) string {
	if a == 0 {
		return "A holds none"
	}
	x := (float64(b)/float64(a) - 1) * 100
	if math.Abs(x) >= 10 {
		return fmt.Sprintf("%+.0f%%", x)
	}
	return fmt.Sprintf("%+.1f%%", x)
}

// memArm sums up the usages of one arm's processes.
func memArm(us []*gpumem.Usage, engine []string) MemArm {
	a := MemArm{Processes: len(us)}
	methods := map[string]bool{}
	for _, u := range us {
		switch {
		case u == nil:
			if a.Why == "" {
				a.Why = "the harness sampled no device memory in this run"
			}
		case u.Measured:
			a.Measured++
			a.PeakBytes = max(a.PeakBytes, u.PeakBytes)
			methods[u.Method] = true
		case a.Why == "":
			a.Why = u.Why
		}
	}
	var ms []string
	for k := range methods {
		ms = append(ms, k)
	}
	sort.Strings(ms)
	a.Method = strings.Join(ms, ", ")
	for _, e := range engine {
		if e != "" {
			a.Engine = e
		}
	}
	return a
}

// memoryCheck holds arm B's peak to the bar over A's.
func memoryCheck(cfg Config, d *ABDetail) *MemoryCheck {
	bar := cfg.Memory
	if bar == (harness.MemoryBar{}) {
		bar = harness.DefaultMemory
	}
	m := &MemoryCheck{Bar: bar}
	var ua, ub []*gpumem.Usage
	var ea, eb []string
	for _, w := range d.Warmup {
		if w.Arm == cfg.A.Name {
			ua = append(ua, w.Mem)
		} else {
			ub = append(ub, w.Mem)
		}
	}
	rounds := d.Rounds
	if d.Failed != nil {
		rounds = append(append([]Round{}, rounds...), *d.Failed)
	}
	for _, r := range rounds {
		for _, x := range []struct {
			run ArmRun
			u   *[]*gpumem.Usage
			e   *[]string
		}{{r.A, &ua, &ea}, {r.B, &ub, &eb}} {
			if x.run.Mem != nil || x.run.Wall > 0 {
				*x.u, *x.e = append(*x.u, x.run.Mem), append(*x.e, x.run.EngineMem)
			}
		}
	}
	for _, u := range append(append([]*gpumem.Usage{}, ua...), ub...) {
		if u != nil && u.Source != "" {
			m.Source = u.Source
		}
	}
	m.A, m.B = memArm(ua, ea), memArm(ub, eb)
	switch {
	case m.A.Engine == "" && m.B.Engine == "":
		m.CrossCheck = "the engine's bench JSON has no device_memory field (issue 19, item 1)"
	default:
		m.CrossCheck = fmt.Sprintf("the engine's own device_memory, last round: A %s, B %s", orNone(m.A.Engine), orNone(m.B.Engine))
	}
	switch {
	case cfg.Backend == "cpu":
		m.Status, m.Why = MemNotMeasured, "the arms ran on the CPU backend: no device memory"
	case m.A.Processes == 0 || m.B.Processes == 0:
		m.Status, m.Why = MemNotMeasured, "no arm process ran"
	case m.A.Measured == 0:
		m.Status, m.Why = MemNotMeasured, "arm A: "+m.A.Why
	case m.B.Measured == 0:
		m.Status, m.Why = MemNotMeasured, "arm B: "+m.B.Why
	case bar.Paired && cfg.Paired == nil:
		m.Status, m.Why = MemNotMeasured, "the bar allows the paired model's planned memory, and no plan of it was made (harness/runs makes one before the gates)"
	default:
		m.LimitBytes = uint64(float64(m.A.PeakBytes)*(1+bar.Frac) + bar.MiB*(1<<20))
		if bar.Paired {
			m.LimitBytes += cfg.Paired.Bytes
			m.PairedWhat = cfg.Paired.What
		}
		m.Status = MemWithin
		if m.B.PeakBytes > m.LimitBytes {
			m.Status = MemOver
		}
	}
	return m
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// engineMemory is the device_memory field of a bench JSON ("" without
// one): the engine's own figure, a cross-check of the outside
// measurement. minfer's document (schema.DeviceMemory) is summed up in
// one phrase; any other is given raw.
func engineMemory(stdout []byte) string {
	var doc map[string]json.RawMessage
	if json.Unmarshal(stdout, &doc) != nil {
		return ""
	}
	raw, ok := doc["device_memory"]
	if !ok || string(raw) == "null" {
		return ""
	}
	var dm schema.DeviceMemory
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if dec.Decode(&dm) == nil && dm.Backend != "" {
		return engineMemoryPhrase(dm)
	}
	var c bytes.Buffer
	if json.Compact(&c, raw) != nil {
		return ""
	}
	s := c.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// markRound marks a round during which another process was on the GPU
// (either arm's sampling saw it; CUDA runs only: a CPU run does not share
// the device), and returns whether it did.
func markRound(cfg Config, r *Round) bool {
	if cfg.Backend == "cpu" {
		return false
	}
	seen := map[int]gpumem.Other{}
	for _, u := range []*gpumem.Usage{r.A.Mem, r.B.Mem} {
		if u == nil {
			continue
		}
		for _, o := range u.Others {
			if x, ok := seen[o.PID]; !ok || o.PeakBytes > x.PeakBytes {
				seen[o.PID] = o
			}
		}
	}
	r.Neighbours = nil
	for _, o := range seen {
		r.Neighbours = append(r.Neighbours, o)
	}
	sort.Slice(r.Neighbours, func(i, j int) bool { return r.Neighbours[i].PID < r.Neighbours[j].PID })
	r.Marked = ""
	if len(r.Neighbours) > 0 {
		r.Marked = "another process on the GPU: " + gpumem.OthersLine(r.Neighbours)
	}
	return r.Marked != ""
}

// engineMemoryPhrase is minfer's device_memory in one phrase: the classes
// and their sum, what the driver lost since the backend opened, and the
// plan's total (MiB).
func engineMemoryPhrase(dm schema.DeviceMemory) string {
	mib := func(b uint64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }
	c := dm.Classes
	s := fmt.Sprintf("%s MiB counted (weights %s, derived %s, KV %s, activations %s, workspace %s), %s MiB by the driver since open",
		mib(dm.TotalBytes), mib(c.Weights), mib(c.DerivedWeights), mib(c.KVCache), mib(c.Activations), mib(c.Workspace), mib(dm.Driver.UsedSinceOpenBytes))
	if dm.Plan != nil {
		s += ", plan " + mib(dm.Plan.TotalBytes) + " MiB with the context"
	}
	return s
}

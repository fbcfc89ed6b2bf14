package profile

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Census is the engine's launch census (MINFER_LAUNCH_CENSUS=1): kernel name
// -> launches in the process.
type Census map[string]int

// ParseCensus finds the census JSON in a process's output. It accepts an
// object of counts, or one wrapping it under "launch_census", "census" or
// "kernels", or an array of {"kernel"|"name", "launches"|"count"}; the last
// line (or the whole text) that parses wins.
func ParseCensus(out string) (Census, error) {
	cands := []string{out}
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "{") || strings.HasPrefix(l, "[") {
			cands = append(cands, l)
		}
	}
	if i := strings.Index(out, "{"); i >= 0 {
		cands = append(cands, out[i:])
	}
	for _, c := range cands {
		if cs, ok := decodeCensus([]byte(strings.TrimSpace(c))); ok {
			return cs, nil
		}
	}
	return nil, fmt.Errorf("launch census: no census JSON in the output")
}

func decodeCensus(b []byte) (Census, bool) {
	var wrapped map[string]json.RawMessage
	if json.Unmarshal(b, &wrapped) == nil {
		for _, k := range []string{"launch_census", "census", "kernels", "launches"} {
			if raw, ok := wrapped[k]; ok {
				if cs, ok := decodeCensus(raw); ok {
					return cs, true
				}
			}
		}
		var flat map[string]int
		if json.Unmarshal(b, &flat) == nil {
			return Census(flat), true
		}
	}
	var arr []struct {
		Kernel   string `json:"kernel"`
		Name     string `json:"name"`
		Launches int    `json:"launches"`
		Count    int    `json:"count"`
	}
	if json.Unmarshal(b, &arr) == nil && len(arr) > 0 {
		cs := Census{}
		for _, e := range arr {
			n := e.Kernel
			if n == "" {
				n = e.Name
			}
			cs[n] += e.Launches + e.Count
		}
		return cs, true
	}
	return nil, false
}

// CensusDiff is one kernel whose launches differ between two arms.
type CensusDiff struct {
	Kernel string `json:"kernel"`
	A      int    `json:"a"`
	B      int    `json:"b"`
}

// Diff lists the kernels whose counts differ, sorted by name.
func Diff(a, b Census) []CensusDiff {
	names := map[string]bool{}
	for k := range a {
		names[k] = true
	}
	for k := range b {
		names[k] = true
	}
	var out []CensusDiff
	for k := range names {
		if a[k] != b[k] {
			out = append(out, CensusDiff{Kernel: k, A: a[k], B: b[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kernel < out[j].Kernel })
	return out
}

// Package profile parses what the device profilers print: ncu CSV, nsys
// stats CSV, cuobjdump SASS, the engine's launch census, and `go test -v`
// output of the device suite.
package profile

import (
	"encoding/csv"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// NCUMetric is one metric of one kernel over its profiled launches.
type NCUMetric struct {
	Kernel string    `json:"kernel"`
	Metric string    `json:"metric"`
	Unit   string    `json:"unit"`
	Values []float64 `json:"-"`
	// Missing counts launches that reported "n/a": kept as missing, never 0.
	Missing int `json:"missing"`
	// Geometry counts this metric's launches per grid and block, read from
	// the "Grid Size" / "Block Size" columns of per-launch output (nil when
	// the CSV has none).
	Geometry map[NCUGeometry]int `json:"-"`
}

// NCUGeometry is one launch shape as ncu prints it: "(32, 14, 1)".
type NCUGeometry struct {
	Grid, Block string
}

// Launches is how many profiled launches reported this metric, n/a included.
func (m NCUMetric) Launches() int { return len(m.Values) + m.Missing }

// Mean of the present values (NaN when none).
func (m NCUMetric) Mean() float64 {
	if len(m.Values) == 0 {
		return math.NaN()
	}
	var s float64
	for _, v := range m.Values {
		s += v
	}
	return s / float64(len(m.Values))
}

// ParseNCUCSV parses `ncu --csv` (run with LC_ALL=C) output: any lines before
// the header ("==PROF==" chatter, program output) are skipped; numbers lose
// their thousands separators; "n/a" is counted as missing. Rows come back
// sorted by kernel then metric. Kernel names may hold commas and
// parentheses (CSV quoting); per-launch output's "Grid Size" and "Block Size"
// columns are counted in Geometry.
func ParseNCUCSV(out string) ([]NCUMetric, error) {
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), `"ID"`) && strings.Contains(l, `"Metric Name"`) {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("ncu csv: no header line with \"Metric Name\"")
	}
	var body []string
	for _, l := range lines[start:] {
		if strings.HasPrefix(strings.TrimSpace(l), `"`) {
			body = append(body, l)
		}
	}
	r := csv.NewReader(strings.NewReader(strings.Join(body, "\n")))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("ncu csv: %w", err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, need := range []string{"Kernel Name", "Metric Name", "Metric Value"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("ncu csv: no %q column", need)
		}
	}
	byKey := map[[2]string]*NCUMetric{}
	for _, rec := range recs[1:] {
		if len(rec) < len(recs[0]) {
			continue
		}
		k := [2]string{rec[col["Kernel Name"]], rec[col["Metric Name"]]}
		m := byKey[k]
		if m == nil {
			m = &NCUMetric{Kernel: k[0], Metric: k[1]}
			if c, ok := col["Metric Unit"]; ok {
				m.Unit = rec[c]
			}
			byKey[k] = m
		}
		if gc, ok := col["Grid Size"]; ok {
			if bc, ok := col["Block Size"]; ok {
				if m.Geometry == nil {
					m.Geometry = map[NCUGeometry]int{}
				}
				m.Geometry[NCUGeometry{Grid: rec[gc], Block: rec[bc]}]++
			}
		}
		v, ok := ParseNumber(rec[col["Metric Value"]])
		if !ok {
			m.Missing++
			continue
		}
		m.Values = append(m.Values, v)
	}
	out2 := make([]NCUMetric, 0, len(byKey))
	for _, m := range byKey {
		out2 = append(out2, *m)
	}
	sort.Slice(out2, func(i, j int) bool {
		if out2[i].Kernel != out2[j].Kernel {
			return out2[i].Kernel < out2[j].Kernel
		}
		return out2[i].Metric < out2[j].Metric
	})
	return out2, nil
}

// ParseNumber reads a profiler number: thousands separators stripped;
// "n/a", "" and "-" are missing (ok false).
func ParseNumber(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "n/a", "-", "nan":
		return 0, false
	}
	s = strings.ReplaceAll(s, ",", "")
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// NsysKernel is one row of `nsys stats --report cuda_gpu_kern_sum --format csv`.
type NsysKernel struct {
	Name      string  `json:"name"`
	TimePct   float64 `json:"time_pct"`
	TotalNS   float64 `json:"total_ns"`
	Instances int     `json:"instances"`
	AvgNS     float64 `json:"avg_ns"`
	MedNS     float64 `json:"med_ns"`
	MinNS     float64 `json:"min_ns"`
	MaxNS     float64 `json:"max_ns"`
}

// ParseNsysKernSum parses the cuda_gpu_kern_sum CSV report.
func ParseNsysKernSum(out string) ([]NsysKernel, error) {
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "Time (%)") && strings.Contains(l, "Name") {
			start = i
			break
		}
	}
	if start < 0 {
		if strings.Contains(out, "does not contain CUDA kernel data") {
			return nil, fmt.Errorf("nsys: the report does not contain CUDA kernel data (profiler not flushed at exit?)")
		}
		return nil, fmt.Errorf("nsys csv: no cuda_gpu_kern_sum header")
	}
	r := csv.NewReader(strings.NewReader(strings.Join(lines[start:], "\n")))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("nsys csv: %w", err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	get := func(rec []string, name string) float64 {
		c, ok := col[name]
		if !ok || c >= len(rec) {
			return math.NaN()
		}
		v, ok := ParseNumber(rec[c])
		if !ok {
			return math.NaN()
		}
		return v
	}
	var ks []NsysKernel
	for _, rec := range recs[1:] {
		c, ok := col["Name"]
		if !ok || c >= len(rec) || rec[c] == "" {
			continue
		}
		ks = append(ks, NsysKernel{Name: rec[c], TimePct: get(rec, "Time (%)"), TotalNS: get(rec, "Total Time (ns)"),
			Instances: int(get(rec, "Instances")), AvgNS: get(rec, "Avg (ns)"), MedNS: get(rec, "Med (ns)"),
			MinNS: get(rec, "Min (ns)"), MaxNS: get(rec, "Max (ns)")})
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("nsys csv: header but no kernel rows")
	}
	return ks, nil
}

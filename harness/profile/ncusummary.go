package profile

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The ncu metrics the per-kernel summary reads (scripts/device-ncu.sh
// collects them). A metric the CSV lacks is shown as "-", never as 0.
const (
	NCUDuration      = "gpu__time_duration.sum"
	NCUDRAMRead      = "dram__bytes_read.sum"
	NCUDRAMWrite     = "dram__bytes_write.sum"
	NCUSMThroughput  = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
	NCUIssueSlots    = "sm__inst_issued.avg.pct_of_peak_sustained_active"
	NCUTensorPipe    = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
	NCUDRAMPct       = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
	NCURegisters     = "launch__registers_per_thread"
	NCUOccupancy     = "sm__warps_active.avg.pct_of_peak_sustained_active"
	NCUBankConflicts = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
	NCUDynSmem       = "launch__shared_mem_per_block_dynamic"
)

// Thresholds of the bound rule (NCUBoundRule states them for the reader).
const (
	BoundMemoryOfFloor = 0.60 // achieved DRAM GB/s over the copy floor
	BoundTensorPct     = 50.0 // tensor pipe, % of peak while active
	BoundIssuePct      = 70.0 // issue slots, % of peak while active
	BoundSMPct         = 60.0 // sm__throughput: the busiest SM unit, % of peak
	BoundOccupancyPct  = 25.0 // achieved occupancy
)

// NCUBoundRule is the rule ClassifyBound applies, in its order; the report
// prints it so a reader can check every verdict against the row's numbers.
var NCUBoundRule = fmt.Sprintf("first that holds: (1) achieved DRAM GB/s >= %.0f%% of the floor: **memory bound**; "+
	"(2) tensor pipe >= %.0f%% or issue slots >= %.0f%%: **compute/issue bound**; "+
	"(3) SM throughput >= %.0f%% (some other SM unit - LSU, ALU, shared memory - near its peak): **SM-unit bound**; "+
	"(4) achieved occupancy < %.0f%%: **latency/occupancy bound**; "+
	"(5) otherwise: **latency bound** (nothing near a peak with enough warps: dependency or memory latency, small grid, tail). "+
	"A clause whose metric is absent (\"-\") cannot hold; if no clause holds and one was absent the verdict is **undetermined**.",
	BoundMemoryOfFloor*100, BoundTensorPct, BoundIssuePct, BoundSMPct, BoundOccupancyPct)

// NCUKernelSummary is one kernel over the profiled window. Float fields are
// NaN where the CSV lacks the metric (or every launch said n/a).
type NCUKernelSummary struct {
	Kernel   string
	Launches int
	TotalNS  float64 // sum of the launches' durations
	MeanNS   float64
	Share    float64 // TotalNS over the window's total
	// BytesPerLaunch is mean DRAM read + write; NaN when either is absent.
	BytesPerLaunch float64
	GBs            float64 // BytesPerLaunch / MeanNS (bytes per ns = GB/s)
	OfFloor        float64 // GBs over the floor
	SMPct          float64
	IssuePct       float64
	TensorPct      float64
	DRAMPct        float64
	Registers      float64
	Occupancy      float64
	BankConflicts  float64 // per launch
	DynSmem        float64 // bytes per block
	Geometry       []NCUGeometryCount
	Bound          Bound
}

// NCUGeometryCount is one launch shape and how many launches had it.
type NCUGeometryCount struct {
	NCUGeometry
	N int
}

// Bound is a kernel's likely limiter by NCUBoundRule, with the numbers.
type Bound struct {
	Class string // "memory bound", "compute/issue bound", ..., "undetermined"
	Why   string
}

// NCUWindow is the per-kernel summary of one ncu CSV (one profiled window).
type NCUWindow struct {
	Kernels  []NCUKernelSummary // by total duration, largest first
	Launches int                // launches profiled, all kernels
	TotalNS  float64
	FloorGBs float64
	Notes    []string // unit problems, suspicious windows
}

// loadTimeKernels name kernels that run at model load, not per token: a
// window holding one started too early.
var loadTimeKernels = []string{"repack"}

// SummarizeNCU aggregates ParseNCUCSV's rows per kernel. floorGBs is the
// bandwidth the achieved GB/s is compared with (the measured HBM copy
// ceiling).
func SummarizeNCU(ms []NCUMetric, floorGBs float64) (NCUWindow, error) {
	if !(floorGBs > 0) {
		return NCUWindow{}, fmt.Errorf("ncu summary: floor %v GB/s, want > 0", floorGBs)
	}
	byKernel := map[string]map[string]NCUMetric{}
	var order []string
	for _, m := range ms {
		if byKernel[m.Kernel] == nil {
			byKernel[m.Kernel] = map[string]NCUMetric{}
			order = append(order, m.Kernel)
		}
		byKernel[m.Kernel][m.Metric] = m
	}
	if len(order) == 0 {
		return NCUWindow{}, fmt.Errorf("ncu summary: the CSV has a header but no kernel rows")
	}
	win := NCUWindow{FloorGBs: floorGBs}
	badUnit := map[string]bool{}
	for _, name := range order {
		mm := byKernel[name]
		k := NCUKernelSummary{Kernel: name}
		var most NCUMetric
		for _, m := range mm {
			if m.Launches() > k.Launches || (m.Launches() == k.Launches && m.Metric < most.Metric) {
				k.Launches, most = m.Launches(), m
			}
		}
		k.Geometry = geometryCounts(most.Geometry)
		// scaled returns the metric's present values in its base unit
		// (ns, bytes); nil when absent or in a unit it does not know.
		scaled := func(metric string, base map[string]float64) []float64 {
			m, ok := mm[metric]
			if !ok || len(m.Values) == 0 {
				return nil
			}
			f, ok := base[m.Unit]
			if !ok {
				badUnit[metric+" in "+strconv.Quote(m.Unit)] = true
				return nil
			}
			out := make([]float64, len(m.Values))
			for i, v := range m.Values {
				out[i] = v * f
			}
			return out
		}
		dur := scaled(NCUDuration, timeUnits)
		k.TotalNS, k.MeanNS = sum(dur), mean(dur)
		rd, wr := mean(scaled(NCUDRAMRead, byteUnits)), mean(scaled(NCUDRAMWrite, byteUnits))
		k.BytesPerLaunch = rd + wr // NaN when either is absent
		k.GBs = k.BytesPerLaunch / k.MeanNS
		k.OfFloor = k.GBs / floorGBs
		plain := func(metric string) float64 {
			if m, ok := mm[metric]; ok {
				return m.Mean()
			}
			return math.NaN()
		}
		k.SMPct, k.IssuePct, k.TensorPct = plain(NCUSMThroughput), plain(NCUIssueSlots), plain(NCUTensorPipe)
		k.DRAMPct, k.Registers, k.Occupancy = plain(NCUDRAMPct), plain(NCURegisters), plain(NCUOccupancy)
		k.BankConflicts = plain(NCUBankConflicts)
		k.DynSmem = mean(scaled(NCUDynSmem, byteUnits))
		k.Bound = ClassifyBound(k)
		win.Kernels = append(win.Kernels, k)
		win.Launches += k.Launches
		if !math.IsNaN(k.TotalNS) {
			win.TotalNS += k.TotalNS
		}
	}
	for i := range win.Kernels {
		win.Kernels[i].Share = win.Kernels[i].TotalNS / win.TotalNS
	}
	sort.SliceStable(win.Kernels, func(i, j int) bool {
		a, b := win.Kernels[i], win.Kernels[j]
		if math.IsNaN(a.TotalNS) != math.IsNaN(b.TotalNS) {
			return !math.IsNaN(a.TotalNS) // kernels without a duration last
		}
		if a.TotalNS != b.TotalNS && !math.IsNaN(a.TotalNS) {
			return a.TotalNS > b.TotalNS
		}
		return a.Kernel < b.Kernel
	})
	for u := range badUnit {
		win.Notes = append(win.Notes, "unit not understood, metric shown as \"-\": "+u)
	}
	for _, k := range win.Kernels {
		for _, lt := range loadTimeKernels {
			if strings.Contains(k.Kernel, lt) {
				win.Notes = append(win.Notes, fmt.Sprintf("the window holds load-time kernel %s: the launch skip is too small for steady state", k.Kernel))
			}
		}
	}
	sort.Strings(win.Notes)
	return win, nil
}

// ClassifyBound applies NCUBoundRule to one kernel.
func ClassifyBound(k NCUKernelSummary) Bound {
	var absent []string
	has := func(v float64, what string) bool {
		if math.IsNaN(v) {
			absent = append(absent, what)
			return false
		}
		return true
	}
	if has(k.OfFloor, "GB/s") && k.OfFloor >= BoundMemoryOfFloor {
		return Bound{"memory bound", fmt.Sprintf("%.0f GB/s = %.0f%% of the floor >= %.0f%%", k.GBs, 100*k.OfFloor, 100*BoundMemoryOfFloor)}
	}
	tensor, issue := has(k.TensorPct, "tensor pipe"), has(k.IssuePct, "issue slots")
	if tensor && k.TensorPct >= BoundTensorPct {
		return Bound{"compute/issue bound", fmt.Sprintf("tensor pipe %.0f%% >= %.0f%%", k.TensorPct, BoundTensorPct)}
	}
	if issue && k.IssuePct >= BoundIssuePct {
		return Bound{"compute/issue bound", fmt.Sprintf("issue slots %.0f%% >= %.0f%%", k.IssuePct, BoundIssuePct)}
	}
	if has(k.SMPct, "SM throughput") && k.SMPct >= BoundSMPct {
		return Bound{"SM-unit bound", fmt.Sprintf("SM throughput %.0f%% >= %.0f%% with tensor pipe and issue slots below their marks", k.SMPct, BoundSMPct)}
	}
	if has(k.Occupancy, "occupancy") && k.Occupancy < BoundOccupancyPct {
		return Bound{"latency/occupancy bound", fmt.Sprintf("occupancy %.0f%% < %.0f%%, nothing near a peak", k.Occupancy, BoundOccupancyPct)}
	}
	if len(absent) > 0 {
		return Bound{"undetermined", "no clause holds and " + strings.Join(absent, ", ") + " absent"}
	}
	return Bound{"latency bound", fmt.Sprintf("%.0f%% of the floor, tensor %.0f%%, issue %.0f%%, SM %.0f%%, occupancy %.0f%%: nothing near a peak",
		100*k.OfFloor, k.TensorPct, k.IssuePct, k.SMPct, k.Occupancy)}
}

// timeUnits and byteUnits scale ncu's units to ns and bytes. `ncu --csv`
// prints base units; the scaled ones are read in case --print-units auto was
// used.
var (
	// ncu 2025.3 with --print-units base writes "ns" and "byte/block"
	// (H200, 2026-11-29); older ones "nsecond".
	timeUnits = map[string]float64{"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
		"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
	byteUnits = map[string]float64{"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
		"Kibyte": 1 << 10, "Mibyte": 1 << 20, "Gibyte": 1 << 30, "byte/block": 1}
)

func sum(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

func mean(v []float64) float64 { return sum(v) / float64(len(v)) }

func geometryCounts(g map[NCUGeometry]int) []NCUGeometryCount {
	out := make([]NCUGeometryCount, 0, len(g))
	for k, n := range g {
		out = append(out, NCUGeometryCount{k, n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		if out[i].Grid != out[j].Grid {
			return out[i].Grid < out[j].Grid
		}
		return out[i].Block < out[j].Block
	})
	return out
}

// NCUTitle reads scripts/device-ncu.sh's file name ncu-SHAPE-TYPE-PHASE.csv
// as "SHAPE TYPE PHASE"; another name is returned as it is.
func NCUTitle(path string) string {
	base := filepath.Base(path)
	s, ok := strings.CutPrefix(strings.TrimSuffix(base, ".csv"), "ncu-")
	if !ok || s == base {
		return base
	}
	parts := strings.Split(s, "-")
	if len(parts) < 3 {
		return base
	}
	n := len(parts)
	return strings.Join(parts[:n-2], "-") + " " + parts[n-2] + " " + parts[n-1]
}

// WriteNCUHeader writes what every table of the file shares: the floor,
// the columns and the bound rule.
func WriteNCUHeader(w io.Writer, floorGBs float64) error {
	_, err := fmt.Fprintf(w, "# ncu per-kernel evidence\n\n"+
		"One table per profiled window (scripts/device-ncu.sh: per-launch `ncu --csv`, clocks locked to base unless the log says otherwise, "+
		"caches flushed before each profiled launch). Kernels sorted by their total duration in the window. "+
		"GB/s = (DRAM read + write bytes per launch) / mean duration; floor %.0f GB/s (the measured HBM copy ceiling). "+
		"SM %% = sm__throughput, issue %% = sm__inst_issued, tensor %% = sm__pipe_tensor_cycles_active (both of peak while active), "+
		"DRAM %% = gpu__dram_throughput, occupancy = achieved (sm__warps_active), bank conflicts = shared-memory load bank conflicts per launch. "+
		"\"-\": the CSV lacks the metric (never 0).\n\n"+
		"Bound rule: %s\n", floorGBs, NCUBoundRule)
	return err
}

// WriteNCUTable writes one window's markdown table and its verdict line.
func WriteNCUTable(w io.Writer, title string, win NCUWindow) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s\n\n", title)
	fmt.Fprintf(&b, "Launches profiled: %d; distinct kernels: %d; kernel time: %s µs.\n\n", win.Launches, len(win.Kernels), num(win.TotalNS/1e3, 1))
	b.WriteString("| kernel | launches | share | mean µs | DRAM B/launch | GB/s | of floor | SM % | issue % | tensor % | DRAM % | regs | occupancy % | bank conflicts | dyn smem B | grid × block | bound |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, k := range win.Kernels {
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			strings.ReplaceAll(k.Kernel, "|", `\|`), k.Launches, pct(k.Share), num(k.MeanNS/1e3, 2), bytesStr(k.BytesPerLaunch),
			num(k.GBs, 0), pct(k.OfFloor), num(k.SMPct, 1), num(k.IssuePct, 1), num(k.TensorPct, 1), num(k.DRAMPct, 1),
			num(k.Registers, 0), num(k.Occupancy, 1), num(k.BankConflicts, 0), num(k.DynSmem, 0), geomStr(k.Geometry), k.Bound.Class)
	}
	b.WriteString("\n")
	if top := win.Kernels[0]; !math.IsNaN(top.TotalNS) {
		fmt.Fprintf(&b, "Biggest share: `%s` (%s of the window): **%s** (%s).\n", top.Kernel, pct(top.Share), top.Bound.Class, top.Bound.Why)
	} else {
		b.WriteString("Biggest share: undetermined (no kernel has a duration).\n")
	}
	for _, n := range win.Notes {
		fmt.Fprintf(&b, "\nNote: %s.\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
}

// bytesStr prints bytes with an SI prefix and 4 significant digits, so the
// GB/s column can be checked by hand.
func bytesStr(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	for _, u := range []struct {
		f float64
		s string
	}{{1e9, " GB"}, {1e6, " MB"}, {1e3, " kB"}} {
		if v >= u.f {
			return strconv.FormatFloat(v/u.f, 'g', 4, 64) + u.s
		}
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " B"
}

// geomStr prints up to three launch shapes, most frequent first, as
// "GRID × BLOCK" with trailing 1 dimensions dropped: "(32, 14, 1)" x
// "(128, 1, 1)" is "32x14 × 128".
func geomStr(g []NCUGeometryCount) string {
	if len(g) == 0 {
		return "-"
	}
	var parts []string
	for i, c := range g {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("+%d more", len(g)-3))
			break
		}
		s := dims(c.Grid) + " × " + dims(c.Block)
		if len(g) > 1 {
			s += fmt.Sprintf(" (%d)", c.N)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func dims(s string) string {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == '(' || r == ')' || r == ',' || r == ' ' })
	for len(f) > 1 && f[len(f)-1] == "1" {
		f = f[:len(f)-1]
	}
	if len(f) == 0 {
		return "?"
	}
	return strings.Join(f, "x")
}

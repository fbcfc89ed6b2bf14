package gates

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
	"github.com/minfer-go/minfer/schema"
)

// ProfilerTimeout bounds every profiler run.
const ProfilerTimeout = 5 * time.Minute

// CopyCeilingGBs is the measured HBM copy ceiling of the H200 (DEVICE.md).
const CopyCeilingGBs = 4300.0

// NCUMetrics is the targeted ncu collection.
var NCUMetrics = []string{
	"gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
	"sm__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread",
	"sm__warps_active.avg.pct_of_peak_sustained_active",
}

// NCUKernel is one kernel's ncu row for one arm.
type NCUKernel struct {
	Arm       string              `json:"arm"`
	Kernel    string              `json:"kernel"`
	Metrics   []profile.NCUMetric `json:"metrics"`
	DurNS     harness.Num         `json:"duration_ns"`
	Bytes     harness.Num         `json:"dram_bytes"`
	GBs       harness.Num         `json:"achieved_gb_s"`
	OfCeiling harness.Num         `json:"of_copy_ceiling"`
}

// ProfileDetail is gate 5's evidence.
type ProfileDetail struct {
	CensusA  profile.Census         `json:"census_a"`
	CensusB  profile.Census         `json:"census_b"`
	GraphsA  *profile.Graphs        `json:"cuda_graphs_a,omitempty"` // nil: the backend printed no cuda_graphs line
	GraphsB  *profile.Graphs        `json:"cuda_graphs_b,omitempty"`
	Diff     []profile.CensusDiff   `json:"census_diff"`
	Rule     *harness.PathRule      `json:"liveness_rule,omitempty"`
	Liveness string                 `json:"liveness"` // "PASS: ...", "FAIL: ...", "INCONCLUSIVE: ..."
	NCU      []NCUKernel            `json:"ncu,omitempty"`
	NCUNote  string                 `json:"ncu_note"`
	Nsys     []profile.NsysKernel   `json:"nsys,omitempty"`
	NsysNote string                 `json:"nsys_note"`
	OpTiming []ArmOpTiming          `json:"op_timing,omitempty"` // the nsys fallback
	SASS     []profile.SASSFunction `json:"sass,omitempty"`
	SASSNote string                 `json:"sass_note"`
	// CPU is the CPU backend's profiler evidence: a pprof CPU profile per
	// arm and where the lever's functions appear.
	CPU *CPUProfileDetail `json:"cpu,omitempty"`
	// Missing lists the evidence that could not be produced (a tool not
	// found, a profiler that failed): the gate is then INCONCLUSIVE.
	Missing []string `json:"missing,omitempty"`
}

// ArmOpTiming is one arm's MINFER_OP_TIMING=1 result (or why there is none).
type ArmOpTiming struct {
	Arm    string            `json:"arm"`
	Env    []string          `json:"env"`
	Timing *profile.OpTiming `json:"timing,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// profileBench is the bench every profile process of arm runs: the rounds'
// shapes, one repetition, a short in-process warmup so clocks are up, and
// the arm's own bench flags (Arm.BenchArgs).
func profileBench(cfg Config, arm Arm) []string {
	return append(append(append([]string{"bench"}, benchArgs(cfg, arm.LegacyBench)...), arm.BenchArgs...), cfg.DepthArgs()...)
}

// ProfileWarmupMS is the in-process warmup of the profiled bench processes.
const ProfileWarmupMS = "500"

func withEnv(base map[string]string, over map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// Profile is gate 5: the launch census of both arms judged by the lever's
// liveness rule, then the profilers' evidence: on CUDA ncu, nsys (or
// MINFER_OP_TIMING) and the SASS census; on the CPU a pprof CPU profile per
// arm in which the lever's functions must appear with the path on and not
// off. Evidence that could not be produced makes the gate INCONCLUSIVE.
func Profile(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateProfile, Defends: Defends(GateProfile)}
	if cfg.Backend == "cuda" && !env.HasGPU {
		res.Status = Skip
		res.Reason = "no CUDA device (" + env.GPUWhy + "): the launch census, ncu, nsys and cuobjdump read device kernels"
		return res
	}
	d := &ProfileDetail{Rule: cfg.Lever.Rule(cfg.Backend)}
	res.Profile = d
	census := func(arm Arm) (ArmEvidence, error) { return armCensus(ctx, cfg, env, arm) }
	fail := func(why string) Result {
		res.Status, res.Reason = Fail, why
		if canceled(ctx) {
			res.Status, res.Reason = Skip, "interrupted: "+why
		}
		return res
	}
	ia, err := census(cfg.A)
	if err != nil {
		return fail("launch census of arm A: " + err.Error())
	}
	ib, err := census(cfg.B)
	if err != nil {
		return fail("launch census of arm B: " + err.Error())
	}
	d.CensusA, d.CensusB = ia.Census, ib.Census
	if ia.HasGraphs {
		d.GraphsA = &ia.Graphs
	}
	if ib.HasGraphs {
		d.GraphsB = &ib.Graphs
	}
	d.Diff = profile.Diff(d.CensusA, d.CensusB)
	env.step("profile: launch census")
	st, why := LivenessOf(cfg, ia, ib)
	d.Liveness = string(st) + ": " + why
	var bad []string
	if cfg.Backend == "cpu" {
		d.CPU = cpuProfiles(ctx, cfg, env, d)
		if d.CPU.Fail != "" {
			bad = append(bad, d.CPU.Fail)
		}
		res.Evidence = fmt.Sprintf("census diff %d names; pprof: %s", len(d.Diff), short(d.CPU.Note))
	} else {
		kernels := profiledKernels(d, 3)
		ncu(ctx, cfg, env, d, kernels)
		nsys(ctx, cfg, env, d)
		sass(ctx, cfg, env, d, kernels, ib.Kernels, ia.Kernels)
		if len(d.NCU) == 0 {
			d.Missing = append(d.Missing, "ncu: "+d.NCUNote)
		}
		if len(d.Nsys) == 0 && !opTimingOK(d.OpTiming) {
			d.Missing = append(d.Missing, "nsys and its MINFER_OP_TIMING fallback: "+d.NsysNote)
		}
		if len(d.SASS) == 0 {
			d.Missing = append(d.Missing, "SASS: "+d.SASSNote)
		}
		res.Evidence = fmt.Sprintf("census diff %d kernels; ncu: %s; nsys: %s; SASS: %s", len(d.Diff), short(d.NCUNote), short(d.NsysNote), short(d.SASSNote))
		if d.Rule != nil && d.Rule.Graphs {
			res.Evidence = "CUDA graphs " + GraphsLine(d) + "; " + res.Evidence
		}
	}
	switch {
	case canceled(ctx):
		res.Status, res.Reason = Skip, "interrupted"
	case st == Fail || len(bad) > 0:
		res.Status, res.Reason = Fail, strings.Join(append([]string{"liveness " + d.Liveness}, bad...), "; ")
	case st != Pass:
		res.Status, res.Reason = Inconclusive, "liveness "+d.Liveness
	case len(d.Missing) > 0:
		res.Status, res.Reason = Inconclusive, "evidence missing: "+strings.Join(d.Missing, "; ")+" (liveness "+d.Liveness+")"
	default:
		res.Status, res.Reason = Pass, "liveness "+d.Liveness
	}
	res.Liveness = d.Liveness
	return res
}

// armCensus runs one arm's launch census bench (its own binary when it has
// one).
func armCensus(ctx context.Context, cfg Config, env *Env, arm Arm) (ArmEvidence, error) {
	in := ArmEvidence{Arm: arm}
	e, err := env.M.R.RunCall(ctx, harness.Call{Bin: arm.Bin, Label: "census " + arm.Name, Env: armEnv(arm, map[string]string{"MINFER_BENCH_WARMUP_MS": "0"}), Args: profileBench(cfg, arm)})
	env.Cmd("profile: launch census arm "+arm.Name, e)
	if err != nil {
		return in, err
	}
	in.Add("census "+arm.Name, e)
	var doc struct {
		Kernels *schema.Kernels `json:"kernels"`
	}
	if json.Unmarshal(e.Stdout, &doc) == nil {
		in.Kernels = doc.Kernels
	}
	if len(in.NoCensus) > 0 {
		_, perr := profile.ParseCensus(e.StderrAll)
		return in, perr
	}
	return in, nil
}

// KernelDiff is the per-kernel difference between two builds (arms with
// their own binaries): each one's launch census and, on a GPU with ncu,
// ncu's numbers for the kernels whose counts differ most. A bisect reports
// it for last good against first bad.
func KernelDiff(ctx context.Context, cfg Config, env *Env) *ProfileDetail {
	d := &ProfileDetail{}
	ia, err := armCensus(ctx, cfg, env, cfg.A)
	if err != nil {
		d.Missing = append(d.Missing, "launch census of "+cfg.A.Value+": "+err.Error())
		return d
	}
	ib, err := armCensus(ctx, cfg, env, cfg.B)
	if err != nil {
		d.Missing = append(d.Missing, "launch census of "+cfg.B.Value+": "+err.Error())
		return d
	}
	d.CensusA, d.CensusB = ia.Census, ib.Census
	d.Diff = profile.Diff(d.CensusA, d.CensusB)
	if cfg.Backend != "cuda" || !env.HasGPU {
		d.NCUNote = "not run: no CUDA device (the census above is the CPU backend's)"
		return d
	}
	ncu(ctx, cfg, env, d, profiledKernels(d, 3))
	return d
}

// opTimingOK: both arms' MINFER_OP_TIMING runs produced timings.
func opTimingOK(ts []ArmOpTiming) bool {
	if len(ts) < 2 {
		return false
	}
	for _, t := range ts {
		if t.Timing == nil {
			return false
		}
	}
	return true
}

// GraphsLine is the per-arm {"cuda_graphs"} count: "A captured 0,
// replayed 0; B captured 2, replayed 126", or which arm printed none.
func GraphsLine(d *ProfileDetail) string {
	one := func(g *profile.Graphs) string {
		if g == nil {
			return `no {"cuda_graphs"} line`
		}
		s := fmt.Sprintf("captured %d, replayed %d", g.Captured, g.Replayed)
		if g.Invalidated > 0 || g.Aborted > 0 {
			s += fmt.Sprintf(" (invalidated %d, aborted %d)", g.Invalidated, g.Aborted)
		}
		if g.Disabled {
			s += " (disabled)"
		}
		return s
	}
	return fmt.Sprintf("A %s; B %s", one(d.GraphsA), one(d.GraphsB))
}

// profiledKernels picks the kernels ncu and the SASS census look at: the
// ones the lever switched (those its liveness rule names first, then by
// largest launch difference), else (a lever that switches no kernel, such
// as graphs) the most launched ones of arm B.
func profiledKernels(d *ProfileDetail, n int) []profile.CensusDiff {
	var ks []profile.CensusDiff
	for _, k := range d.Diff {
		if deviceKernel(k.Kernel) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		// Only the census's pseudo-entries differ (MINFER_KERNELS swaps the
		// whole build, MINFER_DRAFT the decode loop): profile the kernels
		// both arms launch most.
		for k, v := range d.CensusB {
			if deviceKernel(k) {
				ks = append(ks, profile.CensusDiff{Kernel: k, A: d.CensusA[k], B: v})
			}
		}
	}
	abs := func(x int) int {
		if x < 0 {
			return -x
		}
		return x
	}
	// The kernels the liveness rule names are the path's claim: they come
	// first. By launch counts alone a 7B A/B of MINFER_MMQ_F16 (since
	// retired) profiled the activation conversion, which launches as often
	// as the GEMM, and not the GEMM (2026-12-07).
	claimed := func(k string) bool {
		if d.Rule == nil {
			return false
		}
		for _, p := range slices.Concat(d.Rule.Census, d.Rule.OffCensus) {
			if ok, _ := path.Match(p, k); ok {
				return true
			}
		}
		return false
	}
	sort.Slice(ks, func(i, j int) bool {
		if ci, cj := claimed(ks[i].Kernel), claimed(ks[j].Kernel); ci != cj {
			return ci
		}
		di, dj := abs(ks[i].B-ks[i].A), abs(ks[j].B-ks[j].A)
		if di != dj {
			return di > dj
		}
		if ks[i].B != ks[j].B {
			return ks[i].B > ks[j].B
		}
		return ks[i].Kernel < ks[j].Kernel
	})
	if len(ks) > n {
		ks = ks[:n]
	}
	return ks
}

// deviceKernel reports whether a census name is a device kernel (every
// kernel is named minfer_...), not one of the census's pseudo-entries
// (kernels_file, spec_drafted, ...), which ncu and cuobjdump cannot find.
func deviceKernel(name string) bool { return strings.HasPrefix(name, "minfer_") }

// FindTool looks a CUDA tool up in PATH, then in extra, then in
// /usr/local/cuda/bin ("" when none is there).
func FindTool(name string, extra ...string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range append(extra, "/usr/local/cuda/bin/"+name) {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func ncu(ctx context.Context, cfg Config, env *Env, d *ProfileDetail, kernels []profile.CensusDiff) {
	bin := FindTool("ncu")
	if bin == "" {
		d.NCUNote = "ncu not found (PATH, /usr/local/cuda/bin)"
		return
	}
	if len(kernels) == 0 {
		d.NCUNote = "no kernel to profile (empty census)"
		return
	}
	for _, k := range kernels {
		for _, arm := range []Arm{cfg.A, cfg.B} {
			if (arm.Name == "A" && k.A == 0) || (arm.Name == "B" && k.B == 0) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, ProfilerTimeout)
			e, err := env.M.R.RunCall(cctx, harness.Call{Bin: arm.Bin, Label: "ncu " + arm.Name + " " + k.Kernel, Env: withEnv(map[string]string{"MINFER_BENCH_WARMUP_MS": ProfileWarmupMS}, arm.Env),
				Extra:   []string{"LC_ALL=C"},
				Wrapper: []string{bin, "--clock-control", "none", "--csv", "--metrics", strings.Join(NCUMetrics, ","), "-k", "regex:" + k.Kernel + "$", "--launch-count", "5"},
				Args:    profileBench(cfg, arm)})
			cancel()
			env.Cmd("profile: ncu", e)
			if err != nil {
				d.NCUNote += fmt.Sprintf("%s arm %s failed: %v; ", k.Kernel, arm.Name, err)
				continue
			}
			ms, err := profile.ParseNCUCSV(string(e.Stdout))
			if err != nil {
				d.NCUNote += fmt.Sprintf("%s arm %s: %v; ", k.Kernel, arm.Name, err)
				continue
			}
			row := NCUKernel{Arm: arm.Name, Kernel: k.Kernel, Metrics: ms}
			var dur, rd, wr float64
			for _, m := range ms {
				switch m.Metric {
				case "gpu__time_duration.sum":
					dur = m.Mean()
				case "dram__bytes_read.sum":
					rd = m.Mean()
				case "dram__bytes_write.sum":
					wr = m.Mean()
				}
			}
			row.DurNS, row.Bytes = harness.Num(dur), harness.Num(rd+wr)
			row.GBs = harness.Num((rd + wr) / dur) // bytes/ns = GB/s
			row.OfCeiling = harness.Num((rd + wr) / dur / CopyCeilingGBs)
			d.NCU = append(d.NCU, row)
		}
	}
	if d.NCUNote == "" {
		d.NCUNote = fmt.Sprintf("%d kernel rows", len(d.NCU))
	}
}

func benchArgs(cfg Config, legacy bool) []string {
	format := "--format"
	if legacy {
		format = "-o"
	}
	a := []string{"-p", strconv.Itoa(cfg.PP), "-n", strconv.Itoa(cfg.TG), "-r", "1", format, "json"}
	if cfg.Model != "" {
		a = append(a, "--model", cfg.Model)
	}
	return append(a, "--device", cfg.Device)
}

// nsysPaths follows DEVICE.md's 3-step recipe.
var nsysPaths = []string{"/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys"}

// ImporterLibs are the libraries QdstrmImporter needs and the H200 lacks;
// scripts/abtest-device.sh carries them in bin/lib (Debian libdw1/libelf1).
var ImporterLibs = []string{"libdw.so.1", "libelf.so.1"}

// importerLibDir is cfg.NsysLibDir, else bin/lib beside minfer, when it holds
// every ImporterLibs file ("" and the reason otherwise).
func importerLibDir(cfg Config, env *Env) (string, string) {
	dir := cfg.NsysLibDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(env.M.R.Bin), "lib")
	}
	for _, l := range ImporterLibs {
		if _, err := os.Stat(filepath.Join(dir, l)); err != nil {
			return "", fmt.Sprintf("%s not found in %s", l, dir)
		}
	}
	return dir, ""
}

// opTiming runs one arm's bench with MINFER_OP_TIMING=1 (graphs off where
// the lever does not set them, since only direct launches are timed).
func opTiming(ctx context.Context, cfg Config, env *Env, arm Arm) ArmOpTiming {
	m := withEnv(map[string]string{"MINFER_NO_CUDA_GRAPH": "1", "MINFER_BENCH_WARMUP_MS": ProfileWarmupMS}, arm.Env)
	m["MINFER_OP_TIMING"] = "1"
	out := ArmOpTiming{Arm: arm.Name}
	e, err := env.M.R.RunCall(ctx, harness.Call{Bin: arm.Bin, Label: "op timing " + arm.Name, Env: m, Args: profileBench(cfg, arm)})
	env.Cmd("profile: op timing arm "+arm.Name, e)
	if e != nil {
		out.Env = e.Env
	}
	if err != nil {
		out.Error = "op timing failed: " + err.Error()
		return out
	}
	t, err := profile.ParseOpTiming(e.StderrAll)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Timing = &t
	return out
}

func nsys(ctx context.Context, cfg Config, env *Env, d *ProfileDetail) {
	bin := FindTool("nsys", nsysPaths...)
	fallback := func(why string) {
		d.NsysNote = why + "; using the engine's own event timing (MINFER_OP_TIMING=1) instead"
		for _, arm := range []Arm{cfg.A, cfg.B} {
			d.OpTiming = append(d.OpTiming, opTiming(ctx, cfg, env, arm))
		}
	}
	if bin == "" {
		fallback("nsys not found (PATH, " + strings.Join(nsysPaths, ", ") + ")")
		return
	}
	dir := filepath.Join(cfg.TmpDir, "nsys")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fallback("nsys output folder: " + err.Error())
		return
	}
	rep := filepath.Join(dir, "b")
	cctx, cancel := context.WithTimeout(ctx, ProfilerTimeout)
	defer cancel()
	e, err := env.M.R.RunCall(cctx, harness.Call{Bin: cfg.B.Bin, Label: "nsys B", Env: withEnv(map[string]string{"MINFER_BENCH_WARMUP_MS": ProfileWarmupMS}, cfg.B.Env),
		Wrapper: []string{bin, "profile", "--trace=cuda", "--cuda-graph-trace=node", "-o", rep, "--force-overwrite", "true"},
		Args:    profileBench(cfg, cfg.B)})
	env.Cmd("profile: nsys", e)
	if err != nil {
		fallback("nsys profile failed: " + err.Error())
		return
	}
	nsysRep := rep + ".nsys-rep"
	if _, err := os.Stat(nsysRep); err != nil {
		imp := filepath.Join(filepath.Dir(filepath.Dir(bin)), "linux-desktop-glibc_2_11_3-x64", "QdstrmImporter")
		if _, err := os.Stat(imp); err != nil {
			fallback("nsys wrote no .nsys-rep and QdstrmImporter is not at " + imp)
			return
		}
		libDir, libWhy := importerLibDir(cfg, env)
		cmd := exec.CommandContext(cctx, imp, "-i", rep+".qdstrm")
		if libDir != "" {
			// LD_LIBRARY_PATH for the importer only, never for minfer.
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir+prefixed(os.Getenv("LD_LIBRARY_PATH")))
		}
		out, err := profilerOutput(env, cmd, true)
		if err != nil {
			why := fmt.Sprintf("QdstrmImporter failed: %v: %s", err, lastLines(string(out), 3))
			if libDir == "" {
				why += " (it needs " + strings.Join(ImporterLibs, " and ") + ": " + libWhy + "; see scripts/abtest-device.sh)"
			}
			fallback(why)
			return
		}
		if _, err := os.Stat(nsysRep); err != nil {
			fallback("QdstrmImporter wrote no " + filepath.Base(nsysRep) + ": " + lastLines(string(out), 3))
			return
		}
	}
	out, err := profilerOutput(env, exec.CommandContext(cctx, bin, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", nsysRep), true)
	if err != nil {
		fallback(fmt.Sprintf("nsys stats failed: %v: %s", err, lastLines(string(out), 3)))
		return
	}
	ks, err := profile.ParseNsysKernSum(string(out))
	if err != nil {
		fallback(err.Error())
		return
	}
	d.Nsys = ks
	d.NsysNote = fmt.Sprintf("%d kernels in cuda_gpu_kern_sum (arm B, --cuda-graph-trace=node)", len(ks))
}

// profilerOutput runs a profiler-side tool that abtest starts itself (the
// nsys importer and stats, cuobjdump) and accounts its wall time as
// profiler work, not harness overhead.
func profilerOutput(env *Env, cmd *exec.Cmd, combined bool) ([]byte, error) {
	t0 := time.Now()
	var out []byte
	var err error
	if combined {
		out, err = cmd.CombinedOutput()
	} else {
		out, err = cmd.Output()
	}
	if env.M.R != nil {
		env.M.R.Account(harness.WorkProfilers, time.Since(t0))
	}
	return out, err
}

func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return ":" + s
}

// sassFiles is what the SASS census disassembles: --kernels, else the
// fatbin beside minfer, else the NVRTC build that arm B's (then A's) census
// bench loaded: its manifest's directory holds one cubin per unit, so an
// A/B on NVRTC's kernels needs no nvcc build for its census.
func sassFiles(cfg Config, env *Env, arms ...*schema.Kernels) ([]string, error) {
	if cfg.Kernels != "" {
		return []string{cfg.Kernels}, nil
	}
	if ms, _ := filepath.Glob(filepath.Join(filepath.Dir(env.M.R.Bin), "*.fatbin")); len(ms) > 0 {
		return ms[:1], nil
	}
	for _, k := range arms {
		if k == nil || filepath.Base(k.Path) != nvrtcManifest {
			continue
		}
		cubins, _ := filepath.Glob(filepath.Join(filepath.Dir(k.Path), "*.cubin"))
		if len(cubins) == 0 {
			return nil, fmt.Errorf("the arms' NVRTC build %s lists no cubins beside it", k.Path)
		}
		return cubins, nil
	}
	return nil, fmt.Errorf("no kernels fatbin next to minfer (and no --kernels), and neither arm's bench named an NVRTC build")
}

// nvrtcManifest is the file an NVRTC build's bench document names as its
// kernels file (cuda/nvrtc's cache entry).
const nvrtcManifest = "manifest.json"

func sass(ctx context.Context, cfg Config, env *Env, d *ProfileDetail, kernels []profile.CensusDiff, arms ...*schema.Kernels) {
	files, err := sassFiles(cfg, env, arms...)
	if err != nil {
		d.SASSNote = err.Error()
		return
	}
	cu := FindTool("cuobjdump")
	if cu == "" {
		d.SASSNote = "cuobjdump not found (PATH, /usr/local/cuda/bin)"
		return
	}
	cctx, cancel := context.WithTimeout(ctx, ProfilerTimeout)
	defer cancel()
	var listing []byte
	for _, f := range files {
		out, err := profilerOutput(env, exec.CommandContext(cctx, cu, "--dump-sass", f), false)
		if err != nil {
			d.SASSNote = fmt.Sprintf("cuobjdump --dump-sass %s failed: %v", f, err)
			return
		}
		listing = append(listing, out...)
	}
	fs, err := profile.ParseSASS(string(listing))
	if err != nil {
		d.SASSNote = err.Error()
		return
	}
	for _, f := range fs {
		for _, k := range kernels {
			if strings.Contains(f.Name, k.Kernel) {
				d.SASS = append(d.SASS, f)
				break
			}
		}
	}
	what := filepath.Base(files[0])
	if len(files) > 1 {
		what = fmt.Sprintf("%d cubins of the NVRTC build %s", len(files), filepath.Dir(files[0]))
	}
	d.SASSNote = fmt.Sprintf("%d functions of %s matched the switched kernels", len(d.SASS), what)
}

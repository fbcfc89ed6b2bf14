package gates

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
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
	Diff     []profile.CensusDiff   `json:"census_diff"`
	Liveness string                 `json:"liveness"`
	NCU      []NCUKernel            `json:"ncu,omitempty"`
	NCUNote  string                 `json:"ncu_note"`
	Nsys     []profile.NsysKernel   `json:"nsys,omitempty"`
	NsysNote string                 `json:"nsys_note"`
	OpTiming string                 `json:"op_timing,omitempty"`
	SASS     []profile.SASSFunction `json:"sass,omitempty"`
	SASSNote string                 `json:"sass_note"`
}

// Profile is gate 5.
func Profile(ctx context.Context, cfg Config, env *Env) Result {
	res := Result{Gate: GateProfile, Defends: Defends(GateProfile)}
	if !env.HasGPU {
		res.Status = Skip
		res.Reason = "no CUDA device (" + env.GPUWhy + "): the launch census, ncu, nsys and cuobjdump read device kernels"
		return res
	}
	d := &ProfileDetail{}
	res.Profile = d
	census := func(arm Arm) (profile.Census, error) {
		m := map[string]string{"MINFER_LAUNCH_CENSUS": "1"}
		for k, v := range arm.Env {
			m[k] = v
		}
		_, e, err := env.M.Generate(ctx, "census "+arm.Name, m, cfg.Prompts[0].Text, 8)
		env.Cmd("profile: launch census arm "+arm.Name, e)
		if err != nil {
			return nil, err
		}
		return profile.ParseCensus(e.StderrAll + "\n" + string(e.Stdout))
	}
	var err error
	if d.CensusA, err = census(cfg.A); err != nil {
		res.Status, res.Reason = Fail, "launch census of arm A: "+err.Error()
		return res
	}
	if d.CensusB, err = census(cfg.B); err != nil {
		res.Status, res.Reason = Fail, "launch census of arm B: "+err.Error()
		return res
	}
	d.Diff = profile.Diff(d.CensusA, d.CensusB)
	env.step("profile: launch census")
	if len(d.Diff) == 0 {
		d.Liveness = "FAIL: the launch census is identical in A and B: the lever switched no kernel (a phantom gain)"
		res.Status, res.Reason = Fail, d.Liveness
	} else {
		var on []string
		for _, x := range d.Diff {
			on = append(on, fmt.Sprintf("%s A=%d B=%d", x.Kernel, x.A, x.B))
		}
		d.Liveness = "PASS: kernels switched: " + strings.Join(on, ", ")
		res.Status, res.Reason = Pass, d.Liveness
	}
	kernels := switched(d.Diff, 3)
	ncu(ctx, cfg, env, d, kernels)
	nsys(ctx, cfg, env, d)
	sass(ctx, cfg, env, d, kernels)
	res.Evidence = fmt.Sprintf("census diff %d kernels; ncu: %s; nsys: %s; SASS: %s", len(d.Diff), short(d.NCUNote), short(d.NsysNote), short(d.SASSNote))
	return res
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func switched(diff []profile.CensusDiff, n int) []profile.CensusDiff {
	if len(diff) > n {
		return diff[:n]
	}
	return diff
}

func ncu(ctx context.Context, cfg Config, env *Env, d *ProfileDetail, kernels []profile.CensusDiff) {
	bin, err := exec.LookPath("ncu")
	if err != nil {
		d.NCUNote = "ncu not found in PATH"
		return
	}
	for _, k := range kernels {
		for _, arm := range []Arm{cfg.A, cfg.B} {
			if (arm.Name == "A" && k.A == 0) || (arm.Name == "B" && k.B == 0) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, ProfilerTimeout)
			e, err := env.M.R.RunCall(cctx, harness.Call{Label: "ncu " + arm.Name + " " + k.Kernel, Env: arm.Env,
				Extra:   []string{"LC_ALL=C"},
				Wrapper: []string{bin, "--clock-control", "none", "--csv", "--metrics", strings.Join(NCUMetrics, ","), "-k", "regex:" + k.Kernel + "$", "--launch-count", "5"},
				Args:    append([]string{"bench"}, benchArgs(cfg)...)})
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

func benchArgs(cfg Config) []string {
	a := []string{"-p", strconv.Itoa(cfg.PP), "-n", strconv.Itoa(cfg.TG), "-r", "1", "-o", "json"}
	if cfg.Model != "" {
		a = append(a, "--model", cfg.Model)
	}
	return append(a, "--device", cfg.Device)
}

// nsysPaths follows DEVICE.md's 3-step recipe.
var nsysPaths = []string{"/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys"}

func nsys(ctx context.Context, cfg Config, env *Env, d *ProfileDetail) {
	bin := ""
	if p, err := exec.LookPath("nsys"); err == nil {
		bin = p
	}
	for _, p := range nsysPaths {
		if _, err := os.Stat(p); err == nil && bin == "" {
			bin = p
		}
	}
	fallback := func(why string) {
		d.NsysNote = why + "; using MINFER_OP_TIMING=1 instead"
		m := map[string]string{"MINFER_OP_TIMING": "1", "MINFER_NO_CUDA_GRAPH": "1"}
		for k, v := range cfg.B.Env {
			m[k] = v
		}
		_, e, err := env.M.Generate(ctx, "op timing B", m, cfg.Prompts[0].Text, 8)
		env.Cmd("profile: op timing", e)
		if err != nil {
			d.OpTiming = "op timing failed: " + err.Error()
			return
		}
		d.OpTiming = strings.TrimSpace(e.Stderr)
	}
	if bin == "" {
		fallback("nsys not found")
		return
	}
	dir := filepath.Join(cfg.TmpDir, "nsys")
	_ = os.MkdirAll(dir, 0o755)
	rep := filepath.Join(dir, "b")
	cctx, cancel := context.WithTimeout(ctx, ProfilerTimeout)
	defer cancel()
	e, err := env.M.R.RunCall(cctx, harness.Call{Label: "nsys B", Env: cfg.B.Env,
		Wrapper: []string{bin, "profile", "--trace=cuda", "--cuda-graph-trace=node", "-o", rep, "--force-overwrite", "true"},
		Args:    append([]string{"bench"}, benchArgs(cfg)...)})
	env.Cmd("profile: nsys", e)
	if err != nil {
		fallback("nsys profile failed: " + err.Error())
		return
	}
	nsysRep := rep + ".nsys-rep"
	if _, err := os.Stat(nsysRep); err != nil {
		imp := filepath.Join(filepath.Dir(filepath.Dir(bin)), "linux-desktop-glibc_2_11_3-x64", "QdstrmImporter")
		out, err := exec.CommandContext(cctx, imp, "-i", rep+".qdstrm").CombinedOutput()
		if err != nil {
			fallback(fmt.Sprintf("QdstrmImporter failed (needs libdw.so.1/libelf.so.1 on LD_LIBRARY_PATH): %v: %s", err, lastLines(string(out), 3)))
			return
		}
	}
	out, err := exec.CommandContext(cctx, bin, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", nsysRep).CombinedOutput()
	if err != nil {
		fallback(fmt.Sprintf("nsys stats failed: %v", err))
		return
	}
	ks, err := profile.ParseNsysKernSum(string(out))
	if err != nil {
		fallback(err.Error())
		return
	}
	d.Nsys = ks
	d.NsysNote = fmt.Sprintf("%d kernels in cuda_gpu_kern_sum (arm B)", len(ks))
}

func sass(ctx context.Context, cfg Config, env *Env, d *ProfileDetail, kernels []profile.CensusDiff) {
	fat := cfg.Kernels
	if fat == "" {
		ms, _ := filepath.Glob(filepath.Join(filepath.Dir(env.M.R.Bin), "*.fatbin"))
		if len(ms) > 0 {
			fat = ms[0]
		}
	}
	if fat == "" {
		d.SASSNote = "no kernels fatbin next to minfer (and no --kernels)"
		return
	}
	cu, err := exec.LookPath("cuobjdump")
	if err != nil {
		d.SASSNote = "cuobjdump not found in PATH"
		return
	}
	cctx, cancel := context.WithTimeout(ctx, ProfilerTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, cu, "--dump-sass", fat).Output()
	if err != nil {
		d.SASSNote = "cuobjdump failed: " + err.Error()
		return
	}
	for _, f := range profile.ParseSASS(string(out)) {
		for _, k := range kernels {
			if strings.Contains(f.Name, k.Kernel) {
				d.SASS = append(d.SASS, f)
				break
			}
		}
	}
	d.SASSNote = fmt.Sprintf("%d functions of %s matched the switched kernels", len(d.SASS), filepath.Base(fat))
}

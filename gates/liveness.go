package gates

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

// LivenessRule says what "the path this lever switches actually ran" means
// in the backend's exit lines ({"launch_census":...}, {"cuda_graphs":...}).
// It is data: one entry per lever in LivenessRules. A lever without an entry
// gets a liveness SKIP with that reason, never a PASS.
type LivenessRule struct {
	// On is the lever value that switches the path on; an arm with any other
	// value (an unset lever reads as its registry default) has it off.
	On string `json:"on"`
	// Kernels are kernel-name patterns (path.Match globs): the arm with the
	// path on must launch at least one kernel matching each, the arm with it
	// off none.
	Kernels []string `json:"kernels,omitempty"`
	// Graphs: liveness is read from the {"cuda_graphs":...} line: the arm with
	// the path on must capture and replay graphs, the arm with it off must
	// capture and replay none; both arms must launch the same set of kernels
	// (graph replays are counted as launches, so the census alone cannot tell).
	Graphs bool `json:"graphs,omitempty"`
	// PDL: liveness is the pdl_launches count of the {"cuda_graphs":...}
	// line: positive with the path on, zero with it off, same kernels.
	PDL bool `json:"pdl,omitempty"`
	// PrefillGraphs: liveness is the captured count of the {"cuda_graphs":...}
	// line: the arm with prefill capture on captures more graphs than the arm
	// with it off, which still captures and replays its decode graph (so the
	// difference is the prefill shapes, not graphs switched off), same kernels.
	PrefillGraphs bool `json:"prefill_graphs,omitempty"`
	// Why says what the rule defends, for the report.
	Why string `json:"why"`
}

// LivenessRules is the liveness table, keyed by lever name. Kernel names are
// those of cuda/kernels/*.cu (minfer_<op>_<type>).
var LivenessRules = map[string]LivenessRule{
	"MINFER_NO_PREFILL_GEMM": {On: "0", Kernels: []string{"minfer_gemm_*"},
		Why: "prefill matmuls run the tiled tensor-core GEMM kernels (minfer_gemm_<type>) only with the GEMM path on; with it off they go through the per-type kernels"},
	"MINFER_MMQ": {On: "1", Kernels: []string{"minfer_mmq_q*"},
		Why: "prefill matmuls of quantized weights run the int8 tensor-core MMQ kernels (minfer_mmq_<type>) only with MMQ on; with MINFER_MMQ=0 they run the f16 GEMM"},
	"MINFER_MMVQ_NT": {On: "1", Kernels: []string{"minfer_mmvq_nt_*"},
		Why: "matmuls of 2..8 tokens of the MMVQ types run minfer_mmvq_nt_<type> over Q8_1 rows only with the lever on; off, the f32-activation minfer_mmv_<type> (the workload must contain such a matmul: a 2..8-token prompt, e.g. abtest --pp 5)"},
	"MINFER_MMVQ_SPLIT": {On: "1", Kernels: []string{"minfer_mmvq*_s_*"},
		Why: "decode MMVQ matmuls with few rows (ceil(rows / 4) < 12 x SMs: 7B o-proj, ffn_down, fused q/k/v) run 4 warps per row (minfer_mmvq[r][_res|_qkv]_s_<type>) only with the lever on; off, the one-warp-per-row minfer_mmvq*_<type> (every matrix of the model must not be tall: the lm_head and fused gate/up never split)"},
	"MINFER_QUANTIZE_X4": {On: "1", Kernels: []string{"minfer_quantize_q8_1_x4"},
		Why: "the Q8_1 activation quantize runs as minfer_quantize_q8_1_x4 (four blocks per warp) only with the lever on; off, minfer_quantize_q8_1"},
	"MINFER_FUSE_QKNORM": {On: "1", Kernels: []string{"minfer_qkv_norm_rope_store"},
		Why: "qwen3's q/k norms, ropes and KV stores run as one minfer_qkv_norm_rope_store launch per layer only with the lever on; off, minfer_rms_norm_f32 twice, minfer_rope_f32 twice and minfer_kv_store twice (the workload must be a q/k-norm model: qwen3)"},
	"MINFER_FUSE_RESIDUAL": {On: "1", Kernels: []string{"minfer_mmvq*_res_*"},
		Why: "a decode matmul feeding only the residual add runs as minfer_mmvq[r]_res_<type> (writes x + W a) only with the lever on; off, the plain kernel and minfer_add_f32"},
	"MINFER_NO_Q80_MMVQ": {On: "0", Kernels: []string{"minfer_mmvq*_q8_0"},
		Why: "Q8_0 decode matmuls (nt = 1) run the dp4a kernels over Q8_1 activations (plain, fused qkv/ffn, in-kernel quantize) only with the lever on; off, they run minfer_mmv_q8_0"},
	"MINFER_NO_Q40_MMVQ": {On: "0", Kernels: []string{"minfer_mmvq*_q[45]_[01]"},
		Why: "Q4_0 / Q4_1 / Q5_0 / Q5_1 decode matmuls (nt = 1) run the dp4a kernels over Q8_1 activations only with the lever on; off, they run the minfer_mmv_<type> kernels"},
	"MINFER_NO_KQ_MMVQ": {On: "0", Kernels: []string{"minfer_mmvq*_q[456]_k"},
		Why: "K-quant decode matmuls (nt = 1) run the dp4a kernels over Q8_1 activations only with the lever on; off, they run minfer_mmv_<type>"},
	"MINFER_MMVQ_INLINE_Q8": {On: "1", Kernels: []string{"minfer_mmvqx_*"},
		Why: "decode MMVQ quantizes its activation in the kernel (minfer_mmvqx_*) only with the lever on; off, a separate minfer_quantize_q8_1 launch feeds minfer_mmvq_*"},
	"MINFER_NORM_Q8": {On: "1", Kernels: []string{"minfer_rms_norm_q8_1"},
		Why: "decode rms_norm writes the Q8_1 activation of the MMVQ matmuls that read it (minfer_rms_norm_q8_1, one minfer_quantize_q8_1 fewer per fused QKV / FFN) only with the lever on; off, minfer_rms_norm_f32 and a separate quantize launch"},
	"MINFER_MMVQ_REPACK": {On: "1", Kernels: []string{"minfer_mmvqr_*"},
		Why: "decode MMVQ of Q8_0 / Q6_K weights reads their 16-byte-aligned repacked copy (minfer_mmvqr_*) only with the lever on; off, minfer_mmvq_* reads the GGUF blocks"},
	"MINFER_NO_SPLITK_ATTN": {On: "0", Kernels: []string{"minfer_attn_decode*_*"},
		Why: "decode attention (nt <= 8) runs the split-K kernels (the lean minfer_attn_decode2_* by default, minfer_attn_decode_* with MINFER_ATTN_DECODE_V2=0) only with the lever on; off, it runs the plain minfer_attn_f32"},
	"MINFER_ATTN_DECODE_V2": {On: "1", Kernels: []string{"minfer_attn_decode2_*"},
		Why: "decode attention (nt <= 8) runs the lean split-K kernels (minfer_attn_decode2_*) only with the lever on; off, the split-K minfer_attn_decode_*"},
	"MINFER_NO_FA_PREFILL": {On: "0", Kernels: []string{"minfer_attn_prefill*_*"},
		Why: "prefill attention (nt >= 9) runs the tiled kernels (v2 minfer_attn_prefill2_* by default, v1 minfer_attn_prefill_* with MINFER_FA_PREFILL_V2=0) only with the lever on; off, the plain minfer_attn_f32"},
	"MINFER_FA_PREFILL_V2": {On: "1", Kernels: []string{"minfer_attn_prefill2_*"},
		Why: "prefill attention (nt >= 9) runs the v2 tiled kernels (minfer_attn_prefill2_*) only with the lever on; off, the v1 minfer_attn_prefill_*"},
	"MINFER_NO_FUSE_FFN": {On: "0", Kernels: []string{"minfer_mmvq*_ffn_*"},
		Why: "with FFN fusion on, decode runs gate, up and SwiGLU as one fused MMVQ kernel; off, two matmuls and minfer_swiglu_f32"},
	"MINFER_NO_FUSE_QKV": {On: "0", Kernels: []string{"minfer_qkv*_rope_store", "minfer_mmvq*_qkv_*"},
		Why: "with QKV fusion on, decode runs q/k/v as one fused MMVQ launch and bias + rope + KV store as one kernel (minfer_qkv_rope_store; qwen3 with MINFER_FUSE_QKNORM=1: minfer_qkv_norm_rope_store); off, three matmuls, two ropes and two KV stores"},
	"MINFER_NO_CUDA_GRAPH": {On: "0", Graphs: true,
		Why: "with graphs on, the backend captures and replays CUDA graphs (same kernels, replays counted in the census); with them off it captures and replays none"},
	"MINFER_NO_PREFILL_CAPTURE": {On: "0", PrefillGraphs: true,
		Why: "with prefill capture on, the prefill shapes run often enough (the census workload's pp runs) are captured as CUDA graphs too: more graphs captured than with it off, where only the decode graph is (same kernels either way)"},
	"MINFER_PDL": {On: "1", PDL: true,
		Why: "with PDL on, every launch carries the programmatic-dependent-launch attribute (pdl_launches > 0 on the cuda_graphs line) and the kernels are the same; off, none does"},
}

// LivenessInput is one arm's evidence.
type LivenessInput struct {
	Arm       Arm
	Census    profile.Census
	Graphs    profile.Graphs
	HasGraphs bool // the cuda_graphs line was printed
}

func armValue(lv harness.Lever, a Arm) string {
	if a.Value == harness.Unset {
		return lv.Default
	}
	return a.Value
}

// Liveness applies the lever's rule to the two arms' evidence: PASS, FAIL,
// or SKIP (no rule, or both arms on the same side of it) with the reason.
func Liveness(lv harness.Lever, a, b LivenessInput) (Status, string) {
	rule, ok := LivenessRules[lv.Name]
	if !ok {
		return Skip, fmt.Sprintf("no liveness rule for %s in gates.LivenessRules: which kernels it must switch is not declared, so the census difference is shown but not judged", lv.Name)
	}
	var on, off LivenessInput
	switch aOn, bOn := armValue(lv, a.Arm) == rule.On, armValue(lv, b.Arm) == rule.On; {
	case aOn && !bOn:
		on, off = a, b
	case bOn && !aOn:
		on, off = b, a
	default:
		return Skip, fmt.Sprintf("rule needs one arm with %s=%s and one without; arms are A=%s B=%s", lv.Name, rule.On, a.Arm.Value, b.Arm.Value)
	}
	var fails, oks []string
	for _, pat := range rule.Kernels {
		onN, onK := matching(on.Census, pat)
		offN, offK := matching(off.Census, pat)
		if onN == 0 {
			fails = append(fails, fmt.Sprintf("arm %s (%s=%s, path on) launched no %s", on.Arm.Name, lv.Name, on.Arm.Value, pat))
		} else {
			oks = append(oks, fmt.Sprintf("arm %s launched %s %d times (%s)", on.Arm.Name, pat, onN, strings.Join(onK, ", ")))
		}
		if offN > 0 {
			fails = append(fails, fmt.Sprintf("arm %s (%s=%s, path off) still launched %s %d times (%s)", off.Arm.Name, lv.Name, off.Arm.Value, pat, offN, strings.Join(offK, ", ")))
		} else {
			oks = append(oks, fmt.Sprintf("arm %s launched none", off.Arm.Name))
		}
	}
	if rule.Graphs {
		for _, x := range []LivenessInput{on, off} {
			if !x.HasGraphs {
				fails = append(fails, fmt.Sprintf(`arm %s printed no {"cuda_graphs":{"captured":N,"replayed":M}} line`, x.Arm.Name))
			}
		}
		if on.HasGraphs && off.HasGraphs {
			if on.Graphs.Captured == 0 || on.Graphs.Replayed == 0 {
				fails = append(fails, fmt.Sprintf("arm %s (graphs on) captured %d and replayed %d graphs", on.Arm.Name, on.Graphs.Captured, on.Graphs.Replayed))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s captured %d graphs and replayed %d", on.Arm.Name, on.Graphs.Captured, on.Graphs.Replayed))
			}
			if off.Graphs.Captured != 0 || off.Graphs.Replayed != 0 {
				fails = append(fails, fmt.Sprintf("arm %s (graphs off) captured %d and replayed %d graphs", off.Arm.Name, off.Graphs.Captured, off.Graphs.Replayed))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s captured and replayed none", off.Arm.Name))
			}
		}
		if only := kernelSetDiff(on.Census, off.Census); only != "" {
			fails = append(fails, "the arms launch different kernels: "+only)
		} else {
			oks = append(oks, fmt.Sprintf("same %d kernels in both arms", len(launched(on.Census))))
		}
	}
	if rule.PDL {
		for _, x := range []LivenessInput{on, off} {
			if !x.HasGraphs {
				fails = append(fails, fmt.Sprintf(`arm %s printed no {"cuda_graphs":{...,"pdl_launches":N}} line`, x.Arm.Name))
			}
		}
		if on.HasGraphs && off.HasGraphs {
			if on.Graphs.PDLLaunches == 0 {
				fails = append(fails, fmt.Sprintf("arm %s (PDL on) issued no PDL launch", on.Arm.Name))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s issued %d PDL launches", on.Arm.Name, on.Graphs.PDLLaunches))
			}
			if off.Graphs.PDLLaunches != 0 {
				fails = append(fails, fmt.Sprintf("arm %s (PDL off) issued %d PDL launches", off.Arm.Name, off.Graphs.PDLLaunches))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s issued none", off.Arm.Name))
			}
		}
		if only := kernelSetDiff(on.Census, off.Census); only != "" {
			fails = append(fails, "the arms launch different kernels: "+only)
		} else {
			oks = append(oks, fmt.Sprintf("same %d kernels in both arms", len(launched(on.Census))))
		}
	}
	if rule.PrefillGraphs {
		for _, x := range []LivenessInput{on, off} {
			if !x.HasGraphs {
				fails = append(fails, fmt.Sprintf(`arm %s printed no {"cuda_graphs":{"captured":N,...}} line`, x.Arm.Name))
			}
		}
		if on.HasGraphs && off.HasGraphs {
			if on.Graphs.Captured <= off.Graphs.Captured {
				fails = append(fails, fmt.Sprintf("arm %s (prefill capture on) captured %d graphs, not more than arm %s (off) with %d",
					on.Arm.Name, on.Graphs.Captured, off.Arm.Name, off.Graphs.Captured))
			} else {
				oks = append(oks, fmt.Sprintf("arm %s captured %d graphs, arm %s %d", on.Arm.Name, on.Graphs.Captured, off.Arm.Name, off.Graphs.Captured))
			}
			if off.Graphs.Captured == 0 || off.Graphs.Replayed == 0 {
				fails = append(fails, fmt.Sprintf("arm %s (prefill capture off) captured %d and replayed %d graphs: its decode graph is missing too",
					off.Arm.Name, off.Graphs.Captured, off.Graphs.Replayed))
			}
		}
		if only := kernelSetDiff(on.Census, off.Census); only != "" {
			fails = append(fails, "the arms launch different kernels: "+only)
		}
	}
	if len(fails) > 0 {
		return Fail, strings.Join(fails, "; ")
	}
	return Pass, strings.Join(oks, "; ")
}

// LivenessOf is Liveness for a run configuration: when the arm with the
// path on launched none of the rule's kernels and the run's model or pp is
// not the workload the lever declares (harness.Lever.WorkloadMismatch), the
// reason says so, so a lever run on the wrong workload reads as that and
// not as a dead path.
func LivenessOf(cfg Config, a, b LivenessInput) (Status, string) {
	st, why := Liveness(cfg.Lever, a, b)
	if st != Fail || !strings.Contains(why, ", path on) launched no ") {
		return st, why
	}
	if note := cfg.Lever.WorkloadMismatch(cfg.Model, cfg.PP); note != "" {
		why = note + " (by the file-name rule of harness.Workload.MatchesModel; its path may not run on this model): " + why
	}
	return st, why
}

// matching sums the launches of the kernels matching pat.
func matching(c profile.Census, pat string) (int, []string) {
	n := 0
	var names []string
	for k, v := range c {
		if ok, _ := path.Match(pat, k); ok && v > 0 {
			n += v
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return n, names
}

func launched(c profile.Census) []string {
	var out []string
	for k, v := range c {
		if v > 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// kernelSetDiff describes the kernels launched by one census and not the
// other ("" when the sets are equal).
func kernelSetDiff(x, y profile.Census) string {
	var parts []string
	for _, k := range launched(x) {
		if y[k] == 0 {
			parts = append(parts, k+" only with the path on")
		}
	}
	for _, k := range launched(y) {
		if x[k] == 0 {
			parts = append(parts, k+" only with the path off")
		}
	}
	return strings.Join(parts, ", ")
}

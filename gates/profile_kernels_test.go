package gates

import (
	"testing"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
)

// ncu and cuobjdump look kernels up by name: a census pseudo-entry
// (kernels_file, kernels_nvrtc, spec_drafted) matches none, so a lever that
// switches only those (MINFER_KERNELS, MINFER_DRAFT) must profile the
// kernels both arms launch most; a lever that switches kernels keeps them
// first. Seen on the H200 (2026-12-02): ncu filtered on kernels_nvrtc and
// the profile gate had no evidence.
func TestProfiledKernels_PseudoEntriesNeverReachNcuOrSASS(t *testing.T) {
	a := profile.Census{"kernels_file": 1, "minfer_rms_norm_f32": 49, "minfer_mmvq_q8_0": 96, "minfer_add": 3}
	b := profile.Census{"kernels_nvrtc": 1, "minfer_rms_norm_f32": 49, "minfer_mmvq_q8_0": 96, "minfer_add": 3}
	d := &ProfileDetail{CensusA: a, CensusB: b, Diff: profile.Diff(a, b)}
	got := profiledKernels(d, 2)
	if len(got) != 2 || got[0].Kernel != "minfer_mmvq_q8_0" || got[1].Kernel != "minfer_rms_norm_f32" {
		t.Errorf("only pseudo-entries differ: profiled %+v, want the two most launched kernels", got)
	}
	b2 := profile.Census{"kernels_nvrtc": 1, "minfer_rms_norm_f32": 49, "minfer_mmvqr_q8_0": 96, "minfer_add": 3}
	d = &ProfileDetail{CensusA: a, CensusB: b2, Diff: profile.Diff(a, b2)}
	got = profiledKernels(d, 3)
	for _, k := range got {
		if !deviceKernel(k.Kernel) {
			t.Errorf("profiled %q, a census pseudo-entry", k.Kernel)
		}
	}
	if len(got) != 2 || got[0].Kernel != "minfer_mmvq_q8_0" && got[0].Kernel != "minfer_mmvqr_q8_0" {
		t.Errorf("a switched kernel pair: profiled %+v, want minfer_mmvq_q8_0 and minfer_mmvqr_q8_0", got)
	}
}

// The kernels a liveness rule names come first, whatever their launch
// counts: MINFER_MMQ_F16's A/B on the H100 (2026-12-07; the lever is
// retired) switched six kernels, and the three with the largest launch
// difference were the int8 MMQ, the activation quantization and the f16
// conversion (a tie with the GEMM, broken by name), so ncu and the SASS
// census never looked at minfer_gemm16_q8_0r. (Arm A's int8 MMQ read the
// repacked copy with a kernel deleted since; its GGUF twin stands in.)
func TestProfiledKernels_TheRuleKernelsComeFirst(t *testing.T) {
	a := profile.Census{"minfer_mmq_q8_0": 560, "minfer_mmq_q8_0_r64": 224, "minfer_mmq_reduce": 224, "minfer_quantize_q8_1_x4": 15707}
	b := profile.Census{"minfer_f32_to_f16": 448, "minfer_gemm16_q8_0r": 448, "minfer_quantize_q8_1_x4": 15259}
	d := &ProfileDetail{CensusA: a, CensusB: b, Diff: profile.Diff(a, b), Rule: &harness.PathRule{Census: []string{"minfer_gemm16_q8_0r"}}}
	got := profiledKernels(d, 3)
	if len(got) != 3 || got[0].Kernel != "minfer_gemm16_q8_0r" {
		t.Errorf("profiled %+v, want minfer_gemm16_q8_0r first", got)
	}
	d.Rule = &harness.PathRule{OffCensus: []string{"minfer_mmq_reduce"}}
	if got := profiledKernels(d, 1); len(got) != 1 || got[0].Kernel != "minfer_mmq_reduce" {
		t.Errorf("profiled %+v, want the off arm's rule kernel minfer_mmq_reduce", got)
	}
}

package kernels

import (
	"os/exec"
	"strings"
	"testing"
)

// scripts/kernel-emu runs five kernel families on the CPU through an
// emulation of the CUDA built-ins, WMMA, mma.sync and cp.async (g++, no
// toolkit, no GPU) and compares them with references: the tensor-core
// prefill attention with attention in double, the Q4_K / Q5_K MMVQ
// bitwise with a scalar reference, the async MMQ bitwise with the plain
// MMQ, the lean decode attention's combine with attention in double, and
// the multi-token MMVQ and the embedding gather over the repacked Q8_0 /
// Q6_K copy bitwise with their GGUF twins. A kernel edit that breaks one
// fails here before a device call pays for it. Skipped without
// g++ and under -short (about 30 s on 2 cores).
func emu(t *testing.T, script string, args ...string) (string, int) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the kernel emulators take ~30 s")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++ in PATH")
	}
	out, err := exec.Command("../../scripts/kernel-emu/"+script, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestKernelEmulators_EachFamilyMatchesItsReference(t *testing.T) {
	for script, want := range map[string]string{"fatc-emu.sh": "ALL WITHIN 1e-2", "mmvq-kq-emu.sh": "ALL BITWISE",
		"mmq-emu.sh": "every async output is bitwise the plain kernel's", "repacked-emu.sh": "ALL BITWISE"} {
		t.Run(script, func(t *testing.T) {
			t.Parallel()
			out, code := emu(t, script)
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("exit %d, want 0 and %q:\n%s", code, want, out)
			}
		})
	}
}

// The emulation can fail: a Q5_K fifth bit read from the wrong position,
// planted in a copy of mmvq.cu, is caught (exit 1).
func TestKernelEmulator_PlantedQ5KBitIsCaught(t *testing.T) {
	out, code := emu(t, "mmvq-kq-emu.sh", "--plant", "qhbit")
	if code != 1 {
		t.Fatalf("planted qhbit: exit %d, want 1:\n%s", code, out)
	}
}

// The tensor-core prefill attention's fragments, pipeline, KV split and
// lean softmax: P's A fragment with two words swapped, a tile read before
// its async copies' wait, a warp that skips a tile its last row still sees,
// a merge that sums the splits' l without rescaling them, K's fragments
// paired across the ldmatrix's two steps, a diagonal tile taken as seen
// whole, and row sums of P from half the ones are each caught (exit 1).
// (`vfrag`, `f16ld`, `split`, `log2` and `inld` are caught too: sessions
// 12, 20 and 21 ran them by hand; CI's time on 2 cores is kept.)
func TestKernelEmulator_PlantedTensorCoreFragmentsAreCaught(t *testing.T) {
	for _, plant := range []string{"pfrag", "wait", "skip", "combine", "kfrag", "full", "lsum"} {
		t.Run(plant, func(t *testing.T) {
			t.Parallel()
			out, code := emu(t, "fatc-emu.sh", "--plant", plant)
			if code != 1 || !strings.Contains(out, "OVER") {
				t.Fatalf("planted %s: exit %d, want 1 with a case OVER the bar:\n%s", plant, code, out)
			}
		})
	}
}

// The tensor-core decode attention (MINFER_ATTN_DECODE_TC: one warp and 16
// rows a block) and its combine are within 1e-2 of attention in double on
// nt 1..8 (G 1 / 2 / 7 / 8, head_dim 64 / 80 / 128, 2 to 99 splits, a
// window, NaN rows), and the combine's Q8_1 blocks are bitwise those of the
// f32 rows it writes; short ranges (1 to 200 cells at 99 splits) write the
// partials of the active splits only and the combine reads those and no
// other; a block that stages as if it had twice its threads, Q pairs
// loaded from their neighbours, a combine that weighs every split alike, one that
// quantizes neighbouring elements swapped, one that drops part of a split,
// one that reads every split's partial, and a kernel whose splits ignore
// DEC_MIN_TILES are each caught.
func TestKernelEmulator_DecodeTensorCoresWithinF16BarAndQ8Bitwise(t *testing.T) {
	if out, code := emu(t, "fatc-emu.sh", "--decode"); code != 0 || !strings.Contains(out, "ALL WITHIN 1e-2") {
		t.Fatalf("fatc-emu.sh --decode: exit %d:\n%s", code, out)
	}
	for _, plant := range []string{"thr", "qpair", "dcw", "dcq", "dcs", "dcu", "dcp"} {
		t.Run(plant, func(t *testing.T) {
			t.Parallel()
			if out, code := emu(t, "fatc-emu.sh", "--decode", "--plant", plant); code != 1 || !strings.Contains(out, "OVER") {
				t.Fatalf("--decode planted %s: exit %d, want 1 and a case OVER the bar:\n%s", plant, code, out)
			}
		})
	}
}

// The narrow tensor-core decode (MINFER_ATTN_DECODE_TC_NARROW:
// minfer_attn_decode_tc32_* over 32-cell tiles, and its combine) is within
// 1e-2 of attention in double on the --decode cases at its 7B grid of 198
// splits and at 188 and 227 active splits (past the 64-cell combine's 128;
// the 256 cap), its Q8_1 blocks bitwise, every partial written read and
// none other; the --decode plants that drop a split's last tile, part of a
// split in the combine, or read every split's partial are caught on it,
// and so are a narrow combine planning with 64-cell tiles, one whose lanes
// hold 128 splits, and a kernel stepping 64 cells from tile to tile.
func TestKernelEmulator_NarrowDecodeTensorCoresWithinF16BarAndQ8Bitwise(t *testing.T) {
	if out, code := emu(t, "fatc-emu.sh", "--decode-narrow"); code != 0 || !strings.Contains(out, "ALL WITHIN 1e-2 (tensor-core decode, 32-cell tiles") {
		t.Fatalf("fatc-emu.sh --decode-narrow: exit %d:\n%s", code, out)
	}
	for _, plant := range []string{"split", "dcs", "dcu", "nbn", "nmax", "nstep"} {
		t.Run(plant, func(t *testing.T) {
			t.Parallel()
			if out, code := emu(t, "fatc-emu.sh", "--decode-narrow", "--plant", plant); code != 1 || !strings.Contains(out, "OVER") {
				t.Fatalf("--decode-narrow planted %s: exit %d, want 1 and a case OVER the bar:\n%s", plant, code, out)
			}
		})
	}
}

// The lean decode attention's combine at the launcher's cap of 64 splits:
// one case of all 64 active splits matches attention in double within
// 1e-3, and a combine that weighs partials 0..31 with partials 32..63's
// weights is caught. (The whole list, `adec2-emu.sh` without --quick, is
// minutes here: every lane emulated.)
func TestKernelEmulator_DecodeAttentionCombineAt64SplitsWithin1e3OfDouble(t *testing.T) {
	emuPassesAndCatches(t, "adec2-emu.sh", "--quick", "ALL WITHIN 1e-3", "FAIL", "combine")
}

// emuPassesAndCatches runs script in mode (exit 0, its output naming pass)
// and then with each plant (exit 1, its output naming caught).
func emuPassesAndCatches(t *testing.T, script, mode, pass, caught string, plants ...string) {
	t.Helper()
	if out, code := emu(t, script, mode); code != 0 || !strings.Contains(out, pass) {
		t.Fatalf("%s %s: exit %d, want 0 and %q:\n%s", script, mode, code, pass, out)
	}
	for _, plant := range plants {
		if out, code := emu(t, script, "--plant", plant); code != 1 || !strings.Contains(out, caught) {
			t.Fatalf("planted %s: exit %d, want 1 and %q:\n%s", plant, code, caught, out)
		}
	}
}

// The decode norm written as its Q8_1 quantization (minfer_rms_norm_q8_1,
// MINFER_FUSE_NORM_Q8) is bitwise minfer_rms_norm_f32 then
// minfer_quantize_q8_1 for hidden sizes 64 to 4096 (both register depths),
// with and without a weight; two warps writing one block, the scale left
// out and the weight left out are each caught. (The block quantization
// itself is minfer_q8_1_warp of q8_1.cuh, the one both kernels call.)
func TestKernelEmulator_NormQ8_1BitwiseTheUnfusedPair(t *testing.T) {
	emuPassesAndCatches(t, "norm-emu.sh", "", "NORM Q8_1 BITWISE", "DIFFER", "qblk", "qscale", "qw")
}

// The lean decode attention is within 1e-4 of attention in double on
// every KV format and head_dim class (one split, 3 splits of 134 cells, a
// window); the second pass of an iteration reading the first one's
// registers, a partial last pass without its end test, and q scaled
// without log2(e) are each caught.
func TestKernelEmulator_LeanDecodeWithin1e4OfDouble(t *testing.T) {
	emuPassesAndCatches(t, "adec2-emu.sh", "--lean", "LEAN WITHIN 1e-4", "differs", "lpass", "ltail", "lscale")
}

// The f16 prefill matmul of a Q8_0 weight's one repacked copy and of
// Q4_K / Q6_K weights (MINFER_MMQ_F16_KQ) is within 1e-5 of sum |w x| of
// double sums over the same f16 values on whole and partial tiles;
// fragment, dequantization, buffer and split plants, and the K-quants'
// nibble, scale, header, swizzle and high-bit plants, are each caught.
func TestKernelEmulator_F16GemmWithin1e5OfDoubleSums(t *testing.T) {
	if out, code := emu(t, "gemm16-emu.sh"); code != 0 || !strings.Contains(out, "ALL WITHIN 1e-5") {
		t.Fatalf("gemm16-emu.sh: exit %d:\n%s", code, out)
	}
	for _, plant := range []string{"afrag", "bfrag", "deq", "buf", "seg", "split", "dmap", "k4nib", "k4sc", "k4hdr", "k6swz", "k6sc", "k6hi"} {
		if out, code := emu(t, "gemm16-emu.sh", "--plant", plant); code != 1 || !strings.Contains(out, "OVER") {
			t.Fatalf("planted %s: exit %d, want 1 and a shape OVER the bar:\n%s", plant, code, out)
		}
	}
}

// The async MMQ (MINFER_MMQ_ASYNC): a stage unpacked before its copies are
// waited for, and spans whose last 16-byte chunk is not copied, are each
// caught (exit 1); so is a repacked Q6_K unit that reads its scales one byte
// off (the repacked MMQ's only type since its Q8_0 form and plant `rd` went
// with MINFER_MMQ_F16). So are a plain Q5_K unit whose 16-byte loads read
// its high bits from the wrong 16 bytes (against the async kernel's 4-byte
// loads), and Q4_K / Q5_K without the min term in plain and async alike
// (against the sum in double). (`--plant mod16` and `next` are caught too:
// session 14 ran them by hand.)
func TestKernelEmulator_PlantedMMQAsyncCopyDefectsAreCaught(t *testing.T) {
	for _, plant := range []string{"wait", "tail", "rsc", "kwh", "kmin"} {
		t.Run(plant, func(t *testing.T) {
			t.Parallel()
			out, code := emu(t, "mmq-emu.sh", "--plant", plant)
			if code != 1 || !strings.Contains(out, "DIFFER") {
				t.Fatalf("planted %s: exit %d, want 1 with a case that differs:\n%s", plant, code, out)
			}
		})
	}
}

// The kernels over the repacked Q8_0 / Q6_K copy: minfer_mmvq_nt_q8_0r
// reading the f16 d of the block before, and minfer_get_rows_r reading a
// Q6_K value's scale from the wrong 16 values, are each caught (exit 1).
// (`--plant q6qh` and `rowsd` are caught too: run by hand when the check
// was written.)
func TestKernelEmulator_PlantedRepackedOffsetsAreCaught(t *testing.T) {
	for _, plant := range []string{"q8d", "rowsc"} {
		t.Run(plant, func(t *testing.T) {
			t.Parallel()
			out, code := emu(t, "repacked-emu.sh", "--plant", plant)
			if code != 1 || !strings.Contains(out, "DIFFER") {
				t.Fatalf("planted %s: exit %d, want 1 with a case that differs:\n%s", plant, code, out)
			}
		})
	}
}

// The lean decode attention's Q8_1 output (MINFER_FUSE_ATTN_Q8) is bitwise
// the lean kernel's row then minfer_quantize_q8_1 of it, the launch the
// fusion removes (every KV format, head_dim 64 and 128, one split, the
// combine, a window, NaN rows, out null); each writer storing a lane's
// values at its neighbour's place and s from one lane's sum of q are each
// caught.
func TestKernelEmulator_AttnQ8BitwiseTheLeanRowQuantized(t *testing.T) {
	emuPassesAndCatches(t, "adec2-emu.sh", "--q8", "Q8 BITWISE", "differ", "q8one", "q8comb", "q8sum")
}

// A kernel whose threads wait at a barrier the others never reach (a
// shuffle only some lanes of a warp call) stops the emulator with exit 3
// and a message (include/emu_launch.h), where a thread per lane hung.
func TestKernelEmulator_BarrierNotReachedIsADeadlockNotAHang(t *testing.T) {
	if out, code := emu(t, "adec2-emu.sh", "--plant", "q8div"); code != 3 || !strings.Contains(out, "wait at barriers no other thread reaches") {
		t.Fatalf("planted q8div: exit %d, want 3 and the deadlock message:\n%s", code, out)
	}
}

// The mixed-type decode q/k/v (MINFER_MMVQ_QKV_MIXED,
// minfer_mmvq_xqkv_<qk>_<v>[r]) is bitwise the three separate launches it
// replaces: qwen2-0.5b Q4_K_M's Q5_0 q/k with a repacked Q8_0 v at 896 /
// 128 / 128 rows of 896, qwen2-7b Q4_K_M's Q4_K q/k with a repacked Q6_K v
// at 3584 / 512 / 512 rows of 3584, and every pair of the table at a small
// shape; v's rows read with the q/k type, k's rows given q's bias, and v's
// repacked rows located with k's row count are each caught.
func TestKernelEmulator_MixedQKVBitwiseTheThreeLaunches(t *testing.T) {
	emuPassesAndCatches(t, "xqkv-emu.sh", "", "ALL BITWISE", "DIFFER", "vtype", "kbias", "vn")
}

// The decode q/k/v matvec with the rope/store folded in
// (MINFER_FUSE_QKV_ROPE: minfer_mmvq_qkvrs_<t>, minfer_mmvqr_qkvrs_<t>,
// minfer_mmvq_xqkvrs_<qk>_<v>[r]) writes q' and both KV regions bitwise as
// the bias-less matvec then minfer_qkv_rope_store: qwen2-0.5b Q4_K_M's Q5_0
// and Q5_0 / repacked Q8_0 forms and the repacked Q8_0 at its shape, the
// 7B's Q4_K / repacked Q6_K pair at head_dim 128, every kernel small (f32
// and f16, head_dim 64 and 128, positions 0, 7 and 123457, no biases, the
// window's cell at -1 and n_ctx: nothing written). A pair rotated with
// the wrong partner, a pair given its neighbour's angle, v never stored and
// a K cell past n_ctx stored are each caught.
func TestKernelEmulator_QKVRopeStoreBitwiseTheMatvecThenRopeStore(t *testing.T) {
	emuPassesAndCatches(t, "qkvrs-emu.sh", "", "ALL BITWISE", "DIFFER", "pair", "angle", "vstore", "cell")
}

// MINFER_FUSE_NORM_MMVQ (mmvq_znorm.cu): every normed decode matvec (one
// type, repacked, mixed, roped) at k 896 .. 2048 and 64, 160, bitwise
// minfer_rms_norm_q8_1 then the plain kernel, its shared Q8_1 row the norm
// kernel's bytes. Each planted defect is caught: the norm block's second
// virtual thread dropped, eps left out, the row read before its barrier,
// a warp's Q8_1 block written one further, rows of 2048 at the 1024
// register depth (its own run at k 2048).
func TestKernelEmulator_NormMMVQBitwiseTheNormThenTheMatvec(t *testing.T) {
	emuPassesAndCatches(t, "normmv-emu.sh", "", "ALL BITWISE", "DIFFER", "vthread", "eps", "sync", "blk", "depth")
}

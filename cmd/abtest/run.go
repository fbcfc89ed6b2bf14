package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/runs"
)

// runFlags binds the flags of `abtest run` (and the per-lever part of
// nightly, calibrate) to runs.Options.
type runFlags struct {
	o      runs.Options
	fl     *pflag.FlagSet
	asJSON bool
}

// opts is the options with the flags the user set.
func (f *runFlags) opts() *runs.Options {
	o := f.o
	o.Given = map[string]bool{}
	f.fl.Visit(func(fl *pflag.Flag) { o.Given[fl.Name] = true })
	return &o
}

func (f *runFlags) register(cmd *cobra.Command, withLever bool) {
	fl := cmd.Flags()
	f.fl = fl
	o := &f.o
	if withLever {
		fl.StringVar(&o.Lever, "lever", "", "lever to test: NAME or NAME=B (B: the candidate value)")
		fl.StringVar(&o.Baseline, "baseline", "", "arm A value (default: the lever's declared arm A)")
		fl.StringArrayVar(&o.With, "with", nil, "MINFER_X=V set in both arms (repeatable): the A/B with another path on, e.g. an opt-in kernel family (--lever MINFER_KERNELS=nvrtc --with MINFER_MMVQ_SPLIT=1); each is a deviation in the report")
		fl.StringVar(&o.Mutate, "mutate", "", "plant a defect in arm B through MINFER_TEST_MUTATE (perturb_logit, skip_bias, slow_decode[=F], slow_prefill[=F], phantom, fail_device_test, accept_wrong_draft)")
		fl.BoolVar(&f.asJSON, "json", false, "print the result JSON on stdout")
		fl.StringVar(&o.BenchOut, "bench-out", "", "also write the A/B rounds in Go benchmark format to this file")
		fl.BoolVar(&o.OnWorkload, "workload", true, "run on the lever's declared workload (minfer levers: WORKLOAD): its synthesized model (--synth-dir, --seed) and/or prefill size; by default unless --model/--shape/--pp are given or the run is on the CPU backend (a lever's CPU path runs on the default model); given explicitly, always; --workload=false never")
	}
	fl.StringVarP(&o.Model, "model", "m", "", "GGUF model (default: minfer's embedded model)")
	fl.StringArrayVar(&o.CorrectnessModels, "correctness-model", nil, "GGUF the parity and greedy gates run on instead of --model (a trained model: a random-weight model's small top-2 margins flip under any rounding change); A/B, suite and profile keep --model. Repeatable, one per architecture: a run takes the one of its model's architecture, quantized to its weight type (once, into --synth-dir); with none of that architecture, parity and greedy run on --model and the report says so")
	fl.StringVar(&o.Shape, "shape", "", "synthesize a model of this shape with minfer synth (with --type)")
	fl.StringVar(&o.Type, "type", "", "weight type or mix of the synthesized model (F16, Q8_0, Q4_K_M, ...: see minfer synth --help)")
	fl.Uint64Var(&o.Seed, "seed", 1, "weight seed of the synthesized model (--shape)")
	fl.StringVar(&o.SynthDir, "synth-dir", "", "cache of synthesized models, keyed by shape/type/seed (default: $XDG_CACHE_HOME/minfer/abtest-synth)")
	fl.StringVar(&o.Device, "device", "auto", "auto, cpu or cuda")
	fl.IntVar(&o.Rounds, "rounds", 9, "A/B rounds (PAIRS) when no calibration pre-registers them; given with a calibration, a deviation")
	fl.StringVar(&o.Calibration, "calibration", "", "calibration file, or the folder holding calibration/ (default: the nearest folder at or above --out that holds one); abtest calibrate writes them")
	fl.StringVar(&o.SuiteCache, "suite-cache", "", "folder of suite results: an identical suite run (same binaries, kernels, settings and GPU by sha256) of the last day is reused and said so")
	fl.IntVar(&o.PP, "pp", 512, "prefill tokens per bench test")
	fl.IntVar(&o.TG, "tg", 128, "decode tokens per bench test")
	fl.IntVar(&o.Reps, "reps", 3, "repetitions per bench process (the round value is their median)")
	fl.IntVar(&o.Depth, "depth", 0, "KV cache cells filled before each bench test of the A/B and profile gates (minfer bench -d; a workload's dN sets it unless this is given): a long-context lever measured where it acts")
	fl.IntVar(&o.WarmupMS, "warmup-ms", 2000, "untimed warmup budget before round 1 (per arm)")
	fl.IntVar(&o.BenchWarm, "bench-warmup-ms", 500, "in-process warmup of every timed bench (MINFER_BENCH_WARMUP_MS)")
	fl.IntVar(&o.GenN, "gen-n", 32, "greedy tokens per prompt")
	fl.StringVar(&o.Prompts, "prompts", "", "prompts file for the greedy gate (prompts separated by '---' lines)")
	fl.StringVar(&o.Gates, "gates", strings.Join(gates.AllGates, ","), "gates to run (fewer than five: PARTIAL, never PASS)")
	fl.StringVar(&o.Out, "out", "reports", "report folder")
	fl.StringVar(&o.Minfer, "minfer", "", "minfer binary (default: next to abtest, else in PATH)")
	fl.StringVar(&o.Kernels, "kernels", "", "kernels fatbin for the SASS census and the test binaries (default: *.fatbin next to minfer; with none, the arms load the NVRTC build and the SASS census reads its cubins)")
	fl.StringSliceVar(&o.SuiteBins, "suite-bin", nil, "test binaries (globs) for kernel parity and the suite gate; only the project's (by build stamp) of the backend's suite count (default: *.test and tests/*.test beside minfer)")
	fl.DurationVar(&o.Timeout, "arm-timeout", 5*time.Minute, "per-process limit: a hung arm is a FAIL (0: no limit)")
	fl.Float64Var(&o.BarPP, "bar-pp", 1.015, "not-slower bar for prefill (slowdown factor); the lever's registry entry pre-registers it: setting it is a deviation")
	fl.Float64Var(&o.BarTG, "bar-tg", 1.015, "not-slower bar for decode (a deviation, as --bar-pp)")
	fl.Float64Var(&o.ClaimBar, "claim-bar", 0.015, "improvement bar (fraction; a deviation, as --bar-pp)")
	fl.Float64Var(&o.GraphTol, "graph-tol", 0.5, "whole-graph max|diff| bar against the CPU reference")
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --lever NAME[=B] [flags]",
		Short: "run the five gates on one lever and write reports/<lever>/<date>-<commit>.md",
		Long: "Exit 0: PASS (all five gates ran and passed); 1: FAIL (also a planted mutation no gate caught);\n" +
			"2: could not run; 3: INCONCLUSIVE, PARTIAL or INCOMPLETE.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec, base, err := runs.RunLever(cmd.Context(), f.opts(), strings.Join(os.Args, " "), os.Stderr)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: %s\nabtest: report %s.md\n", rec.VerdictLine, base)
			if f.asJSON {
				b, _ := json.MarshalIndent(rec, "", "  ")
				fmt.Println(string(b))
			}
			return exit(rec.ExitCode())
		},
	}
	f.register(cmd, true)
	return cmd
}

func newCalibrateCmd() *cobra.Command {
	var f runFlags
	var workloads string
	cmd := &cobra.Command{
		Use:   "calibrate [--workload SPEC|all|default] [--out reports]",
		Short: "record this machine's A/A noise per workload (the same build and settings in both arms), from which abtest run pre-registers its rounds",
		Long: "Runs gate 3's interleaved rounds with arm A on both sides and records, per metric (pp, tg) and timing\n" +
			"basis (wall; device where the backend times its splits), the sd of the per-round log ratio, with the\n" +
			"date, GPU, clocks and commit, into OUT/calibration/<machine>/<model>-pp<P>-tg<T>-r<R>.json (and .md).\n" +
			"It also states the rounds each sd pre-registers at GATES.md's default bars and how often the\n" +
			"improvement claim fires on resampled A/A rounds. --workload takes a registry workload (\"qwen2-0.5b:Q8_0 pp5\"),\n" +
			"\"default\" (the embedded model, or --model/--shape) or \"all\" (every workload a lever declares, plus the default).\n" +
			"Exit 0: written; 2: could not run; 3: interrupted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runs.Calibrate(cmd.Context(), f.opts(), workloads, strings.Join(os.Args, " "))
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&workloads, "workload", "default", "default, all, or a workload SPEC (SHAPE:TYPE and/or ppN)")
	_ = cmd.Flags().Set("rounds", "11")
	cmd.Flags().Lookup("rounds").DefValue = "11"
	return cmd
}

func newNightlyCmd() *cobra.Command {
	var f runFlags
	var o runs.NightlyOptions
	cmd := &cobra.Command{
		Use:   "nightly [--levers all|L1,L2] [--out reports/nightly] [--shard i/N|auto/N]",
		Short: "run every lever with all five gates, then write one summary page (verdicts, speed, regressions against the previous nightly)",
		Long: "Every lever with arms, all five gates each (the suite through a cache: levers whose arm B has the same\n" +
			"settings share one suite run), then one summary page. Exit codes as abtest run: 0 every lever PASS,\n" +
			"1 a FAIL or a regression, 2 a lever could not run, 3 INCONCLUSIVE / PARTIAL / INCOMPLETE / SKIP.\n" +
			"A lever runs on --model and --pp unless it declares a workload (minfer levers: WORKLOAD): then on\n" +
			"that model (synthesized once into --synth-dir with --seed) and/or pp. Parity and greedy run on\n" +
			"--correctness-model fitted to each lever's model: quantized to its weight type (once, into\n" +
			"--synth-dir), or not used for another architecture (then on the lever's model itself).\n" +
			"Arm B is compared with the previous nightly's only on the same workload (model sha256 and pp);\n" +
			"a lever whose workload changed is \"not comparable\", never a regression.\n\n" +
			"On a pool of machines: --shard i/N (i from 0; auto/N reads $JOB_COMPLETION_INDEX, a Kubernetes\n" +
			"Indexed Job's pod index) runs a deterministic 1/N of the levers, balanced by each lever's time in\n" +
			"the previous nightly (--balance-from, else --out; by count when there is none), and writes\n" +
			"nightly-DATE-shard-IofN.json/.md after every lever. Shard 0 runs every lever's suite gate (the\n" +
			"other shards' reports carry it as deferred until abtest merge), or each shard its own levers' with\n" +
			"--suite-every-shard. abtest merge then writes the night's summary.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sum, path, err := runs.Nightly(cmd.Context(), f.opts(), o, strings.Join(os.Args, " "))
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: nightly %s: summary %s.md\n", sum.Verdict, path)
			return exit(sum.ExitCode())
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&o.Levers, "levers", "all", "all (every lever with arms), or a comma-separated list (NAME or NAME=B)")
	cmd.Flags().StringVar(&o.Threshold, "threshold", "2%", "smallest change against the previous nightly that counts as a regression")
	cmd.Flags().StringVar(&o.Shard, "shard", "", "run shard i of N (i/N, i from 0), or auto/N: i from $JOB_COMPLETION_INDEX")
	cmd.Flags().StringVar(&o.BalanceFrom, "balance-from", "", "nightly summary (or folder of them: the newest) whose lever times balance the shards (default: the previous nightly in --out)")
	cmd.Flags().BoolVar(&o.SuiteEveryShard, "suite-every-shard", false, "each shard runs its own levers' suite gate (default: shard 0 runs every lever's)")
	cmd.Flags().StringVar(&o.Control, "control", "", "a lever (NAME[=B]) every shard runs besides its part: the merge compares its B/A across the shards' machines")
	_ = cmd.Flags().Set("out", "reports/nightly")
	cmd.Flags().Lookup("out").DefValue = "reports/nightly"
	return cmd
}

func newMergeCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "merge --out DIR SHARD_DIR...",
		Short: "merge a sharded nightly's parts into the summary one unsharded run would write",
		Long: "Reads each shard's nightly-*-shard-*.json (from the folders given, or the files) and writes into --out\n" +
			"the night's summary and every lever's report: each lever once, a deferred suite gate filled in from\n" +
			"shard 0, the comparison with the previous nightly in --out, and the verdict by GATES.md's precedence.\n" +
			"A FAIL in any shard stays a FAIL; a missing shard is named and its levers are INCONCLUSIVE; a shard\n" +
			"that stopped early leaves its remaining levers INCOMPLETE. Shards of different commits, machines,\n" +
			"lever sets, shard counts or splits are refused (exit 2, naming the field). Exit codes as nightly.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sum, path, err := runs.Merge(cmd.Context(), out, args, strings.Join(os.Args, " "))
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: nightly %s: summary %s.md\n", sum.Verdict, path)
			return exit(sum.ExitCode())
		},
	}
	cmd.Flags().StringVar(&out, "out", "reports/nightly", "folder of the merged summary and the lever reports (and of the previous nightlies)")
	return cmd
}

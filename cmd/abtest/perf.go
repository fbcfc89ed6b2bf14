package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/runs"
)

func newPerfCmd() *cobra.Command {
	var f runs.PerfOptions
	cmd := &cobra.Command{
		Use:   "perf [--rows all|issue20|issue20-table|SHAPE:TYPE[@dDEPTH],...] [--device cuda] [--peer llama-bench=PATH] [--base-minfer PATH] [--with MINFER_X=V] [--out reports/perf]",
		Short: "measure issue 6's speed table: minfer bench on every synthesized row against the reference engine's numbers, with decode GB/s and the share of the HBM floor",
		Long: "For each row of issue 6's target table: synthesize the model (cached), run one `minfer bench`\n" +
			"process (in-process warmup of --bench-warmup-ms first), and write reports/perf/<date>-<commit>.md/.json:\n" +
			"ours, the reference, the ratio and whether the target is met, for pp512 and tg128, plus the decode\n" +
			"GB/s (weight bytes read per token x tg tok/s) and its share of the 4.3 TB/s HBM floor.\n" +
			"After each depth-0 row's timed bench, one short census process (MINFER_LAUNCH_CENSUS=1 minfer bench -p 0 -n 32 -r 1)\n" +
			"counts kernels and graph replays per decoded token; ms per token and µs per launch come from the timed bench.\n" +
			"The long-context row qwen2-7b:Q4_K_M@d4096 (in --rows all) runs `minfer bench -d 4096`; its tg is judged\n" +
			"against the same invocation's tg at depth 0 of qwen2-7b:Q4_K_M (>= 0.85 x; measured by the row itself when\n" +
			"that row is not run). A depth row SHAPE:TYPE@dDEPTH runs pp and tg at that depth in one process\n" +
			"(`minfer bench -p PP -n TG -d DEPTH --ctx DEPTH+PP+TG`); its tg keeps issue 6's judgement.\n" +
			"--peer llama-bench=PATH: per row, after one untimed warm-up process of each engine, --peer-rounds rounds of\n" +
			"one `minfer bench` and one `llama-bench -m FILE -ngl 99 -p PP -n TG -r REPS -o json [-d DEPTH]` on the same\n" +
			"GGUF file, the order alternating; the peer's medians are the ratio column and its peak device memory is\n" +
			"sampled as minfer's. With a depth-0 row and depth rows of one model, the pp chunk time's slope over depth\n" +
			"(ms per 1,024 cached tokens) is reported for both engines (ours above the peer's is a missed target).\n" +
			"--base-minfer PATH: another minfer build (e.g. of an older commit) run beside ours on every row: one untimed\n" +
			"warm-up process of it too, then in each of the --peer-rounds rounds one `minfer bench` of it with our arguments\n" +
			"and environment, the engines' order rotating (minfer, base[, peer] rotated left by round-1). Ours must be no\n" +
			"slower: our median >= the base's / 1.015 on pp and tg (GATES.md gate 3's bar), else the row missed; a failed\n" +
			"base bench fails the row. --rows issue20-table runs issue 20's 13 perf-table rows (its Must targets kept).\n" +
			"--with MINFER_X=V (repeatable) runs every minfer process with that lever setting, named at the top of the\n" +
			"report; a MINFER_* variable in abtest's own environment is refused (exit 2), never silently dropped.\n" +
			"Exit 0: every judged row met its targets; 1: a row missed a target or failed; 2: could not run.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec, base, err := runs.Perf(cmd.Context(), &f, strings.Join(os.Args, " "), os.Stderr)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: perf %s: %s\nabtest: report %s.md\n", rec.Verdict, rec.VerdictLine, base)
			return exit(rec.ExitCode())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Rows, "rows", "all", "all (issue 6's table and its long-context row), issue20 (issue 20's Must rows), issue20-table (the 13 rows of issue 20's perf table, the Must targets on theirs) or SHAPE:TYPE[@dDEPTH],... (a pair outside the table runs without reference numbers or targets; @dDEPTH runs pp and tg at that depth)")
	fl.StringVar(&f.Device, "device", "cuda", "cuda, cpu or auto (the reference ran on the H200: only cuda is like-for-like)")
	fl.IntVar(&f.PP, "pp", harness.PerfRefPP, "prefill tokens (the reference is pp512: other sizes are not compared)")
	fl.IntVar(&f.TG, "tg", harness.PerfRefTG, "decode tokens (the reference is tg128: other sizes are not compared)")
	fl.IntVar(&f.Reps, "reps", 5, "repetitions in the bench process (the row's value is their median, as the reference's)")
	fl.IntVar(&f.BenchWarm, "bench-warmup-ms", 2000, "untimed in-process warmup before the timed repetitions (MINFER_BENCH_WARMUP_MS)")
	fl.StringVar(&f.Out, "out", "reports/perf", "report folder")
	fl.StringVar(&f.Minfer, "minfer", "", "minfer binary (default: next to abtest, else in PATH)")
	fl.StringVar(&f.SynthDir, "synth-dir", "", "cache of synthesized models, keyed by shape/type/seed (default: $XDG_CACHE_HOME/minfer/abtest-synth)")
	fl.Uint64Var(&f.Seed, "seed", 1, "weight seed of the synthesized models")
	fl.StringVar(&f.Peer, "peer", "", "llama-bench=PATH: measure the peer engine on every row's same GGUF file, interleaved with minfer (its numbers become the ratio column; without it the ratios use the stored reference constants of issue 6)")
	fl.IntVar(&f.PeerRounds, "peer-rounds", 2, "with --peer or --base-minfer: rounds per row, each one timed process of every engine of --reps repetitions (minfer, the base, llama-bench), the order rotating each round: with two engines odd rounds minfer first, even rounds the other first (after one untimed -r 1 warm-up process of each)")
	fl.StringVar(&f.BaseMinfer, "base-minfer", "", "another minfer binary (e.g. a build of an older commit, its kernels file beside it) measured beside ours on every row with the same bench arguments and environment, interleaved as the peer is: ours must be no slower than it by more than 1.5% (GATES.md gate 3's bar) on pp and tg, else the row missed")
	fl.StringArrayVar(&f.With, "with", nil, "MINFER_X=V every minfer process runs with (repeatable): the table of another setting than the defaults, stated at the top of the report (a MINFER_* variable in abtest's own environment is refused, never dropped)")
	fl.DurationVar(&f.Timeout, "row-timeout", 20*time.Minute, "limit of each minfer process (synth, bench): a hung row is FAILED (0: no limit)")
	return cmd
}

func newNCUCmd() *cobra.Command {
	var out string
	var floor float64
	cmd := &cobra.Command{
		Use:   "ncu [--out file.md] [--floor-gbs 4300] CSV...",
		Short: "write per-kernel evidence tables from per-launch `ncu --csv` files (scripts/device-ncu.sh): what bounds each kernel",
		Long: "For each CSV (per-launch `ncu --csv` output, e.g. $OUT/ncu-SHAPE-TYPE-PHASE.csv of scripts/device-ncu.sh)\n" +
			"write a markdown table of its kernels sorted by total duration: launches, share of the window, mean duration,\n" +
			"DRAM bytes per launch, achieved GB/s and its share of --floor-gbs, SM / issue-slot / tensor-pipe / DRAM %,\n" +
			"registers, achieved occupancy, shared-memory bank conflicts, dynamic shared memory, grid x block, and the\n" +
			"bound each kernel's numbers point to by the rule printed at the top. A metric the CSV lacks shows \"-\".\n" +
			"Files that cannot be read are named on stderr (the others are still written).\n" +
			"Exit 0: every file summarized; 2: a file could not be read or summarized.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runs.NCU(args, out, floor, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "markdown file to write (default: stdout)")
	cmd.Flags().Float64Var(&floor, "floor-gbs", gates.CopyCeilingGBs, "bandwidth the achieved GB/s is compared with (the H200's measured HBM copy ceiling)")
	return cmd
}

func newSASSDiffCmd() *cobra.Command {
	var o runs.SASSDiffOptions
	c := &cobra.Command{
		Use:   "sass-diff OLD NEW",
		Short: "show which kernels' SASS differs between two kernels files (or two cuobjdump --dump-sass listings)",
		Long: "Compare two builds of the kernels function by function: OLD and NEW are kernels files (cuobjdump\n" +
			"--dump-sass reads them; one fatbin or several concatenated) or saved listings (*.sass, *.txt). A function\n" +
			"is the same when every instruction (predicate, opcode, operands, branch targets) is; addresses and\n" +
			"encodings are not compared. Prints the counts and, for each changed function, its instruction counts and\n" +
			"the opcodes whose counts moved. The evidence behind \"these kernels compile to the same SASS\".\n" +
			"cuobjdump takes minutes on a large -lineinfo fatbin (2 min for 9.7 MB on a 2-core machine): save a\n" +
			"listing once (cuobjdump --dump-sass F > F.sass) to compare it again.\n" +
			"--runs takes abtest reports (*.json) of MINFER_KERNELS A/Bs (nvcc's file against the NVRTC build) and\n" +
			"names, for each changed function, the runs whose two arms both launched it: a difference counts as shown\n" +
			"no slower only where a PASS run (all five gates) launched it. Without --ledger the runs must be of one\n" +
			"source tree, taken to be the listings'.\n" +
			"--ledger DIR records the listings' per-function SASS digests (OLD as nvcc's, NEW as NVRTC's) in\n" +
			"DIR/<12 hex of the sources hash>.tsv (--sources, required: the listings' kernel-sources sha256); a\n" +
			"ledger already there with other digests is an error. Runs of other sources then count for a function\n" +
			"only where their sources' ledger has today's digests of it in both builds (\"SASS changed since\" where\n" +
			"not); a run of sources without a ledger cannot be judged.\n" +
			"Exit 0: the same functions, all identical, or with --runs every changed and added function shown no\n" +
			"slower by a PASS run and none removed; 1: otherwise; 2: a file could not be read or a run judged.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runs.SASSDiff(cmd.Context(), args[0], args[1], o, cmd.OutOrStdout())
		},
	}
	c.Flags().StringSliceVar(&o.Runs, "runs", nil, "abtest reports (JSON; globs expanded) of MINFER_KERNELS A/Bs: which changed kernels a PASS run timed (of one source tree unless --ledger)")
	c.Flags().StringVar(&o.Ledger, "ledger", "", "SASS ledger directory (e.g. reports/MINFER_KERNELS/sass): write the listings' per-function digests there and count runs of other sources whose ledger has today's SASS")
	c.Flags().StringVar(&o.Sources, "sources", "", "with --ledger (required there): the kernel-sources sha256 the listings were built from (kernel_sources_sha256 of a run or of minfer bench's JSON)")
	return c
}

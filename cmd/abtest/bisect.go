package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/harness/runs"
)

func newBisectCmd() *cobra.Command {
	var o runs.BisectOptions
	cmd := &cobra.Command{
		Use:   "bisect --good REV --bad REV --workload W [--lever L] [--builds DIR] [--out reports/bisect]",
		Short: "find the first commit at which a workload got slower (or faster), a lever's gain vanished, or greedy output changed",
		Long: "Walks the first-parent line from --good to --bad. It first runs the two ends against each other,\n" +
			"interleaved, and refuses to bisect a difference it cannot reproduce (exit 3). The mode: --lever L\n" +
			"bisects the loss of L's B/A gain; otherwise greedy output when the ends' outputs differ, else the\n" +
			"workload's speed (--mode forces one). Each probed commit is built in a clean checkout (go build, and\n" +
			"the kernels where nvcc is present; a commit that does not build is skipped, as git bisect skip), or\n" +
			"taken from --builds DIR (one folder per commit, named by its hash, for a machine without Go; a\n" +
			"commits.txt there lists the line when there is no repository). A probe runs interleaved against both\n" +
			"ends and is like good, like bad, or unknown (more rounds up to --max-rounds, then skipped). The end:\n" +
			"last good against first bad once more, and their per-kernel difference (launch census; ncu on a GPU).\n" +
			"Exit 0: the first bad commit named and confirmed; 2: could not run; 3: not reproduced, a range of\n" +
			"untestable commits, or not confirmed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, base, err := runs.Bisect(cmd.Context(), &o, strings.Join(os.Args, " "), os.Stderr)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: bisect %s\nabtest: report %s.md\n", r.Line, base)
			return exit(r.ExitCode())
		},
	}
	fl := cmd.Flags()
	// Only the settings a bisect uses (no gates, bars or suite: it judges
	// speed or output between builds, not a lever's five gates).
	fl.StringVar(&o.Device, "device", "auto", "auto, cpu or cuda")
	fl.StringVar(&o.Minfer, "minfer", "", "abtest's own minfer, for the registry, the probes and the workload's synthesis (default: next to abtest, else in PATH)")
	fl.StringVar(&o.SynthDir, "synth-dir", "", "cache of synthesized models (default: $XDG_CACHE_HOME/minfer/abtest-synth)")
	fl.Uint64Var(&o.Seed, "seed", 1, "weight seed of the synthesized workload")
	fl.IntVar(&o.Rounds, "rounds", 9, "interleaved rounds of the ends' run (and of the final re-run)")
	fl.IntVar(&o.PP, "pp", 512, "prefill tokens per bench test (a workload's @ppN wins)")
	fl.IntVar(&o.TG, "tg", 128, "decode tokens per bench test")
	fl.IntVar(&o.Reps, "reps", 3, "repetitions per bench process")
	fl.IntVar(&o.BenchWarm, "bench-warmup-ms", 500, "in-process warmup of every timed bench (MINFER_BENCH_WARMUP_MS)")
	fl.IntVar(&o.GenN, "gen-n", 32, "greedy tokens per prompt (output mode)")
	fl.DurationVar(&o.Timeout, "arm-timeout", 5*time.Minute, "per-process limit (0: no limit)")
	fl.StringVar(&o.Out, "out", "reports/bisect", "report folder")
	fl.StringVar(&o.Good, "good", "", "a commit without the change")
	fl.StringVar(&o.Bad, "bad", "", "a later commit with it")
	fl.StringVar(&o.Workload, "workload", "embedded", "embedded, or SHAPE:TYPE[@ppN] (synthesized once into --synth-dir)")
	fl.StringVar(&o.Lever, "lever", "", "bisect the loss of this lever's gain (NAME or NAME=B)")
	fl.StringVar(&o.Mode, "mode", "auto", "auto, speed or output")
	fl.StringVar(&o.Metric, "metric", "auto", "auto (the one that moved most), pp or tg")
	fl.StringVar(&o.Threshold, "threshold", "2%", "smallest slowdown (or loss of gain) that counts")
	fl.StringVar(&o.Repo, "repo", ".", "the git repository")
	fl.StringVar(&o.Builds, "builds", "", "folder of prebuilt folders, one per commit (minfer and its kernels file)")
	fl.StringVar(&o.BuildDir, "build-dir", "", "where commits are built and kept (default OUT/.builds)")
	fl.IntVar(&o.StepRounds, "step-rounds", 9, "rounds of a probe before it may add more")
	fl.IntVar(&o.MaxRounds, "max-rounds", 27, "a probe still undecided at this many rounds is unknown")
	return cmd
}

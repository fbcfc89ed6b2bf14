package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/harness/runs"
)

func newPRCmd() *cobra.Command {
	var f runFlags
	var o runs.PROptions
	cmd := &cobra.Command{
		Use:   "pr --base DIR --head DIR [--workloads all|embedded,SHAPE:TYPE[@ppN],...] [--out reports/pr]",
		Short: "report on a pull request: the base build against the head build, interleaved, over a workload matrix",
		Long: "Each DIR holds a minfer binary and its kernels file. For every workload (default: each one a lever\n" +
			"declares, plus the embedded model) the base build is arm A and the head build arm B of one interleaved\n" +
			"run, so drift hits both alike: parity (A vs B bitwise, or within --tolerance), greedy identity and the\n" +
			"A/B with rounds and power as abtest run. --head-env MINFER_X=V sets a variable for the head only (a\n" +
			"planted MINFER_TEST_MUTATE proves the page catches it). Writes OUT/<date>-<base>-<head>.md (a page to\n" +
			"paste as a comment: summary first, details folded, under 60,000 characters), its .json, Go benchmark\n" +
			"lines (.bench.txt, for benchstat) and each workload's full report in the folder beside it.\n" +
			"Exit 0: no regression; 1: a workload slower beyond its bar, or outputs changed outside the class;\n" +
			"2: could not run; 3: inconclusive (underpowered, interrupted).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Options = *f.opts()
			run, page, err := runs.PR(cmd.Context(), &o, strings.Join(os.Args, " "), os.Stderr)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "abtest: pr %s\nabtest: page %s.md\n", run.VerdictLine, page)
			return exit(run.ExitCode())
		},
	}
	f.register(cmd, false)
	fl := cmd.Flags()
	fl.StringVar(&o.Base, "base", "", "folder of the base build (minfer and its kernels file): arm A")
	fl.StringVar(&o.Head, "head", "", "folder of the head build: arm B")
	fl.StringVar(&o.Workloads, "workloads", "all", "all, or a comma list of embedded and SHAPE:TYPE[@ppN]")
	fl.StringVar(&o.Tolerance, "tolerance", "", "the class the change declares for its outputs (kv-precision, activation-quantization, accumulation-order, f16-weight-tile, or a phrase; default bitwise)")
	fl.StringArrayVar(&o.HeadEnv, "head-env", nil, "MINFER_X=V for the head build only (repeatable)")
	_ = fl.Set("out", "reports/pr")
	fl.Lookup("out").DefValue = "reports/pr"
	return cmd
}

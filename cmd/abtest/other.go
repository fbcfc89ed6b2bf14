package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/harness/runs"
	"github.com/minfer-go/minfer/harness/stats"
)

func newCompareCmd() *cobra.Command {
	var threshold string
	cmd := &cobra.Command{
		Use:   "compare OLD.json NEW.json",
		Short: "compare two stored lever results (markdown on stdout); exit 1 on a significant regression beyond the threshold",
		Long: fmt.Sprintf("Compares the per-round B/A ratios of two results of one experiment (the same lever, arms, mutation,\n"+
			"model sha256, weight type, pp, tg, backend and GPU model; otherwise it refuses with exit 2 and names the\n"+
			"field). Each run interleaved its arms, so drift cancels inside it; the two runs are independent, so the\n"+
			"test is unpaired: a two-sided Mann-Whitney U test at alpha %.2f (its measured false-positive rate under\n"+
			"the null, 1,000 simulated pairs of 9 rounds a side: %.1f%%). \"~\": not significant. Absolute tok/s are\n"+
			"shown with both runs' clocks, as information. Exit 0: no regression; 1: a metric significantly slower\n"+
			"beyond --threshold; 2: could not compare.", stats.CompareAlpha, stats.CompareNullRate*100),
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			regressed, err := runs.Compare(args[0], args[1], threshold, os.Stdout)
			if err != nil {
				return err
			}
			if regressed {
				return exit(1)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&threshold, "threshold", "2%", "smallest change that counts, a percentage (2%)")
	return cmd
}

func newLeversCmd() *cobra.Command {
	var minfer string
	cmd := &cobra.Command{
		Use:   "levers",
		Short: "list the levers with their arms, the path they switch, their workload, class and liveness",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runs.Levers(cmd.Context(), minfer, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&minfer, "minfer", "", "minfer binary (default: next to abtest, else in PATH)")
	return cmd
}

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/harness/runs"
)

func newCompareCmd() *cobra.Command {
	var threshold string
	cmd := &cobra.Command{
		Use:   "compare OLD.json NEW.json",
		Short: "compare two stored lever results (markdown on stdout); exit 1 on a significant regression beyond the threshold",
		Args:  cobra.ExactArgs(2),
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

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/report"
)

func newCompareCmd() *cobra.Command {
	var threshold string
	cmd := &cobra.Command{
		Use:   "compare BASE.json HEAD.json",
		Short: "PR-ready markdown diff of two results; exit 1 on a significant regression beyond the threshold",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			th, err := report.ParseThreshold(threshold)
			if err != nil {
				return exitError{2, err}
			}
			base, err := report.ReadJSON(args[0])
			if err != nil {
				return exitError{2, err}
			}
			head, err := report.ReadJSON(args[1])
			if err != nil {
				return exitError{2, err}
			}
			reg, err := report.CompareMarkdown(os.Stdout, base, head, filepath.Base(args[0]), filepath.Base(args[1]), th)
			if err != nil {
				return exitError{2, err}
			}
			if reg {
				return exitError{1, nil}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&threshold, "threshold", "2%", "smallest change that counts (e.g. 2% or 0.02)")
	return cmd
}

func newLeversCmd() *cobra.Command {
	var minfer string
	cmd := &cobra.Command{
		Use:   "levers",
		Short: "the levers with their arms, the path they switch, and the gates that apply",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := newSetup(cmd.Context(), &runFlags{minfer: minfer, device: "auto"})
			if err != nil {
				return err
			}
			var rows [][]string
			for _, l := range s.levers {
				arms, gs := "-", "- (not A/B-able: instrumentation or test seam)"
				if l.Reserved != "" {
					gs = "none: reserved, " + l.Reserved
				} else if l.ABAble() {
					arms = fmt.Sprintf("A=%s B=%s", l.ArmA, l.ArmB)
					gs = "all five; liveness: "
					if l.Liveness != nil {
						gs += "on at " + l.Liveness.On + " (" + livenessBackends(l) + ")"
					} else {
						gs += "none declared, so every gate is INCONCLUSIVE"
					}
					if b := l.BarsOrDefault(); b != harness.DefaultBars {
						gs += fmt.Sprintf("; bars pp %g tg %g claim %g, at most %d rounds", b.PP, b.TG, b.Claim, b.MaxRounds)
					}
				}
				tol := l.Tolerance
				if tol == "" {
					tol = "bitwise"
				}
				wl := l.Workload
				if wl == "" {
					wl = "-"
				}
				rows = append(rows, []string{l.Name, l.Kind, l.Default, arms, l.Backend, l.Path, wl, tol, gs})
			}
			fmt.Print(report.Table([]string{"lever", "kind", "default", "arms", "backend", "path", "workload its path needs", "A-vs-B class", "gates"}, rows))
			return nil
		},
	}
	cmd.Flags().StringVar(&minfer, "minfer", "", "minfer binary")
	return cmd
}

// livenessBackends names the backends the lever's rule covers.
func livenessBackends(l harness.Lever) string {
	var bs []string
	if l.Liveness.CUDA != nil {
		bs = append(bs, "cuda")
	}
	if l.Liveness.CPU != nil {
		bs = append(bs, "cpu")
	}
	return strings.Join(bs, ", ")
}

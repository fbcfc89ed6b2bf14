package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/runs"
	"github.com/minfer-go/minfer/harness/stats"
)

func newHistoryCmd() *cobra.Command {
	var o runs.HistoryOptions
	cmd := &cobra.Command{
		Use:   "history DIR [--out DIR/history] [--html OUT]",
		Short: "each lever's B/A ratio across the stored nightlies of DIR, with change points; exit 1 on an open alert",
		Long: fmt.Sprintf("Reads every nightly summary in DIR (nightly-*.json; an unreadable one is named, never skipped silently) and\n"+
			"writes, per lever, its B/A ratio per night (the median of the night's per-round ratios) and arm B's tok/s as a\n"+
			"PNG and a markdown table (history.md, history.json under --out). A series is one lever, arm B, machine and\n"+
			"workload (model sha256 and pp): a changed workload starts a new one. Change points: E-divisive means over\n"+
			"the nights (every round counts), a permutation test with a fixed seed at p <= %g, a floor per series (its\n"+
			"calibration's per-round sd under --calibration, else %.1f%%), a verdict only with %d nights on each side;\n"+
			"newer changes are pending. An alert stays open until its ID is a line of the acknowledgements file\n"+
			"(--ack, default DIR/%s; \"ID # note\") or its series ends. --html OUT: a static dashboard (index.html, a\n"+
			"page per lever, copies of the reports it links; relative links, no external assets). Exit 0: written, no\n"+
			"open alert; 1: an open alert; 2: could not run.",
			stats.ChangeAlpha, stats.ChangeDefaultFloor*100, stats.ChangeMinNights, runs.HistoryAckFile),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Dir = args[0]
			h, md, err := runs.History(o)
			if err != nil {
				return err
			}
			for _, u := range h.Unreadable {
				fmt.Fprintf(os.Stderr, "abtest: history: unreadable, not in the history: %s\n", u)
			}
			open := h.OpenAlerts()
			fmt.Fprintf(os.Stderr, "abtest: history: %d nights, %d levers: %d open alerts, %d pending: %s\n", len(h.Nights), len(h.Levers), len(open), len(h.Changes(gates.ChangePending)), md)
			if len(open) > 0 {
				return exit(1)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "folder of history.md, history.json and the plots (default DIR/history)")
	cmd.Flags().StringVar(&o.HTML, "html", "", "also write the static dashboard into this folder")
	cmd.Flags().StringVar(&o.Calibration, "calibration", "", "folder holding calibration/<machine>/*.json (default DIR's parent)")
	cmd.Flags().StringVar(&o.Ack, "ack", "", "acknowledged alerts, one ID a line (default DIR/"+runs.HistoryAckFile+", if present)")
	return cmd
}

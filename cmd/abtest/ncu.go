package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/gates"
	"github.com/minfer-go/minfer/harness/profile"
)

func newNCUCmd() *cobra.Command {
	var out string
	var floor float64
	cmd := &cobra.Command{
		Use:   "ncu [--out file.md] [--floor-gbs 4300] CSV...",
		Short: "per-kernel evidence tables from per-launch `ncu --csv` files (scripts/device-ncu.sh): what bounds each kernel",
		Long: "For each CSV (per-launch `ncu --csv` output, e.g. $OUT/ncu-SHAPE-TYPE-PHASE.csv of scripts/device-ncu.sh)\n" +
			"write a markdown table of its kernels sorted by total duration: launches, share of the window, mean duration,\n" +
			"DRAM bytes per launch, achieved GB/s and its share of --floor-gbs, SM / issue-slot / tensor-pipe / DRAM %,\n" +
			"registers, achieved occupancy, shared-memory bank conflicts, dynamic shared memory, grid x block, and the\n" +
			"bound each kernel's numbers point to by the rule printed at the top. A metric the CSV lacks shows \"-\".\n" +
			"Files that cannot be read are named on stderr (the others are still written).\n" +
			"Exit 0: every file summarized; 2: a file could not be read or summarized.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runNCU(args, out, floor, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "markdown file to write (default: stdout)")
	cmd.Flags().Float64Var(&floor, "floor-gbs", gates.CopyCeilingGBs, "bandwidth the achieved GB/s is compared with (the H200's measured HBM copy ceiling)")
	return cmd
}

// runNCU summarizes every file it can; a file it cannot read is an exit-2
// error naming it, after the others are written.
func runNCU(files []string, out string, floor float64, stdout io.Writer) error {
	if !(floor > 0) {
		return cannotRun("ncu: --floor-gbs %v: want a positive bandwidth", floor)
	}
	var md bytes.Buffer
	if err := profile.WriteNCUHeader(&md, floor); err != nil {
		return cannotRun("ncu: %v", err)
	}
	var bad []string
	done := 0
	for _, f := range files {
		if err := ncuFile(&md, f, floor); err != nil {
			bad = append(bad, err.Error())
			fmt.Fprintf(&md, "\n## %s\n\nNot summarized: %v\n", profile.NCUTitle(f), err)
			continue
		}
		done++
	}
	if done > 0 {
		if out == "" {
			if _, err := stdout.Write(md.Bytes()); err != nil {
				return cannotRun("ncu: write: %v", err)
			}
		} else if err := os.WriteFile(out, md.Bytes(), 0o644); err != nil {
			return cannotRun("ncu: %v", err)
		}
	}
	if len(bad) > 0 {
		return cannotRun("ncu: %d of %d files not summarized: %s", len(bad), len(files), strings.Join(bad, "; "))
	}
	return nil
}

func ncuFile(w io.Writer, path string, floor float64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err // names the path
	}
	ms, err := profile.ParseNCUCSV(string(b))
	if err != nil {
		return fmt.Errorf("%s: not per-launch `ncu --csv` output: %w", path, err)
	}
	win, err := profile.SummarizeNCU(ms, floor)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return profile.WriteNCUTable(w, profile.NCUTitle(path), win)
}

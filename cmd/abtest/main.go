// Command abtest is the gate runner: it runs the same minfer binary under two
// settings of one lever and decides with the five gates of GATES.md whether
// the lever is correct and whether it is faster, writing a markdown report.
// Each command parses its flags and calls package runs (harness/runs).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/harness/runs"
	"github.com/minfer-go/minfer/version"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "abtest",
		Short:         "gate runner: is a minfer lever correct, is it faster, and how do we know",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return runs.CannotRun("%v", err) })
	root.Version = version.String("abtest")
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print the version, commit and Go version")
	root.AddCommand(newRunCmd(), newCalibrateCmd(), newPRCmd(), newCompareCmd(), newLeversCmd(), newNightlyCmd(), newMergeCmd(), newBisectCmd(), newPerfCmd(), newNCUCmd(), newSASSDiffCmd())
	root.AddCommand(newHistoryCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && err.Error() != "" {
		fmt.Fprintln(os.Stderr, "abtest:", err)
	}
	return runs.ExitCode(err)
}

// exit is a verdict's exit code as an error (nil for 0).
func exit(code int) error {
	if code == 0 {
		return nil
	}
	return &runs.Error{Code: code}
}

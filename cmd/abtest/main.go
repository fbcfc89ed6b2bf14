// Command abtest is the gate runner: it runs the same minfer binary under two
// settings of one lever and decides with the five gates of GATES.md whether
// the lever is correct and whether it is faster, writing a markdown report.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries an exit code: 1 a gate failed, 2 could not run.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func cannotRun(format string, a ...any) error {
	return exitError{2, fmt.Errorf(format, a...)}
}

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
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{2, err} })
	root.AddCommand(newRunCmd(), newCalibrateCmd(), newCompareCmd(), newLeversCmd(), newNightlyCmd(), newPerfCmd(), newNCUCmd(), newSASSDiffCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "abtest:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "abtest:", err)
	return 2
}

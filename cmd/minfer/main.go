// Command minfer is the GGUF inference engine's CLI: generate, logits, bench,
// tokenize, info, quantize, synth and levers.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/levers"
)

// usageError marks errors caused by how minfer was called (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// app carries what every sub-command needs: the lever config parsed once.
type app struct {
	cfg levers.Config
	dev deviceState // CUDA backends opened (device.go)
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "minfer",
		Short:         "GGUF inference engine for Qwen2/Qwen3 models (CPU reference, CUDA backend)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newLeversCmd(a),
		newTokenizeCmd(a),
		newInfoCmd(a),
		newSynthCmd(a),
		newQuantizeCmd(a),
		newGenerateCmd(a),
		newLogitsCmd(a),
		newBenchCmd(a),
	)
	return root
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	cfg, err := levers.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "minfer:", err)
		return 2
	}
	a := &app{cfg: cfg}
	root := newRoot(a)
	root.SetArgs(args)
	err = root.Execute()
	a.deviceReport(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "minfer:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

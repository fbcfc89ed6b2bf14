// Command minfer is the GGUF inference engine's CLI: generate, logits, bench,
// tokenize, info, quantize, synth and levers.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/cuda"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/schema"
	"github.com/minfer-go/minfer/version"
)

// usageError marks errors caused by how minfer was called (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// app carries what every sub-command needs: the lever config parsed once.
type app struct {
	cfg  levers.Config
	dev  deviceState // backends opened (device.go)
	prof *os.File    // the MINFER_CPU_PROFILE file while profiling

	// wrap, when set, wraps every engine a command opens (tests: an engine
	// whose runs differ, for the --repeat checks).
	wrap func(lm) lm
}

// startProfile starts the CPU profile MINFER_CPU_PROFILE names (nothing
// when unset), after cobra parsed the flags, so the profile holds the
// command's run. A file that cannot be created is an error.
func (a *app) startProfile() error {
	if a.cfg.CPUProfile == "" || a.prof != nil {
		return nil
	}
	f, err := os.Create(a.cfg.CPUProfile)
	if err != nil {
		return fmt.Errorf("MINFER_CPU_PROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return errors.Join(fmt.Errorf("MINFER_CPU_PROFILE: %w", err), f.Close())
	}
	a.prof = f
	return nil
}

// stopProfile stops the CPU profile, writing it out, and closes its file
// (nothing when none runs). run calls it on every exit, errors included.
func (a *app) stopProfile() error {
	if a.prof == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := a.prof.Close()
	a.prof = nil
	if err != nil {
		return fmt.Errorf("MINFER_CPU_PROFILE: %w", err)
	}
	return nil
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "minfer",
		Short:         "GGUF inference engine for Qwen2/Qwen3 models (CPU reference, CUDA backend)",
		Version:       version.String("minfer"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version without cobra's -v shorthand (quantize's -v is --verbose),
	// printing version.String's line as it is.
	root.Flags().Bool("version", false, "print the version (module version, commit, Go version) and exit")
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return a.startProfile() }
	root.AddCommand(
		newLeversCmd(a),
		newTokenizeCmd(a),
		newInfoCmd(a),
		newSynthCmd(a),
		newQuantizeCmd(a),
		newGenerateCmd(a),
		newChatCmd(a),
		newLogitsCmd(a),
		newBenchCmd(a),
	)
	// cobra's own commands in the same style: completion kept but out of
	// the list, help's Short lowercase like every other.
	root.CompletionOptions.HiddenDefaultCmd = true
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Short = "print the help of any command"
		}
	}
	markArgsUsage(root)
	return root
}

// markArgsUsage makes every positional-argument refusal a usage error (exit
// 2): cobra's own validators (NoArgs, ExactArgs, ...) return plain errors.
func markArgsUsage(c *cobra.Command) {
	if v := c.Args; v != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := v(cmd, args)
			var u usageError
			if err != nil && !errors.As(err, &u) {
				return usageError{err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		markArgsUsage(sub)
	}
}

// isUsage reports whether err comes from how minfer was called. cobra's
// "unknown command" for the root is an untyped error, so it is matched by
// its text (setting root.Args instead would make the root runnable-less
// path print help and exit 0).
func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command ")
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
	if perr := a.stopProfile(); perr != nil && err == nil {
		err = perr
	}
	a.deviceReport(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "minfer:", err)
	}
	return exitCode(err)
}

// exitCode is minfer's exit status for the error a command returned: 2 for
// how minfer was called, schema.ExitOutOfMemory for a model that does not
// fit the machine (a refusal before allocating, or an allocation that
// failed later: no defect of the path that ran), schema.ExitStaleKernels
// for a kernels file of other sources, 1 for anything else.
func exitCode(err error) int {
	switch {
	case err == nil:
		return schema.ExitOK
	case isUsage(err):
		return schema.ExitUsage
	case errors.Is(err, graph.ErrOutOfMemory):
		return schema.ExitOutOfMemory
	case errors.Is(err, cuda.ErrStaleKernels):
		return schema.ExitStaleKernels
	}
	return schema.ExitError
}

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/quantize"
)

func newQuantizeCmd(_ *app) *cobra.Command {
	var (
		pure    bool
		untie   bool
		workers int
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "quantize [flags] IN.gguf OUT.gguf TYPE",
		Short: "quantize a whole GGUF model with the reference tool's per-tensor type choices",
		Long: "Quantize a GGUF model. TYPE is a file type of the reference quantize tool: F32, F16, BF16,\n" +
			"Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K, Q4_K_S, Q4_K_M (alias Q4_K), Q5_K_S, Q5_K_M (alias Q5_K).",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 3 {
				return usagef("quantize: want IN.gguf OUT.gguf TYPE, got %d arguments", len(args))
			}
			if _, err := quantize.ParseFType(args[2]); err != nil {
				return usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			in, out, ftype := args[0], args[1], args[2]
			opts := quantize.Options{Pure: pure, Untie: untie, Workers: workers}
			stderr := cmd.ErrOrStderr()
			if verbose {
				opts.Progress = func(i, n int, name string, from, to quant.Type) {
					fmt.Fprintf(stderr, "[%4d/%4d] %-32s %-5s -> %s\n", i+1, n, name, from, to)
				}
			}
			if err := quantize.File(in, out, ftype, opts); err != nil {
				return err
			}
			var before, after int64
			if st, err := os.Stat(in); err == nil {
				before = st.Size()
			}
			if st, err := os.Stat(out); err == nil {
				after = st.Size()
			}
			fmt.Fprintf(stderr, "minfer: quantized %s (%.2f MiB) to %s (%.2f MiB) as %s\n",
				in, float64(before)/(1<<20), out, float64(after)/(1<<20), ftype)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&pure, "pure", false, "give every matrix the base type (no per-tensor rules)")
	fl.BoolVar(&untie, "untie", false, "write a tied model's token embedding again as an output matrix of its own (same type, same logits), for paths that run only on untied models")
	fl.IntVar(&workers, "threads", 0, "rows quantized in parallel (0: all cores)")
	fl.BoolVarP(&verbose, "verbose", "v", false, "print one line per tensor")
	return cmd
}

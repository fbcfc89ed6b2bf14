package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/synth"
)

func newSynthCmd(_ *app) *cobra.Command {
	var (
		shape, typ, out, vocabFrom string
		seed                       uint64
		workers                    int
		list                       bool
	)
	cmd := &cobra.Command{
		Use:   "synth [flags] -o OUT.gguf",
		Short: "write a deterministic synthetic Qwen2/Qwen3 model at a real shape",
		Long: "Write a deterministic synthetic model: real tensor names, shapes and metadata, weights drawn\n" +
			"from the seed. --type takes a weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, ...: every\n" +
			"matrix gets it, 1-D tensors stay F32) or a mix of the reference quantize tool (Q4_K_M, Q5_K_M), or MIX: every weight type, cycled by block (kernel coverage).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "SHAPE\tARCH\tPARAMS\tEMBD\tLAYERS\tHEADS\tKV\tHEAD_DIM\tFFN\tVOCAB\tTIED")
				for _, s := range synth.Shapes() {
					hp := s.HParams()
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\n", s.Name, s.Arch, s.SizeLabel(),
						hp.NEmbd, hp.NLayer, hp.NHead, hp.NHeadKV, hp.HeadDim, hp.NFF, hp.NVocab, hp.TiedOutput)
				}
				return tw.Flush()
			}
			if out == "" {
				return usagef("synth: -o OUT.gguf is required")
			}
			if workers < 0 {
				return usagef("synth: --threads %d: want 0 (all cores) or a positive count", workers)
			}
			if _, err := synth.ShapeByName(shape); err != nil {
				return usageError{err}
			}
			t, mix, err := synth.ParseType(typ)
			if err != nil {
				return usageError{err}
			}
			opts := synth.Options{Shape: shape, Type: t, Mix: mix, Seed: seed, VocabFrom: vocabFrom, Workers: workers}
			if err := synth.Write(out, opts); err != nil {
				return err
			}
			if st, err := os.Stat(out); err == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "minfer: wrote %s (%s, %s, seed %d, %d bytes)\n", out, shape, typ, seed, st.Size())
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&shape, "shape", synth.DefaultShape, "model shape (see --list)")
	fl.StringVar(&typ, "type", "F16", "weight type or mix (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M, MIX)")
	fl.Uint64Var(&seed, "seed", synth.DefaultSeed, "weight generator seed")
	fl.StringVarP(&out, "output", "o", "", "the GGUF file to write (required unless --list)")
	fl.StringVar(&vocabFrom, "vocab-from", "", "copy the tokenizer from this GGUF (padded to the shape's vocabulary)")
	fl.IntVar(&workers, "threads", 0, "rows generated in parallel (0: all cores)")
	fl.BoolVar(&list, "list", false, "list the shapes and exit")
	return cmd
}

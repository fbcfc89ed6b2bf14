package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/model"
	"github.com/minfer-go/minfer/engine/quant"
	"github.com/minfer-go/minfer/engine/quantize"
	"github.com/minfer-go/minfer/engine/tokenizer"
	"github.com/minfer-go/minfer/schema"
)

func newInfoCmd(a *app) *cobra.Command {
	var (
		model  string
		asJSON bool
		device string
		nCtx   int
	)
	cmd := &cobra.Command{
		Use:   "info [flags]",
		Short: "print a model's architecture, hyper-parameters, tensor types and tokenizer",
		Long: "Print a model's architecture, hyper-parameters, tensor types and tokenizer.\n" +
			"Without -m, the embedded default model is used. The model as a positional\n" +
			"argument (info MODEL.gguf) is a deprecated spelling of -m MODEL.gguf.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if cmd.Flags().Changed("model") {
					return usagef("info: give the model once, as -m MODEL.gguf")
				}
				// The positional form of before -m: still read, said once.
				fmt.Fprintln(cmd.ErrOrStderr(), "minfer: info MODEL.gguf is deprecated: use info -m MODEL.gguf")
				model = args[0]
			}
			path, err := resolveModel(model)
			if err != nil {
				return err
			}
			info, err := readInfo(path)
			if err != nil {
				return err
			}
			var plan func()
			if device != "" { // the memory plan, without running (issue 19)
				f, err := gguf.Open(path)
				if err != nil {
					return err
				}
				defer f.Close()
				p, free, note, err := a.infoPlan(f, device, nCtx)
				if err != nil {
					return fmt.Errorf("%s: memory plan: %w", path, err)
				}
				info.MemoryPlan = planDoc(p, free)
				plan = func() { printPlan(cmd.OutOrStdout(), p, free, note) }
			} else if cmd.Flags().Changed("ctx") {
				return usagef("info: -c plans memory: give --device cpu or --device cuda too")
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), info, true)
			}
			printInfo(cmd.OutOrStdout(), info)
			if plan != nil {
				plan()
			}
			return nil
		},
	}
	addModelFlag(cmd, &model)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schema.Info document instead of text")
	cmd.Flags().StringVar(&device, "device", "", "also print the memory plan on this backend (cpu or cuda), checked against its free memory")
	cmd.Flags().IntVarP(&nCtx, "ctx", "c", 0, "context length of the memory plan (0: the engine's default)")
	return cmd
}

// hparamsDoc is the document's copy of the engine's hyper-parameters
// (TestHParamsDoc_HasEveryFieldOfTheEngines holds the field sets equal).
func hparamsDoc(hp model.HParams) schema.HParams {
	return schema.HParams{Arch: string(hp.Arch), Name: hp.Name, NVocab: hp.NVocab, NCtxTrain: hp.NCtxTrain, NEmbd: hp.NEmbd,
		NLayer: hp.NLayer, NHead: hp.NHead, NHeadKV: hp.NHeadKV, HeadDim: hp.HeadDim, NFF: hp.NFF, RopeTheta: hp.RopeTheta,
		RmsEps: hp.RmsEps, RopeNeox: hp.RopeNeox, QKNorm: hp.QKNorm, QKVBias: hp.QKVBias, TiedOutput: hp.TiedOutput}
}

func readInfo(path string) (*schema.Info, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	info := &schema.Info{
		Path: path, GGUFVersion: f.Version, FileSize: f.Size(), Architecture: string(hp.Arch),
		HParams: hparamsDoc(hp), Tensors: len(f.Tensors), TypeHistogram: map[string]int{},
	}
	if id, err := f.Uint("general.file_type"); err == nil {
		info.FileType = quantize.FTypeName(uint32(id))
		if info.FileType == "" {
			info.FileType = fmt.Sprintf("ftype %d", id)
		}
	}
	for _, ti := range f.Tensors {
		info.TypeHistogram[ti.Type.String()]++
		info.Params += ti.NElements
	}
	dr, err := model.DecodeReadOf(f, hp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	info.DecodeRead = schema.DecodeRead{WeightBytes: int64(dr.WeightBytes), Method: dr.Method, KVElemsPerPos: int64(dr.KVElemsPerPos)}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", path, err)
	}
	info.Tokenizer = schema.Tokenizer{Model: tok.Model(), Pre: tok.Pre(), NVocab: tok.NVocab(), BOS: tok.BOS(), EOS: tok.EOS()}
	for id := 0; id < tok.NVocab(); id++ {
		if typ := tok.Type(int32(id)); typ == 3 || typ == 4 { // CONTROL, USER_DEFINED
			info.Tokenizer.NSpecial++
		}
	}
	return info, nil
}

func printInfo(w io.Writer, in *schema.Info) {
	hp := in.HParams
	fmt.Fprintf(w, "model          %s\n", in.Path)
	fmt.Fprintf(w, "gguf version   %d\n", in.GGUFVersion)
	fmt.Fprintf(w, "file size      %d bytes (%.2f MiB)\n", in.FileSize, float64(in.FileSize)/(1<<20))
	fmt.Fprintf(w, "architecture   %s\n", in.Architecture)
	fmt.Fprintf(w, "name           %s\n", hp.Name)
	if in.FileType != "" {
		fmt.Fprintf(w, "file type      %s\n", in.FileType)
	}
	fmt.Fprintf(w, "n_vocab        %d\n", hp.NVocab)
	fmt.Fprintf(w, "n_ctx_train    %d\n", hp.NCtxTrain)
	fmt.Fprintf(w, "n_embd         %d\n", hp.NEmbd)
	fmt.Fprintf(w, "n_layer        %d\n", hp.NLayer)
	fmt.Fprintf(w, "n_head         %d\n", hp.NHead)
	fmt.Fprintf(w, "n_head_kv      %d\n", hp.NHeadKV)
	fmt.Fprintf(w, "head_dim       %d\n", hp.HeadDim)
	fmt.Fprintf(w, "n_ff           %d\n", hp.NFF)
	fmt.Fprintf(w, "rope theta     %g (neox %v)\n", hp.RopeTheta, hp.RopeNeox)
	fmt.Fprintf(w, "rms eps        %g\n", hp.RmsEps)
	fmt.Fprintf(w, "qk norm        %v\n", hp.QKNorm)
	fmt.Fprintf(w, "qkv bias       %v\n", hp.QKVBias)
	fmt.Fprintf(w, "tied output    %v\n", hp.TiedOutput)
	fmt.Fprintf(w, "params         %d\n", in.Params)
	fmt.Fprintf(w, "tensors        %d:", in.Tensors)
	types := slices.Sorted(maps.Keys(in.TypeHistogram))
	slices.SortFunc(types, func(a, b string) int {
		ta, _ := quant.ParseType(a)
		tb, _ := quant.ParseType(b)
		return int(ta) - int(tb)
	})
	for _, t := range types {
		fmt.Fprintf(w, " %s x%d", t, in.TypeHistogram[t])
	}
	fmt.Fprintln(w)
	tk := in.Tokenizer
	fmt.Fprintf(w, "tokenizer      %s / %s, %d tokens, bos %d, eos %d, %d special\n", tk.Model, tk.Pre, tk.NVocab, tk.BOS, tk.EOS, tk.NSpecial)
}

package main

import (
	"encoding/json"
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
)

// modelInfo is what `minfer info --json` prints.
type modelInfo struct {
	Path         string         `json:"path"`
	GGUFVersion  uint32         `json:"gguf_version"`
	FileSize     int64          `json:"file_size"`
	Architecture string         `json:"architecture"`
	FileType     string         `json:"file_type,omitempty"`
	HParams      model.HParams  `json:"hparams"`
	Params       uint64         `json:"params"`
	Tensors      int            `json:"tensors"`
	TypeCounts   map[string]int `json:"type_histogram"`
	Tokenizer    tokenizerInfo  `json:"tokenizer"`
	// DecodeRead is what one decode step reads (abtest perf's GB/s).
	DecodeRead model.DecodeRead `json:"decode_read"`
}

type tokenizerInfo struct {
	Model    string `json:"model"`
	Pre      string `json:"pre"`
	NVocab   int    `json:"n_vocab"`
	BOS      int32  `json:"bos"`
	EOS      int32  `json:"eos"`
	NSpecial int    `json:"n_special"`
}

func newInfoCmd(_ *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info [MODEL.gguf] [--json]",
		Short: "Print a model's architecture, hyper-parameters, tensor types and tokenizer",
		Long:  "Print a model's architecture, hyper-parameters, tensor types and tokenizer.\nWithout MODEL, the embedded default model is used.",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := modelArg(args)
			if err != nil {
				return err
			}
			info, err := readInfo(path)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			printInfo(cmd.OutOrStdout(), info)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func readInfo(path string) (*modelInfo, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hp, err := model.ReadHParams(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	info := &modelInfo{
		Path: path, GGUFVersion: f.Version, FileSize: f.Size(), Architecture: string(hp.Arch),
		HParams: hp, Tensors: len(f.Tensors), TypeCounts: map[string]int{},
	}
	if id, err := f.Uint("general.file_type"); err == nil {
		info.FileType = quantize.FTypeName(uint32(id))
		if info.FileType == "" {
			info.FileType = fmt.Sprintf("ftype %d", id)
		}
	}
	for _, ti := range f.Tensors {
		info.TypeCounts[ti.Type.String()]++
		info.Params += ti.NElements
	}
	if info.DecodeRead, err = model.DecodeReadOf(f, hp); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", path, err)
	}
	info.Tokenizer = tokenizerInfo{Model: tok.Model(), Pre: tok.Pre(), NVocab: tok.NVocab(), BOS: tok.BOS(), EOS: tok.EOS()}
	for id := 0; id < tok.NVocab(); id++ {
		if typ := tok.Type(int32(id)); typ == 3 || typ == 4 { // CONTROL, USER_DEFINED
			info.Tokenizer.NSpecial++
		}
	}
	return info, nil
}

func printInfo(w io.Writer, in *modelInfo) {
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
	types := slices.Sorted(maps.Keys(in.TypeCounts))
	slices.SortFunc(types, func(a, b string) int {
		ta, _ := quant.ParseType(a)
		tb, _ := quant.ParseType(b)
		return int(ta) - int(tb)
	})
	for _, t := range types {
		fmt.Fprintf(w, " %s x%d", t, in.TypeCounts[t])
	}
	fmt.Fprintln(w)
	tk := in.Tokenizer
	fmt.Fprintf(w, "tokenizer      %s / %s, %d tokens, bos %d, eos %d, %d special\n", tk.Model, tk.Pre, tk.NVocab, tk.BOS, tk.EOS, tk.NSpecial)
}

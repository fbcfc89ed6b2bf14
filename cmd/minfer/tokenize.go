package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/tokenizer"
	"github.com/minfer-go/minfer/schema"
)

func newTokenizeCmd(_ *app) *cobra.Command {
	var (
		modelPath string
		asJSON    bool
		noSpecial bool
	)
	cmd := &cobra.Command{
		Use:   "tokenize [flags] TEXT",
		Short: "print the token ids (and pieces) of TEXT; TEXT '-' reads stdin",
		Long: `Encode TEXT with the model's tokenizer, without BOS/EOS (without -m, the
embedded default model's). Special tokens written in TEXT (e.g. <|im_start|>)
become their ids unless --no-special is given. Text output is one token a
line: the id and the raw bytes it stands for, Go-quoted. --json prints
{"ids":[...],"pieces":[...]}, where pieces are the vocabulary strings
(byte-level alphabet, e.g. "Ġworld").`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("tokenize: want exactly one TEXT argument, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			text := args[0]
			if text == "-" {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("tokenize: reading stdin: %w", err)
				}
				text = string(b)
			}
			path, err := resolveModel(modelPath)
			if err != nil {
				return err
			}
			tok, err := loadTokenizer(path)
			if err != nil {
				return err
			}
			ids := tok.Encode(text, !noSpecial)
			return printTokens(cmd.OutOrStdout(), tok, ids, asJSON)
		},
	}
	addModelFlag(cmd, &modelPath)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the schema.Tokens document {"ids":[...],"pieces":[...]}`)
	cmd.Flags().BoolVar(&noSpecial, "no-special", false, "treat special-token text as plain text")
	return cmd
}

// loadTokenizer reads the tokenizer of a GGUF file.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", path, err)
	}
	return tok, nil
}

func printTokens(w io.Writer, tok *tokenizer.Tokenizer, ids []int32, asJSON bool) error {
	if asJSON {
		out := schema.Tokens{IDs: ids, Pieces: make([]string, len(ids))}
		if out.IDs == nil {
			out.IDs = []int32{}
		}
		for i, id := range ids {
			out.Pieces[i] = tok.Token(id)
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	}
	bw := bufio.NewWriter(w)
	for _, id := range ids {
		fmt.Fprintf(bw, "%d\t%q\n", id, tok.TokenBytes(id))
	}
	return bw.Flush()
}

package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/minfer-go/minfer/engine/sample"
	"github.com/minfer-go/minfer/engine/spec"
	"github.com/minfer-go/minfer/schema"
)

type logitsFlags struct {
	modelFlags
	prompt string
	ids    string
	top    int
	out    string
	json   bool
	repeat int
	draft  draftFlags
}

func newLogitsCmd(a *app) *cobra.Command {
	var f logitsFlags
	cmd := &cobra.Command{
		Use:   "logits [flags] (--prompt TEXT | --ids 1,2,3)",
		Short: "evaluate a prompt from an empty context and print per-position top logits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.logits(cmd, &f)
		},
	}
	fl := cmd.Flags()
	f.register(cmd, 4096)
	fl.StringVarP(&f.prompt, "prompt", "p", "", "prompt text (encoded without special tokens)")
	fl.StringVar(&f.ids, "ids", "", "comma-separated token ids")
	fl.IntVar(&f.top, "top", 5, "top-K ids per position")
	fl.StringVarP(&f.out, "output", "o", "", "write every position's full logits as little-endian f32 rows (n_vocab each) to this file")
	// --out: the rows file's name before -o/--output meant a file on every
	// command; kept working, out of the help.
	fl.StringVar(&f.out, "out", "", "deprecated spelling of --output")
	if err := fl.MarkHidden("out"); err != nil {
		panic(err) // the flag is registered on the line above
	}
	fl.BoolVar(&f.json, "json", false, "print the schema.Logits document instead of text")
	fl.IntVar(&f.repeat, "repeat", 1, "evaluate the ids this many times from an empty context and print the last run; any run whose logits differ bitwise from the first is an error (CUDA graphs are captured at a shape's 3rd execution and replayed from the 4th: --repeat 4 checks a replay)")
	// --draft: every row comes from a speculative verify forward
	// (spec.Decoder.Score), the logits gate 1 compares for MINFER_DRAFT.
	f.draft.register(cmd, a.cfg)
	return cmd
}

// parseIDs parses "1,2,3" (spaces allowed).
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		v, err := strconv.ParseInt(part, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--ids: %q is not a token id", part)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

// topK returns the k largest logits, ties to the lower id.
func topK(logits []float32, k int) []schema.TopLogit {
	k = min(k, len(logits))
	out := make([]schema.TopLogit, 0, k+1)
	for i, l := range logits {
		if l != l { // NaN never ranks
			continue
		}
		if len(out) == k && (k == 0 || l <= out[k-1].Logit) {
			continue
		}
		j, _ := slices.BinarySearchFunc(out, l, func(x schema.TopLogit, t float32) int {
			if x.Logit >= t {
				return -1 // equal logits keep the earlier (lower) id first
			}
			return 1
		})
		out = slices.Insert(out, j, schema.TopLogit{ID: int32(i), Logit: l})
		if len(out) > k {
			out = out[:k]
		}
	}
	return out
}

func (a *app) logits(cmd *cobra.Command, f *logitsFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	if cmd.Flags().Changed("out") {
		if cmd.Flags().Changed("output") {
			return usagef("give the rows file once, as -o/--output (--out is its deprecated spelling)")
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "minfer: logits --out is deprecated: use -o/--output")
	}
	if (f.prompt == "") == (f.ids == "") {
		return usagef("give exactly one of --prompt and --ids")
	}
	if f.top < 0 {
		return usagef("--top %d: want a non-negative count", f.top)
	}
	if f.repeat < 1 {
		return usagef("--repeat %d: want at least one run", f.repeat)
	}
	if err := f.draft.check(cmd); err != nil {
		return err
	}
	var ids []int32
	if f.ids != "" {
		var err error
		if ids, err = parseIDs(f.ids); err != nil {
			return usageError{err}
		}
	}
	path, err := f.path()
	if err != nil {
		return err
	}
	e, err := a.open(path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer e.Close()
	nVocab := e.HParams().NVocab
	if ids == nil {
		ids = encodePrompt(e.Tokenizer(), f.prompt, false)
		if len(ids) == 0 {
			return usagef("the prompt encodes to no tokens")
		}
	}
	for _, id := range ids {
		if int(id) >= nVocab {
			return fmt.Errorf("token id %d is outside the vocabulary of %d", id, nVocab)
		}
	}
	if len(ids) > f.ctx {
		return fmt.Errorf("%d tokens do not fit the context of %d (--ctx)", len(ids), f.ctx)
	}
	dec, closeDraft, err := a.openDraft(&f.draft, e, path, f.device, f.ctx)
	if err != nil {
		return err
	}
	defer closeDraft()
	var first, all []float32
	for r := 1; r <= f.repeat; r++ {
		e.Reset()
		var err error
		if dec != nil {
			all, err = scoreRows(dec, ids, nVocab)
		} else {
			all, err = e.Forward(ids, true)
		}
		if err != nil {
			return fmt.Errorf("forward (run %d of %d): %w", r, f.repeat, err)
		}
		if len(all) != len(ids)*nVocab {
			return fmt.Errorf("forward returned %d logits for %d positions of %d", len(all), len(ids), nVocab)
		}
		if first == nil {
			first = all
		} else if i := firstBitwiseDiff(first, all); i >= 0 {
			return fmt.Errorf("--repeat: run %d's logits differ from run 1's at position %d, id %d: %v, run 1 %v (bitwise; the same ids from an empty context must give the same logits)",
				r, i/nVocab, i%nVocab, all[i], first[i])
		}
	}
	if f.out != "" {
		if err := writeF32(f.out, all); err != nil {
			return err
		}
	}
	res := schema.Logits{NVocab: nVocab, Positions: make([]schema.LogitsPos, len(ids))}
	for p := range ids {
		row := all[p*nVocab : (p+1)*nVocab]
		_, _, margin := sample.Top2Margin(row)
		res.Positions[p] = schema.LogitsPos{Pos: p, Top: topK(row, f.top), Top2Margin: margin}
	}
	out := cmd.OutOrStdout()
	if f.json {
		for i := range res.Positions {
			if m := res.Positions[i].Top2Margin; math.IsInf(float64(m), 0) || m != m {
				res.Positions[i].Top2Margin = 0 // JSON has no Inf/NaN
			}
		}
		return writeJSON(out, res, false)
	}
	tok := e.Tokenizer()
	w := bufio.NewWriter(out)
	for i, p := range res.Positions {
		fmt.Fprintf(w, "pos %d token %d %q  margin %.4f\n", p.Pos, ids[i], tok.Token(ids[i]), p.Top2Margin)
		for _, t := range p.Top {
			fmt.Fprintf(w, "    %8d %12.5f  %q\n", t.ID, t.Logit, tok.Token(t.ID))
		}
	}
	return w.Flush()
}

// scoreRows is every position's logits of ids through dec's verify
// forwards (teacher-forced: the drafts that match ids are kept), token-major
// as Forward(ids, true) returns them.
func scoreRows(dec *spec.Decoder, ids []int32, nVocab int) ([]float32, error) {
	all := make([]float32, 0, len(ids)*nVocab)
	err := dec.Score(ids, func(_ int, row []float32) error {
		if len(row) != nVocab {
			return fmt.Errorf("verify forward row of %d logits, want %d", len(row), nVocab)
		}
		all = append(all, row...)
		return nil
	})
	return all, err
}

// firstBitwiseDiff is the first index at which a and b differ bit for bit
// (NaNs compare by their bits too), or -1.
func firstBitwiseDiff(a, b []float32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// writeF32 writes v as little-endian f32 to path.
func writeF32(path string, v []float32) error {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return fmt.Errorf("logits -o: %w", err)
	}
	return nil
}

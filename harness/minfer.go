package harness

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/schema"
)

// The documents minfer prints are declared once, in the schema package;
// the harness names them as it always has.
type (
	// BenchResult is the JSON of `minfer bench --format json`.
	BenchResult = schema.Bench
	// BenchWarmup is the untimed warmup minfer bench did in-process.
	BenchWarmup = schema.BenchWarmup
	// BenchTest is one timed test (pp512, tg128); Value and DeviceValue
	// are its round's tok/s.
	BenchTest = schema.BenchTest
	// TopLogit is one ranked logit.
	TopLogit = schema.TopLogit
	// LogitsPos is one position of `minfer logits --json`.
	LogitsPos = schema.LogitsPos
	// GenerateResult is the JSON of `minfer generate --json`.
	GenerateResult = schema.Generate
	// ModelInfo is the JSON of `minfer info --json`.
	ModelInfo = schema.Info
)

// ParseBench decodes and checks a bench result.
func ParseBench(data []byte) (BenchResult, error) {
	var b BenchResult
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("bench json: %w", err)
	}
	if len(b.Tests) == 0 {
		return b, fmt.Errorf("bench json: no tests")
	}
	for _, t := range b.Tests {
		if v := t.Value(); !(v > 0) || math.IsInf(v, 0) {
			return b, fmt.Errorf("bench json: test %s has tok/s %v", t.Name, v)
		}
	}
	return b, nil
}

// LogitsResult is the JSON of `minfer logits --json`; Rows holds the full
// logits read back from its -o file (len(Positions) rows of NVocab) when
// asked.
type LogitsResult struct {
	schema.Logits
	Rows []float32 `json:"-"`
}

// Row returns position p's full logits.
func (l LogitsResult) Row(p int) []float32 { return l.Rows[p*l.NVocab : (p+1)*l.NVocab] }

// ParseLogits decodes a logits result.
func ParseLogits(data []byte) (LogitsResult, error) {
	var l LogitsResult
	if err := json.Unmarshal(data, &l); err != nil {
		return l, fmt.Errorf("logits json: %w", err)
	}
	if l.NVocab <= 0 || len(l.Positions) == 0 {
		return l, fmt.Errorf("logits json: n_vocab %d, %d positions", l.NVocab, len(l.Positions))
	}
	return l, nil
}

// ReadF32 reads little-endian f32 values.
func ReadF32(path string) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of f32", path, len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// ParseGenerate decodes a generate result.
func ParseGenerate(data []byte) (GenerateResult, error) {
	var g GenerateResult
	if err := json.Unmarshal(data, &g); err != nil {
		return g, fmt.Errorf("generate json: %w", err)
	}
	return g, nil
}

// Minfer drives one minfer binary through its CLI.
type Minfer struct {
	R *Runner
	// Bin, when set, is the binary this client runs instead of R's (abtest
	// pr gives each arm its build); R still keeps the accounts.
	Bin    string
	Model  string // "" = the embedded default
	Device string // cpu, cuda, auto
	Ctx    int    // --ctx of generate (0: minfer's default)
	// Repeat > 1 runs logits and generate that many times from an empty
	// context (`--repeat N`; minfer fails unless every run is bitwise the
	// first): CUDA graphs are captured at a shape's 3rd execution and
	// replayed from the 4th, so 4 makes the result a replayed graph's.
	Repeat int
	// LegacyBench: the binary predates `bench --format` (issue 14) and
	// takes the format as -o (a bisect runs old builds).
	LegacyBench bool
	// BenchArgs are appended to every bench command line (an arm's own
	// flags: gates.Arm.BenchArgs).
	BenchArgs []string
}

func (m Minfer) modelArgs(device string) []string {
	var a []string
	if m.Model != "" {
		a = append(a, "--model", m.Model)
	}
	if device == "" {
		device = m.Device
	}
	if device != "" {
		a = append(a, "--device", device)
	}
	return a
}

// Levers reads the binary's lever registry.
func (m Minfer) Levers(ctx context.Context) ([]Lever, error) {
	e, err := m.run(ctx, "levers", nil, "levers", "--json")
	if err != nil {
		return nil, err
	}
	return ParseLevers(e.Stdout)
}

// ModelPath asks minfer which file it loads without --model (`minfer info
// --json`: "path"), so the embedded default gets a real path, size and hash.
func (m Minfer) ModelPath(ctx context.Context) (string, error) {
	if m.Model != "" {
		return m.Model, nil
	}
	e, err := m.run(ctx, "info", nil, "info", "--json")
	if err != nil {
		return "", err
	}
	var info ModelInfo
	if err := json.Unmarshal(e.Stdout, &info); err != nil {
		return "", fmt.Errorf("info json: %w", err)
	}
	if info.Path == "" {
		return "", fmt.Errorf("info json: no \"path\"")
	}
	return info.Path, nil
}

// Info runs `minfer info [-m MODEL] --json`.
func (m Minfer) Info(ctx context.Context) (ModelInfo, *Exec, error) {
	args := []string{"info"}
	if m.Model != "" {
		args = append(args, "-m", m.Model)
	}
	args = append(args, "--json")
	e, err := m.run(ctx, "info", nil, args...)
	if err != nil {
		return ModelInfo{}, e, err
	}
	var info ModelInfo
	if err := json.Unmarshal(e.Stdout, &info); err != nil {
		return info, e, fmt.Errorf("info json: %w", err)
	}
	if info.TypeHistogram == nil {
		return info, e, fmt.Errorf("info json: no \"type_histogram\"")
	}
	return info, e, nil
}

// Bench runs one bench process.
func (m Minfer) Bench(ctx context.Context, label string, env map[string]string, pp, tg, reps int) (BenchResult, *Exec, error) {
	args := append([]string{"bench"}, m.modelArgs("")...)
	format := "--format"
	if m.LegacyBench {
		format = "-o"
	}
	args = append(args, "-p", strconv.Itoa(pp), "-n", strconv.Itoa(tg), "-r", strconv.Itoa(reps), format, "json")
	args = append(args, m.BenchArgs...)
	e, err := m.run(ctx, label, env, args...)
	if err != nil {
		return BenchResult{}, e, err
	}
	b, err := ParseBench(e.Stdout)
	return b, e, err
}

// Logits evaluates ids from an empty context on device ("" = m.Device); with
// rowsFile set the full logits are read back into Rows.
func (m Minfer) Logits(ctx context.Context, label, device string, env map[string]string, ids []int32, top int, rowsFile string) (LogitsResult, *Exec, error) {
	args := append([]string{"logits"}, m.modelArgs(device)...)
	args = append(args, "--ids", JoinIDs(ids), "--top", strconv.Itoa(top), "--json")
	if m.Repeat > 1 && device != "cpu" {
		args = append(args, "--repeat", strconv.Itoa(m.Repeat))
	}
	if rowsFile != "" {
		args = append(args, "-o", rowsFile)
	}
	e, err := m.run(ctx, label, env, args...)
	if err != nil {
		return LogitsResult{}, e, err
	}
	l, err := ParseLogits(e.Stdout)
	if err != nil {
		return l, e, err
	}
	if len(l.Positions) != len(ids) {
		return l, e, fmt.Errorf("%s: %d positions for %d ids", label, len(l.Positions), len(ids))
	}
	if rowsFile != "" {
		rows, err := ReadF32(rowsFile)
		if err != nil {
			return l, e, err
		}
		_ = os.Remove(rowsFile) // a temp file already read; a leftover is harmless
		if len(rows) != len(ids)*l.NVocab {
			return l, e, fmt.Errorf("%s: the -o rows file holds %d values, want %d x %d", label, len(rows), len(ids), l.NVocab)
		}
		l.Rows = rows
	}
	return l, e, nil
}

// Generate runs greedy generation of n tokens with the repeat penalty off,
// from the prompt's text or, when it has them, its token ids.
func (m Minfer) Generate(ctx context.Context, label string, env map[string]string, prompt Prompt, n int) (GenerateResult, *Exec, error) {
	args := append([]string{"generate"}, m.modelArgs("")...)
	if m.Ctx > 0 {
		args = append(args, "--ctx", strconv.Itoa(m.Ctx))
	}
	if m.Repeat > 1 {
		args = append(args, "--repeat", strconv.Itoa(m.Repeat))
	}
	args = append(args, "--greedy", "-n", strconv.Itoa(n), "--repeat-penalty", "1.0", "--json")
	if len(prompt.IDs) > 0 {
		args = append(args, "--ids", JoinIDs(prompt.IDs))
	} else {
		args = append(args, prompt.Text)
	}
	e, err := m.run(ctx, label, env, args...)
	if err != nil {
		return GenerateResult{}, e, err
	}
	g, err := ParseGenerate(e.Stdout)
	return g, e, err
}

// JoinIDs renders ids as "1,2,3".
func JoinIDs(ids []int32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(id)))
	}
	return b.String()
}

// DeterministicIDs returns n token ids in [lo, vocab) from a fixed LCG, the
// same for every run, so parity positions are reproducible.
func DeterministicIDs(n, vocab int, seed uint64) []int32 {
	lo := 0
	if vocab > 16 {
		lo = 4 // stay clear of the lowest (often special) ids
	}
	span := uint64(max(vocab-lo, 1))
	x := seed*6364136223846793005 + 1442695040888963407
	ids := make([]int32, n)
	for i := range ids {
		x = x*6364136223846793005 + 1442695040888963407
		ids[i] = int32(lo + int((x>>33)%span))
	}
	return ids
}

// run executes minfer (m.Bin, else R's binary) with args and env.
func (m Minfer) run(ctx context.Context, label string, env map[string]string, args ...string) (*Exec, error) {
	return m.R.RunCall(ctx, Call{Label: label, Env: env, Args: args, Bin: m.Bin})
}

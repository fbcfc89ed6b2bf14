package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/memplan"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	"github.com/minfer-go/minfer/engine/tokenizer"
)

// Options configure Load.
type Options struct {
	// Device is "cpu", "cuda" or "auto" ("" = auto). "cuda" needs
	// NewDevice and fails when it fails; "auto" uses NewDevice when it
	// answers and runs on the CPU otherwise (said once through Logf).
	Device string
	// NewDevice creates the device backend (the binary wires the CUDA
	// backend in here; the engine never imports it). nil: CPU only.
	NewDevice func(lv levers.Config, logf func(string, ...any)) (graph.Backend, error)
	// NCtx is the context length (KV cells); 0 = min(NCtxTrain, 4096).
	NCtx int
	// Threads for the CPU kernels; 0 = runtime.GOMAXPROCS.
	Threads int
	// Levers are the parsed MINFER_* gates (fusions, KV format, test seams).
	Levers levers.Config
	// Logf receives placement and setup messages; nil discards them.
	Logf func(format string, args ...any)
}

// maxCachedPlans bounds how many compiled graphs (one per distinct nt and
// logits mode) an engine keeps; the decode graph (nt = 1) is never evicted.
const maxCachedPlans = 4

// Engine runs one model: its weights, tokenizer, KV cache and compiled graphs.
// An Engine is not safe for concurrent use.
type Engine struct {
	f        *gguf.File
	h        HParams
	tok      *tokenizer.Tokenizer
	opts     Options
	nCtx     int
	kvFormat kv.Format
	backends []graph.Backend
	build    func(graph.Params) (*graph.Graph, error)
	// mem is the memory plan checked at load (memory.go), memFree the
	// free memory it was checked against; nil for a backend that plans
	// nothing.
	mem     *memplan.Plan
	memFree uint64

	plans map[graph.Params]*graph.Plan
	order []graph.Params // least recently used first
	pos   int
	// tokens are the ids whose cells the KV cache holds (len == pos): the
	// context a saved session carries (session.go).
	tokens []int32
	// sha is the model file's sha256 once a session needed it.
	sha *[32]byte

	ids, positions []int32
	window         [2]int32

	dumps int // forwards dumped so far (MINFER_GRAPH_DUMP)

	// sleep is how the slow_* test seams wait on the CPU (time.Sleep;
	// tests record what the seam computed instead of sleeping).
	sleep func(time.Duration)
	// slowOwed is the device time the slow_* seam still owes: F x the
	// mutated forwards' device time less what its delays measured.
	slowOwed time.Duration
}

// DeviceClock is the optional interface of a device backend that times its
// own work (the CUDA backend times every split with events). The engine
// reaches the device through it for the slow_* test seams only, and never
// imports the backend.
type DeviceClock interface {
	// DeviceTime is the device time of the work executed so far.
	DeviceTime() time.Duration
	// Delay keeps the device busy for d after the work queued so far,
	// counts it in DeviceTime and returns once it has run.
	Delay(d time.Duration) error
}

// StepPinner is the optional interface of a device backend whose calls run
// on one thread of its own (the CUDA backend's device thread: every call
// from another goroutine is a handoff there and back). Pin runs fn on that
// thread, where the backend's calls are direct. With MINFER_PIN_STEP=1 a
// forward's input writes, graph run and logits read go through one Pin:
// one handoff a step instead of one per call.
type StepPinner interface {
	Pin(fn func() error) error
}

// Load opens a GGUF model and prepares it for Forward.
func Load(path string, opts Options) (*Engine, error) {
	switch opts.Device {
	case "", "auto", "cpu":
	case "cuda":
		if opts.NewDevice == nil {
			return nil, errors.New("model: --device cuda: no CUDA backend in this build")
		}
	default:
		return nil, fmt.Errorf("model: unknown device %q (cpu, cuda, auto)", opts.Device)
	}
	if opts.NCtx < 0 || opts.Threads < 0 {
		return nil, fmt.Errorf("model: negative n_ctx %d or threads %d", opts.NCtx, opts.Threads)
	}
	if opts.Levers.GraphDump && opts.Levers.DumpDir == "" {
		return nil, errors.New("model: MINFER_GRAPH_DUMP=1 needs MINFER_DUMP_DIR (the folder for the node outputs)")
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: load %s: %w", path, err)
	}
	e, err := newEngine(f, opts)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("model: load %s: %w", path, err)
	}
	return e, nil
}

func newEngine(f *gguf.File, opts Options) (*Engine, error) {
	h, err := ReadHParams(f)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	e := &Engine{f: f, h: h, tok: tok, opts: opts, plans: map[graph.Params]*graph.Plan{}, sleep: time.Sleep}
	a, err := arch.Lookup(string(h.Arch))
	if err != nil {
		return nil, err
	}
	e.build = a.Build
	e.nCtx = opts.NCtx
	if e.nCtx == 0 {
		e.nCtx = DefaultNCtx(h)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if w := memplan.BeyondTraining(modelName(h), e.nCtx, h.NCtxTrain); w != "" {
		logf("model: %s", w)
	}
	var dev graph.Backend
	if opts.Device == "cuda" || ((opts.Device == "" || opts.Device == "auto") && opts.NewDevice != nil) {
		d, err := opts.NewDevice(opts.Levers, logf)
		switch {
		case err == nil:
			dev = d
		case opts.Device == "cuda":
			return nil, fmt.Errorf("--device cuda: %w", err)
		case errors.Is(err, graph.ErrNoDevice):
			logf("model: no CUDA device (%v); running on the CPU", err)
		default:
			return nil, fmt.Errorf("the CUDA device is there but could not be used (--device cpu runs without it): %w", err)
		}
	}
	closeAll := func(bs ...graph.Backend) {
		for _, b := range bs {
			if b != nil {
				b.Close()
			}
		}
	}
	if e.kvFormat, err = KVFormatFor(h, dev != nil, opts.Levers.CacheType); err != nil {
		closeAll(dev)
		return nil, err
	}
	c := cpu.New(cpu.Options{Threads: opts.Threads, Census: opts.Levers.LaunchCensus, Exact: opts.Levers.CPUExact})
	e.backends = []graph.Backend{c}
	if dev != nil {
		e.backends = []graph.Backend{dev, c}
	}
	// The plan is checked before the first allocation (the weights).
	if err := e.checkMemory(logf); err != nil {
		closeAll(e.backends...)
		return nil, err
	}
	ws, err := GraphWeights(f, h)
	if err != nil {
		closeAll(e.backends...)
		return nil, err
	}
	place := e.backends
	if opts.Device == "cuda" {
		// No CPU fallback was asked for: the device's refusal is the
		// error, naming the weight and why.
		place = e.backends[:1]
	}
	at, err := PlaceWeights(ws, place, logf)
	if err != nil {
		closeAll(e.backends...)
		if opts.Device == "cuda" && errors.Is(err, graph.ErrUnsupportedWeight) {
			return nil, fmt.Errorf("--device cuda: %w", err)
		}
		return nil, e.outOfMemory(err)
	}
	if dev != nil && at != 0 {
		// All-or-nothing: the device refused a weight, so the whole model
		// runs on the CPU (PlaceWeights logged which weight and why).
		dev.Close()
		e.backends = []graph.Backend{c}
		if err := e.checkMemory(logf); err != nil { // planned again for the CPU
			closeAll(e.backends...)
			return nil, err
		}
	}
	if err := e.backends[0].AllocKV(graph.KVSpec{Format: e.kvFormat, NLayer: h.NLayer, NCtx: e.nCtx, RowLen: h.NKV()}); err != nil {
		closeAll(e.backends...)
		return nil, e.outOfMemory(err)
	}
	return e, nil
}

// deviceF16KVDims: with MINFER_CACHE_TYPE=auto a device engine stores its
// KV cache in f16 when n_layer * n_kv_embd reaches this (the 7B class).
const deviceF16KVDims = 8192

// Backends returns the engine's backends in priority order (the device
// first when there is one), for tests and instrumentation.
func (e *Engine) Backends() []graph.Backend { return e.backends }

// GraphParams is the topology key of a forward of nt tokens.
func GraphParams(h HParams, nt, nCtx int, allLogits bool, f kv.Format, lv levers.Config) graph.Params {
	p := h.modelParams()
	p.NCtx, p.NT, p.AllLogits, p.KVFormat = nCtx, nt, allLogits && nt > 1, f
	p.FuseQKV, p.FuseFFN = !lv.NoFuseQKV, !lv.NoFuseFFN
	p.FuseQKNorm = lv.FuseQKNorm && lv.RequiresMet("MINFER_FUSE_QKNORM")
	p.FuseResidual = lv.FuseResidual
	p.FuseNormQ8 = lv.FuseNormQ8
	p.FuseAttnQ8 = lv.FuseAttnQ8
	p.FuseQKVRope = lv.FuseQKVRope
	return p
}

// HParams returns the model's hyper-parameters.
func (e *Engine) HParams() HParams { return e.h }

// Tokenizer returns the model's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Pos is the number of tokens in the KV cache (the next token's position).
func (e *Engine) Pos() int { return e.pos }

// NCtx is the context length.
func (e *Engine) NCtx() int { return e.nCtx }

// Reset empties the KV cache.
func (e *Engine) Reset() { e.pos, e.tokens = 0, e.tokens[:0] }

// Truncate cuts the context back to its first n tokens: the next token
// goes to position n. The cells from n on are left as they are; attention
// reads positions below the current one only, and the next forward
// overwrites them, just as after Reset.
func (e *Engine) Truncate(n int) error {
	if n < 0 || n > e.pos {
		return fmt.Errorf("truncate to %d tokens: the context holds %d", n, e.pos)
	}
	e.pos, e.tokens = n, e.tokens[:n]
	return nil
}

// Backend names the backend the model runs on.
func (e *Engine) Backend() string { return e.backends[0].Name() }

// KVFormat names the KV storage format.
func (e *Engine) KVFormat() string { return e.kvFormat.String() }

// Plan returns the compiled graph for a forward of nt tokens (built on first
// use and cached), for inspection and tests.
func (e *Engine) Plan(nt int, allLogits bool) (*graph.Plan, error) {
	if e.plans == nil {
		return nil, errors.New("model: engine is closed")
	}
	p := GraphParams(e.h, nt, e.nCtx, allLogits, e.kvFormat, e.opts.Levers)
	if pl := e.plans[p]; pl != nil {
		e.touch(p)
		return pl, nil
	}
	g, err := buildGraph(e.build, p, e.opts.Levers)
	if err != nil {
		return nil, err
	}
	pl, err := graph.Compile(g, e.backends)
	if err != nil {
		return nil, err
	}
	e.plans[p] = pl
	e.order = append(e.order, p)
	for len(e.order) > maxCachedPlans {
		evict := -1
		for i, q := range e.order {
			if q.NT != 1 {
				evict = i
				break
			}
		}
		if evict < 0 {
			break
		}
		q := e.order[evict]
		e.order = append(e.order[:evict], e.order[evict+1:]...)
		if err := e.plans[q].Close(); err != nil {
			return nil, err
		}
		delete(e.plans, q)
	}
	return pl, nil
}

func (e *Engine) touch(p graph.Params) {
	for i, q := range e.order {
		if q == p {
			copy(e.order[i:], e.order[i+1:])
			e.order[len(e.order)-1] = p
			return
		}
	}
}

// Forward appends tokens at the current position and returns the logits of
// the last token ([NVocab]) or, with allLogits, of every token
// ([len(tokens)*NVocab], token-major). The returned slice is the caller's.
// A sequence that would exceed NCtx, an empty one or an id outside the
// vocabulary is an error and changes nothing.
func (e *Engine) Forward(tokens []int32, allLogits bool) ([]float32, error) {
	return e.ForwardInto(nil, tokens, allLogits)
}

// ForwardInto is Forward writing the logits into dst when its capacity
// holds them (the result is then dst[:n], not the caller's to keep past the
// next call), else into a new slice: a loop that is done with each step's
// logits before the next (bench's timed forwards) allocates none, where
// Forward allocates and clears NVocab floats a token (600 KB for Qwen's
// vocabulary: alloc, clear and GC, ~100 us a step on a 2-core host).
func (e *Engine) ForwardInto(dst []float32, tokens []int32, allLogits bool) ([]float32, error) {
	nt := len(tokens)
	frac := e.slowFraction(nt)
	var wall0 time.Time
	var dev0 time.Duration
	clock, _ := e.backends[0].(DeviceClock)
	if frac > 0 { // measured only under the seam: a plain forward reads no clock
		wall0 = time.Now()
		if clock != nil {
			dev0 = clock.DeviceTime()
		}
	}
	if nt == 0 {
		return nil, errors.New("model: forward of no tokens")
	}
	if e.pos+nt > e.nCtx {
		return nil, fmt.Errorf("model: %d tokens at position %d exceed the context of %d", nt, e.pos, e.nCtx)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= e.h.NVocab {
			return nil, fmt.Errorf("model: token %d at %d outside the vocabulary of %d", t, i, e.h.NVocab)
		}
	}
	var out []float32
	var err error
	if p, ok := e.backends[0].(StepPinner); ok && e.opts.Levers.PinStep {
		out, err = e.pinnedStep(p, dst, tokens, allLogits)
	} else {
		out, err = e.step(dst, tokens, allLogits)
	}
	if err != nil {
		return nil, err
	}
	e.pos += nt
	e.tokens = append(e.tokens, tokens...)
	if e.opts.Levers.GraphDump {
		e.dumps++
	}
	if frac > 0 {
		if err := e.slowDown(frac, wall0, dev0, clock); err != nil {
			return nil, fmt.Errorf("model: test seam %s: %w", e.opts.Levers.TestMutate, err)
		}
	}
	e.mutate(out)
	return out, nil
}

// pinnedStep runs step inside p.Pin (its own function, so the closure's
// captures never move the unpinned path's locals to the heap).
func (e *Engine) pinnedStep(p StepPinner, dst []float32, tokens []int32, allLogits bool) ([]float32, error) {
	var out []float32
	err := p.Pin(func() error {
		var err error
		out, err = e.step(dst, tokens, allLogits)
		return err
	})
	return out, err
}

// step writes a checked forward's inputs, runs its graph and reads its
// logits: the backend calls of one forward (StepPinner runs them on the
// device's thread).
func (e *Engine) step(dst []float32, tokens []int32, allLogits bool) ([]float32, error) {
	nt := len(tokens)
	pl, err := e.Plan(nt, allLogits)
	if err != nil {
		return nil, e.outOfMemory(fmt.Errorf("model: build graph for %d tokens: %w", nt, err))
	}
	if cap(e.positions) < nt {
		e.positions = make([]int32, nt)
	}
	positions := e.positions[:nt]
	for i := range positions {
		positions[i] = int32(e.pos + i)
	}
	e.window = [2]int32{int32(e.pos), int32(e.pos + nt)}
	g := pl.G
	if err := pl.WriteI32(g.Tokens, tokens); err != nil {
		return nil, err
	}
	if err := pl.WriteI32(g.Positions, positions); err != nil {
		return nil, err
	}
	if err := pl.WriteI32(g.KVWindow, e.window[:]); err != nil {
		return nil, err
	}
	// The same kv_len on the host, for a backend that routes by it (the
	// CUDA decode attention's tensor cores from MINFER_ATTN_DECODE_TC_FROM).
	pl.SetKVLength(int(e.window[1]))
	run := pl.Run
	if e.opts.Levers.GraphDump {
		run = func() error { return pl.RunInstrumented(e.dumpNode) }
	}
	if err := run(); err != nil {
		return nil, e.outOfMemory(fmt.Errorf("model: forward at position %d: %w", e.pos, err))
	}
	rows := 1
	if allLogits {
		rows = nt
	}
	out := dst
	if n := rows * e.h.NVocab; cap(out) >= n {
		out = out[:n]
	} else {
		out = make([]float32, n)
	}
	if err := pl.Read(g.Output, out); err != nil {
		return nil, fmt.Errorf("model: read logits: %w", err)
	}
	return out, nil
}

// slowFraction is the slowdown the slow_* seams ask of a forward of nt
// tokens: slow_decode=F for nt == 1, slow_prefill=F for nt > 1, else 0.
func (e *Engine) slowFraction(nt int) float64 {
	lv := e.opts.Levers
	switch {
	case lv.Mutated(levers.MutateSlowDecode) && nt == 1, lv.Mutated(levers.MutateSlowPrefill) && nt > 1:
		return lv.TestMutateFrac
	}
	return 0
}

// slowDown makes the forward that began at wall0 (device clock at dev0)
// frac times slower. On a device that times its work it occupies the device
// for frac x the forward's device time (a spin kernel on CUDA), so device
// time and wall time both grow; on the CPU it sleeps frac x the forward's
// own wall time.
//
// The delay itself costs a little more device time than asked (the spin's
// launch and its events: ~15 us on the H200, which made slow_decode=0.03 a
// 4.6% slowdown of qwen2-0.5b decode there), so the engine keeps the
// running balance of what the seam owes (F x the forwards' device time)
// against what its delays measured, and asks each delay for the balance:
// over a run the slowdown is F, not F plus the overhead.
func (e *Engine) slowDown(frac float64, wall0 time.Time, dev0 time.Duration, clock DeviceClock) error {
	if clock != nil {
		t1 := clock.DeviceTime()
		e.slowOwed += time.Duration(frac * float64(t1-dev0))
		if e.slowOwed <= 0 {
			return nil
		}
		err := clock.Delay(e.slowOwed)
		e.slowOwed -= clock.DeviceTime() - t1
		return err
	}
	e.sleep(time.Duration(frac * float64(time.Since(wall0))))
	return nil
}

// buildGraph builds the graph of p with build and plants the graph's test
// seam (skip_bias) when lv asks for it.
func buildGraph(build func(graph.Params) (*graph.Graph, error), p graph.Params, lv levers.Config) (*graph.Graph, error) {
	g, err := build(p)
	if err != nil || !lv.Mutated(levers.MutateSkipBias) {
		return g, err
	}
	skipQBias(g)
	return g, nil
}

// skipQBias applies skip_bias: every q projection loses its bias add, as if
// the model had none; the parity gate must catch it. The architectures
// know nothing of it. The graph gets another UID, so a device never
// replays a capture of the unmutated topology for it.
func skipQBias(g *graph.Graph) {
	for _, n := range g.Nodes {
		if n.Op == graph.OpMatMul && qwen2.AttnQBias.Is(n.Bias) {
			n.Bias = ""
		}
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d %s", g.UID, levers.MutateSkipBias)
	g.UID = h.Sum64()
}

// mutate applies perturb_logit (levers.Config.TestMutate): in every
// returned row the runner-up token's logit is set to the top logit + 1, so
// greedy decoding always picks a different token than the unmutated engine.
// (skip_bias is a graph rewrite, skipQBias; slow_decode and slow_prefill
// are in slowDown.)
func (e *Engine) mutate(out []float32) {
	if e.opts.Levers.Mutated(levers.MutatePerturbLogit) {
		n := e.h.NVocab
		for r := 0; r+n <= len(out); r += n {
			perturbRow(out[r : r+n])
		}
	}
}

func perturbRow(row []float32) {
	if len(row) < 2 {
		return
	}
	top, second := -1, -1
	for i, v := range row {
		if math.IsNaN(float64(v)) {
			continue
		}
		switch {
		case top < 0 || v > row[top]:
			top, second = i, top
		case second < 0 || v > row[second]:
			second = i
		}
	}
	if second >= 0 {
		row[second] = row[top] + 1
	}
}

// Close releases the graphs, the backend and the file.
func (e *Engine) Close() error {
	var first error
	for _, p := range e.plans {
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
	}
	e.plans = nil
	for _, b := range e.backends {
		if err := b.Close(); err != nil && first == nil {
			first = err
		}
	}
	if err := e.f.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// dumpNode writes one node output of an instrumented forward to
// MINFER_DUMP_DIR as little-endian f32 (f<forward>-n<node>-<name>.f32) and
// appends a line to index.tsv: forward, position, node, name, op, shape, file.
func (e *Engine) dumpNode(n *graph.Node, out []float32) error {
	dir := e.opts.Levers.DumpDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := fmt.Sprintf("f%04d-n%04d-%s.f32", e.dumps, n.ID, strings.ReplaceAll(n.Name, "/", "_"))
	buf := make([]byte, 4*len(out))
	for i, v := range out {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
		return err
	}
	idx, err := os.OpenFile(filepath.Join(dir, "index.tsv"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, werr := fmt.Fprintf(idx, "%d\t%d\t%d\t%s\t%s\t%s\t%s\n", e.dumps, e.pos, n.ID, n.Name, n.Op, n.Shape, name)
	if cerr := idx.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

package model

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model/arch"
)

var update = flag.Bool("update", false, "rewrite the golden graph dumps in testdata/graphs")

// The golden graphs pin what the builders hand to the backends: every node of
// the built graph and of the compiled one (assign, fuse, alloc), and the
// tensor list the weights are registered and checked by, for both
// architectures over the options a model or a lever can switch. The CUDA
// backend consumes these graphs; equal dumps mean the device sees the same
// work. Regenerate with `go test ./engine/model -run Golden -update` only
// when a change of the graphs is intended.
func TestGoldenGraphs_UnchangedForEveryArchAndOption(t *testing.T) {
	for _, arch := range []Arch{Qwen2, Qwen3} {
		var b strings.Builder
		for i, h := range goldenHParams(arch) {
			fmt.Fprintf(&b, "### %s\ntensors:\n", hparamsKey(h))
			for _, s := range h.Tensors() {
				fmt.Fprintf(&b, "  %s %v\n", s.Name, s.Dims)
			}
			for _, c := range []struct {
				nt  int
				all bool
			}{{1, false}, {5, false}, {5, true}} {
				if c.all && i > 1 {
					continue // all logits change the head only: tied and untied show it
				}
				fmt.Fprintf(&b, "## nt=%d all=%v\n", c.nt, c.all)
				b.WriteString(goldenDump(t, h, c.nt, c.all))
			}
		}
		path := filepath.Join("testdata", "graphs", string(arch)+".txt")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if got := b.String(); got != string(want) {
			t.Errorf("%s graphs differ from %s:\n%s", arch, path, firstDiff(got, string(want)))
		}
	}
}

// goldenHParams: small dims; each architecture with and without its option
// (qwen2's q/k/v biases; qwen3's q/k norms, which it cannot run without),
// tied and untied output, the option the other architecture has (no real
// file does: it pins what the builder does with it) and the interleaved
// rope style.
func goldenHParams(arch Arch) []HParams {
	base := HParams{Arch: arch, NVocab: 50, NCtxTrain: 64, NEmbd: 32, NLayer: 2, NHead: 4, NHeadKV: 2, HeadDim: 8, NFF: 48,
		RopeTheta: 1e6, RmsEps: 1e-6, RopeNeox: true}
	if arch == Qwen3 {
		base.HeadDim = 16 // key_length differs from NEmbd/NHead
	}
	with := func(edit func(h *HParams)) HParams {
		h := base
		edit(&h)
		return h
	}
	own := func(h *HParams, on bool) {
		if arch == Qwen2 {
			h.QKVBias = on
		} else {
			h.QKNorm = on
		}
	}
	return []HParams{
		with(func(h *HParams) { own(h, true); h.TiedOutput = true }),
		with(func(h *HParams) { own(h, true) }),
		with(func(h *HParams) { own(h, false); h.TiedOutput = true }),
		with(func(h *HParams) { own(h, false) }),
		with(func(h *HParams) { own(h, true); h.QKVBias, h.QKNorm = true, true }),
		with(func(h *HParams) { own(h, true); h.RopeNeox = false }),
	}
}

func hparamsKey(h HParams) string {
	return fmt.Sprintf("%s bias=%v norm=%v tied=%v neox=%v", h.Arch, h.QKVBias, h.QKNorm, h.TiedOutput, h.RopeNeox)
}

// goldenVariant is one way the engine compiles a graph: the levers it runs
// under and the fusions the backend offers.
type goldenVariant struct {
	name   string
	env    []string
	offers func(graph.FuseKind) bool
}

func goldenVariants(h HParams) []goldenVariant {
	all := func(graph.FuseKind) bool { return true }
	vs := []goldenVariant{
		{"offers=all", nil, all},
		{"offers=all NO_FUSE_QKV NO_FUSE_FFN FUSE_RESIDUAL=0", []string{"MINFER_NO_FUSE_QKV=1", "MINFER_NO_FUSE_FFN=1", "MINFER_FUSE_RESIDUAL=0"}, all},
	}
	if h.QKNorm {
		vs = append(vs, goldenVariant{"offers=all-but-qknorm", nil, func(k graph.FuseKind) bool { return k != graph.FuseQkNormRopeStore }})
	}
	if h.QKVBias {
		vs = append(vs, goldenVariant{"offers=all skip_bias", []string{"MINFER_TEST_MUTATE=skip_bias"}, all})
	}
	return vs
}

// goldenBuild builds the graph the engine builds for p under lv, before
// compiling it.
func goldenBuild(h HParams, p graph.Params, lv levers.Config) (*graph.Graph, error) {
	a, err := arch.Lookup(string(h.Arch))
	if err != nil {
		return nil, err
	}
	return buildGraph(a.Build, p, lv)
}

// offerer runs every op and offers the fusions its func allows.
type offerer struct {
	graph.Backend
	offers func(graph.FuseKind) bool
}

func (offerer) Name() string                 { return "dev" }
func (offerer) SupportsOp(*graph.Node) error { return nil }
func (o offerer) SupportsFused(k graph.FuseKind, _ ...*graph.Node) bool {
	return o.offers(k)
}

// goldenDump is, for each variant, the built graph (when it differs from
// the one before) and the compiled one (assign, fuse, alloc), node by node
// with every field; or the build error.
func goldenDump(t *testing.T, h HParams, nt int, all bool) string {
	t.Helper()
	var b strings.Builder
	prev := ""
	for _, v := range goldenVariants(h) {
		lv, err := levers.Parse(v.env)
		if err != nil {
			t.Fatal(err)
		}
		g, err := goldenBuild(h, GraphParams(h, nt, 16, all, kv.F32, lv), lv)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		if built := dumpNodes(g); built != prev {
			fmt.Fprintf(&b, "built (%s):\n%s", v.name, built)
			prev = built
		}
		be := []graph.Backend{offerer{offers: v.offers}}
		if err := graph.Assign(g, be); err != nil {
			t.Fatal(err)
		}
		n, err := graph.Fuse(g, be)
		if err != nil {
			t.Fatal(err)
		}
		l, err := graph.Alloc(g)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "compiled (%s): %d rewrites, slots %v on %v\n%s", v.name, n, l.SlotLen, l.SlotBackend, dumpNodes(g))
	}
	return b.String()
}

// dumpNodes is the graph's input and output ids and every field of every
// node (OpParams: the fields that are set). It leaves out the UID: a hash
// of the Params struct's Go syntax, a cache key that changes with the
// struct.
func dumpNodes(g *graph.Graph) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  tokens=%d positions=%d kv_window=%d output=%d\n", g.Tokens, g.Positions, g.KVWindow, g.Output)
	for _, n := range g.Nodes {
		fmt.Fprintf(&b, "  %d %s %s %v %v", n.ID, n.Name, n.Op, n.Inputs, n.Shape)
		if n.Weight != "" || n.Bias != "" {
			fmt.Fprintf(&b, " w=%s b=%s", n.Weight, n.Bias)
		}
		if n.Weights != nil || n.Biases != nil {
			fmt.Fprintf(&b, " ws=%q bs=%q", n.Weights, n.Biases)
		}
		fmt.Fprintf(&b, " {%s} be=%d slot=%d alias=%d off=%d readers=%d\n", setFields(n.P), n.Backend, n.Slot, n.Alias, n.Offset, n.Readers)
	}
	return b.String()
}

// setFields lists the non-zero fields of a struct as name:value.
func setFields(x any) string {
	v := reflect.ValueOf(x)
	var out []string
	for i := 0; i < v.NumField(); i++ {
		if !v.Field(i).IsZero() {
			out = append(out, fmt.Sprintf("%s:%v", v.Type().Field(i).Name, v.Field(i).Interface()))
		}
	}
	return strings.Join(out, " ")
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got %s\nwant %s", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}

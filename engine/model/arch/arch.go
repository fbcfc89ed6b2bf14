// Package arch is the registry of the architectures minfer runs. Each one
// registers itself in its init under its GGUF general.architecture name,
// with its graph builder and its tensor table: the one list of tensor
// names, shapes and options that the builder reads, the loader checks and
// registers, and synth writes. A new architecture is one package that
// registers itself, imported by engine/model.
package arch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/minfer-go/minfer/engine/graph"
)

// Arch is one architecture.
type Arch struct {
	Name string // general.architecture
	// Tensors in the order the graph reads them (weights are registered
	// and checked in this order): the global tensors before the first
	// per-layer one, the per-layer ones (repeated for every block), then
	// the global ones after them.
	Tensors []*Tensor
	// Needs is an option the architecture cannot run without (0: none).
	Needs Feature
	// Build returns the unfused graph of a model of this architecture.
	Build func(graph.Params) (*graph.Graph, error)
}

// Feature is an option of a model that the file tells by the presence of
// its tensors.
type Feature uint8

// The options. A tensor with If == 0 is always present.
const (
	QKVBias Feature = iota + 1 // the q, k, v projections carry biases
	QKNorm                     // per-head RMS norm of q and k
	Untied                     // an output matrix of its own (else token_embd)
)

// In reports whether the model described by p has f.
func (f Feature) In(p graph.Params) bool {
	switch f {
	case QKVBias:
		return p.QKVBias
	case QKNorm:
		return p.QKNorm
	case Untied:
		return !p.TiedOutput
	}
	return true
}

func (f Feature) String() string {
	switch f {
	case QKVBias:
		return "q/k/v biases"
	case QKNorm:
		return "q/k norms"
	case Untied:
		return "an output matrix"
	}
	return "feature " + strconv.Itoa(int(f))
}

// Role is what a tensor does (synth draws its values by role).
type Role uint8

// The roles.
const (
	Matrix     Role = iota // a projection, rows of Dims[0] values
	Norm                   // the gain of an RMS norm
	Bias                   // added to a projection's output
	Embedding              // token_embd: one row per token
	OutputNorm             // the final norm before the logits
	Output                 // the logits projection
)

// Dim is one dimension of a tensor, given the model.
type Dim func(graph.Params) int

// The dimensions tensors have.
var (
	Embd    Dim = func(p graph.Params) int { return p.NEmbd }
	Vocab   Dim = func(p graph.Params) int { return p.NVocab }
	NQ      Dim = graph.Params.NQ
	NKV     Dim = graph.Params.NKV
	FF      Dim = func(p graph.Params) int { return p.NFF }
	HeadDim Dim = func(p graph.Params) int { return p.HeadDim }
)

// Tensor declares one tensor of an architecture.
type Tensor struct {
	Name  string // GGUF name; a per-layer tensor's full name is Prefix(layer)+Name
	HF    string // the Hugging Face name it converts from (per layer: below model.layers.N.)
	Layer bool   // one per block
	Role  Role
	If    Feature // present only in models with this option (0: always)
	Dims  []Dim   // Dims[0] is the row length
}

// Prefix is the name prefix of block i's tensors and nodes.
func Prefix(i int) string { return "blk." + strconv.Itoa(i) + "." }

// At is the tensor's full name in block i (its Name for a global tensor).
func (t *Tensor) At(i int) string {
	if !t.Layer {
		return t.Name
	}
	return Prefix(i) + t.Name
}

// Is reports whether name is this tensor's full name in some block.
func (t *Tensor) Is(name string) bool {
	if !t.Layer {
		return name == t.Name
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return false
	}
	n, rest, ok := strings.Cut(rest, ".")
	if _, err := strconv.ParseUint(n, 10, 31); err != nil || !ok {
		return false
	}
	return rest == t.Name
}

// Spec is one tensor of a model: its full name and shape.
type Spec struct {
	Name   string
	Dims   []uint64
	Layer  int // the block, -1 for a global tensor
	Tensor *Tensor
}

// Specs lists every tensor a model with params p has, in the order of
// a.Tensors with the per-layer run repeated for each block.
func (a *Arch) Specs(p graph.Params) []Spec {
	var out []Spec
	add := func(t *Tensor, layer int) {
		if !t.If.In(p) {
			return
		}
		dims := make([]uint64, len(t.Dims))
		for i, d := range t.Dims {
			dims[i] = uint64(d(p))
		}
		out = append(out, Spec{Name: t.At(layer), Dims: dims, Layer: layer, Tensor: t})
	}
	for j := 0; j < len(a.Tensors); j++ {
		if !a.Tensors[j].Layer {
			add(a.Tensors[j], -1)
			continue
		}
		end := j
		for end < len(a.Tensors) && a.Tensors[end].Layer {
			end++
		}
		for i := 0; i < p.NLayer; i++ {
			for _, t := range a.Tensors[j:end] {
				add(t, i)
			}
		}
		j = end - 1
	}
	return out
}

// First is the first tensor of a that has role r, or nil.
func (a *Arch) First(r Role) *Tensor {
	for _, t := range a.Tensors {
		if t.Role == r {
			return t
		}
	}
	return nil
}

// Telltale is the first tensor present only with option f: the one a file
// is checked for to tell whether the model has f. nil when a has no such
// tensor.
func (a *Arch) Telltale(f Feature) *Tensor {
	for _, t := range a.Tensors {
		if t.If == f {
			return t
		}
	}
	return nil
}

var registry = map[string]*Arch{}

// Register adds a to the registry; architectures call it from init. A
// second architecture of the same name or one without a builder or tensors
// is a programming error and panics.
func Register(a *Arch) {
	if a.Name == "" || a.Build == nil || len(a.Tensors) == 0 {
		panic(fmt.Sprintf("arch: Register(%q): name, builder and tensors are required", a.Name))
	}
	if registry[a.Name] != nil {
		panic("arch: " + a.Name + " registered twice")
	}
	registry[a.Name] = a
}

// Lookup returns the architecture registered under name.
func Lookup(name string) (*Arch, error) {
	if a := registry[name]; a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("unsupported architecture %q (minfer runs %s)", name, strings.Join(Names(), ", "))
}

// Names lists the registered architectures, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

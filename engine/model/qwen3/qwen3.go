// Package qwen3 registers Qwen3: Qwen2's decoder with a per-head RMS norm of
// q and k before rope, without q/k/v biases, and the head dimension taken
// from the metadata (key_length).
package qwen3

import (
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/model/qwen2"
)

// Arch is qwen3: qwen2's tensors, and it cannot run without the q/k norms.
var Arch = &arch.Arch{Name: "qwen3", Tensors: qwen2.Tensors, Needs: arch.QKNorm}

func init() {
	Arch.Build = Build // set here: Build reads Arch
	arch.Register(Arch)
}

// Build returns the unfused graph of p (the fuse pass rewrites it later).
func Build(p graph.Params) (*graph.Graph, error) {
	return qwen2.Decoder(Arch, qwen2.Options{QKNorm: true}, p)
}

package model

// The architectures minfer runs: each registers itself with engine/model/arch
// in its init, so adding one is its package and a line here.
import (
	_ "github.com/minfer-go/minfer/engine/model/qwen2"
	_ "github.com/minfer-go/minfer/engine/model/qwen3"
)

// Package dynlib loads C libraries at run time through purego (no cgo:
// minfer and abtest build with CGO_ENABLED=0) and calls their functions:
// the one loader of libcuda (cuda/driver), libnvrtc (cuda/nvrtc) and NVML
// (harness/gpumem).
package dynlib

// Scope is how a library's symbols are made visible to later loads.
type Scope int

const (
	// Global exports the symbols to libraries loaded later (RTLD_GLOBAL).
	Global Scope = iota
	// Local keeps them to this handle (RTLD_LOCAL).
	Local
)

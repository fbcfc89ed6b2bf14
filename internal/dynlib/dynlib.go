// Package dynlib loads C libraries at run time through purego (no cgo:
// minfer and abtest build with CGO_ENABLED=0) and calls their functions:
// the one loader of libcuda (cuda/driver), libnvrtc (cuda/nvrtc) and NVML
// (harness/gpumem).
package dynlib

import "unsafe"

// Scope is how a library's symbols are made visible to later loads.
type Scope int

const (
	// Global exports the symbols to libraries loaded later (RTLD_GLOBAL).
	Global Scope = iota
	// Local keeps them to this handle (RTLD_LOCAL).
	Local
)

// CString reads a NUL-terminated C string of at most max bytes, one byte
// at a time so it never reads past the terminator ("" for a nil p).
func CString(p *byte, max int) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

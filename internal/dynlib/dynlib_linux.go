//go:build linux

package dynlib

import "github.com/ebitengine/purego"

// Open loads the named library (RTLD_NOW: every symbol resolved now).
func Open(name string, s Scope) (uintptr, error) {
	mode := purego.RTLD_NOW | purego.RTLD_GLOBAL
	if s == Local {
		mode = purego.RTLD_NOW | purego.RTLD_LOCAL
	}
	return purego.Dlopen(name, mode)
}

// Sym is the address of the named symbol in h, 0 when it has none.
func Sym(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0
	}
	return p
}

// Call calls the C function at fn with integer/pointer arguments and
// returns its first result register. Pointers converted to uintptr in the
// call expression stay alive and in place for the call.
//
//go:uintptrescapes
func Call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

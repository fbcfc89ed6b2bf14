//go:build linux

package gpumem

import "github.com/ebitengine/purego"

func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0
	}
	return p
}

// call calls a C function with integer/pointer arguments and returns its
// first result register. Pointers converted to uintptr in the call
// expression stay alive and in place for the call (go:uintptrescapes).
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

const nvmlSupported = true

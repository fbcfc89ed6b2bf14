//go:build !linux

package dynlib

import "errors"

// Open fails: the libraries this project loads exist on linux only.
func Open(name string, s Scope) (uintptr, error) {
	return 0, errors.New(name + " is loaded on linux only")
}

// Sym finds nothing.
func Sym(h uintptr, name string) uintptr { return 0 }

// Call is never reached: Open fails, so no function address exists.
func Call(fn uintptr, args ...uintptr) uintptr {
	panic("dynlib: a C call on a platform where no library loads")
}

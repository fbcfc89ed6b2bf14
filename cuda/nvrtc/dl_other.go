//go:build !linux

package nvrtc

import "errors"

func dlopen(name string) (uintptr, error) {
	return 0, errors.New("libnvrtc is loaded on linux only")
}

func dlsym(h uintptr, name string) uintptr { return 0 }

// rawCall is never reached: dlopen fails, so no Lib exists.
func rawCall(fn uintptr, args ...uintptr) uintptr { return 0 }

func loadedPath(prefix string) string { return "" }

//go:build !linux

package gpumem

import "errors"

func dlopen(name string) (uintptr, error) {
	return 0, errors.New("NVML is loaded on linux only")
}

func dlsym(h uintptr, name string) uintptr { return 0 }

func call(fn uintptr, args ...uintptr) uintptr {
	panic("gpumem: NVML call on a platform without NVML")
}

const nvmlSupported = false

//go:build !linux

package driver

import "errors"

func dlopen(name string) (uintptr, error) {
	return 0, errors.New("the CUDA driver is loaded on linux only")
}

func dlsym(h uintptr, name string) uintptr { return 0 }

func rawCall(fn uintptr, args ...uintptr) uintptr {
	panic("cuda: driver call on a platform without a driver")
}

//go:build !linux

package gpumem

const nvmlSupported = false

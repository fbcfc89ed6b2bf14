//go:build linux

package gpumem

const nvmlSupported = true

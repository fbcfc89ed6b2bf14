//go:build !linux

package nvrtc

func loadedPath(prefix string) string { return "" }

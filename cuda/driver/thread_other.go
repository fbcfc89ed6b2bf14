//go:build !linux

package driver

// threadID has no meaning where no driver loads; Open never succeeds there.
func threadID() int { return -1 }

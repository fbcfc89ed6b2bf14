//go:build linux

package driver

import "syscall"

// threadID is the calling OS thread's id.
func threadID() int { return syscall.Gettid() }

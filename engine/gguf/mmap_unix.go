//go:build unix

package gguf

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps size bytes of fd read-only and shared.
func mapFile(fd *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if int64(int(size)) != size || size < 0 {
		return nil, nil, fmt.Errorf("file size %d does not fit in memory", size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return unix.Munmap(data) }, nil
}

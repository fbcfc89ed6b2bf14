//go:build !unix

package gguf

import (
	"io"
	"os"
)

// mapFile reads the whole file where mmap is not available.
func mapFile(fd *os.File, size int64) ([]byte, func() error, error) {
	data, err := io.ReadAll(fd)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}

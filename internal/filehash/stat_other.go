//go:build !linux

package filehash

import (
	"fmt"
	"os"
)

// stat checks the file; no change time here, so nothing is remembered.
func stat(path string) (identity, bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return identity{}, false, err
	}
	if !fi.Mode().IsRegular() {
		return identity{}, false, fmt.Errorf("%s is not a regular file", path)
	}
	return identity{}, false, nil
}

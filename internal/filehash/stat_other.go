//go:build !linux

package filehash

// stat checks the file; no change time here, so nothing is remembered.
func stat(path string) (identity, bool, error) {
	_, err := regular(path)
	return identity{}, false, err
}

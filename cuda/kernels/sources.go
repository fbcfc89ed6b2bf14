// Package kernels holds the CUDA kernel sources (the .cu and .cuh files
// beside this one), embedded in every binary that links the backend, and
// their hash: the name a kernels file must carry to be loaded by this
// binary (issue 25). scripts/build-kernels.sh computes the same hash
// (`--source-hash`) and writes it into the file it builds.
package kernels

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
)

//go:embed *.cu *.cuh
var sources embed.FS

// Sources are the embedded kernel sources, by file name.
func Sources() fs.FS { return sources }

// Hash is the sources' hash: sha256 over every .cu and .cuh file in byte
// order of their names, each as "NAME\nSIZE\n" followed by its bytes.
// Names and sizes are in the stream so that moving bytes from one file to
// the next changes the hash.
func Hash(fsys fs.FS) (string, error) {
	names, err := fs.Glob(fsys, "*.cu")
	if err != nil {
		return "", err
	}
	hs, err := fs.Glob(fsys, "*.cuh")
	if err != nil {
		return "", err
	}
	names = append(names, hs...)
	if len(names) == 0 {
		return "", fmt.Errorf("kernels: no .cu or .cuh sources")
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", fmt.Errorf("kernels: %w", err)
		}
		h.Write([]byte(n + "\n" + strconv.Itoa(len(b)) + "\n"))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SourceHash is Hash of the embedded sources.
func SourceHash() string {
	s, err := Hash(sources)
	if err != nil {
		// The embed pattern above fails the build when it matches nothing.
		panic(err)
	}
	return s
}

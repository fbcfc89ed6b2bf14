package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/minfer-go/minfer/engine/synth"
)

// defaultModelPath returns the embedded default model (synth's qwen2-tiny,
// F16, seed 1), writing it once into os.UserCacheDir()/minfer, or into
// os.TempDir()/minfer when the cache dir is unavailable.
func defaultModelPath() (string, error) {
	notify := func(path string) {
		fmt.Fprintf(os.Stderr, "minfer: writing the embedded default model %s (%s, seed %d) to %s\n",
			synth.DefaultShape, synth.DefaultType, synth.DefaultSeed, path)
	}
	var firstErr error
	var dirs []string
	if dir, err := os.UserCacheDir(); err == nil && dir != "" {
		dirs = append(dirs, filepath.Join(dir, "minfer"))
	}
	dirs = append(dirs, filepath.Join(os.TempDir(), "minfer"))
	for _, dir := range dirs {
		path, err := synth.DefaultModelNotify(dir, notify)
		if err == nil {
			return path, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", firstErr
}

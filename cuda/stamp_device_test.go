package cuda

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/minfer-go/minfer/cuda/kernels"
)

// On the GPU: the kernels file the suite runs carries the stamp of the
// sources this test binary embeds, and the same file is refused, before
// any launch, by a binary whose sources differ by one byte (a source edited
// after the build: planted through KernelsOptions.Sources).
func TestKernelsStamp_FileMatchesSourcesAndAnEditedSourceIsRefused(t *testing.T) {
	dev, cfg := dsOpenDevice(t)
	src := kernels.Sources()
	edited := fstest.MapFS{}
	names, _ := fs.Glob(src, "*.cu*")
	for i, n := range names {
		b, err := fs.ReadFile(src, n)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			b = append([]byte("// edited after the build\n"), b...)
		}
		edited[n] = &fstest.MapFile{Data: b}
	}
	editedHash, err := kernels.Hash(edited)
	if err != nil {
		t.Fatal(err)
	}
	err = dev.Do(func() error {
		k, err := LoadKernels(dev, KernelsOptions{Path: cfg.Kernels})
		if err != nil {
			return err
		}
		k.Close()
		_, err = LoadKernels(dev, KernelsOptions{Path: cfg.Kernels, Sources: editedHash})
		if !errors.Is(err, ErrStaleKernels) || !strings.Contains(err.Error(), editedHash[:16]) || !strings.Contains(err.Error(), kernels.SourceHash()[:16]) {
			t.Errorf("a source edited after the build: %v, want ErrStaleKernels naming %s and %s", err, editedHash[:16], kernels.SourceHash()[:16])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Package gobuild builds a Go command once per process for tests that run
// it as a child (the fake minfer, the fake llama-bench): the first call
// builds it into a temporary folder, later calls return that binary.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

type result struct {
	once sync.Once
	bin  string
	err  error
}

var built sync.Map // package path + name -> *result

// Once builds pkg (an import path) into a binary called name, once per
// process, and returns its path.
func Once(pkg, name string) (string, error) {
	v, _ := built.LoadOrStore(pkg+"\x00"+name, &result{})
	r := v.(*result)
	r.once.Do(func() {
		dir, err := os.MkdirTemp("", "gobuild-")
		if err != nil {
			r.err = err
			return
		}
		r.bin = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", r.bin, pkg).CombinedOutput(); err != nil {
			r.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	return r.bin, r.err
}

// Cleanup removes every binary Once built (a TestMain calls it after the
// tests ran).
func Cleanup() {
	built.Range(func(_, v any) bool {
		if r := v.(*result); r.bin != "" {
			os.RemoveAll(filepath.Dir(r.bin))
		}
		return true
	})
}

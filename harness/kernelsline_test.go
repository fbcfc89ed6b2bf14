package harness

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/schema"
)

// The environment's kernels line names the file, its sha256 and the sources
// it was built from on CUDA, says none was loaded on the CPU, and says so
// when an old minfer reported nothing.
func TestKernelsLine_NamesTheFileItsHashAndItsSources(t *testing.T) {
	e := Environment{KernelSources: "src1", Kernels: &schema.Kernels{Path: "bin/k.fatbin", SHA256: "f1", Source: "src1", Compiler: "nvcc 13", Flags: "-O3"}}
	if l := e.KernelsLine(); !strings.Contains(l, "bin/k.fatbin sha256 f1, built from kernel sources src1 (nvcc 13; -O3)") {
		t.Errorf("cuda: %q", l)
	}
	if l := (Environment{KernelSources: "src1"}).KernelsLine(); !strings.Contains(l, "none loaded") {
		t.Errorf("cpu: %q", l)
	}
	if l := (Environment{}).KernelsLine(); !strings.Contains(l, "not reported") {
		t.Errorf("old minfer: %q", l)
	}
}

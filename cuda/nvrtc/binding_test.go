package nvrtc

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minfer-go/minfer/cuda/kernels"
	"github.com/minfer-go/minfer/internal/dynlib"
)

// fakeLib builds testdata/fake_nvrtc.c into a libnvrtc.so.12 with the C
// compiler, or skips when there is none.
func fakeLib(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the fake libnvrtc")
	}
	lib := filepath.Join(t.TempDir(), "libnvrtc.so.12")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, filepath.Join("testdata", "fake_nvrtc.c")).CombinedOutput(); err != nil {
		t.Fatalf("building the fake libnvrtc: %v\n%s", err, out)
	}
	return lib
}

// The binding through purego, against a fake libnvrtc with the real
// signatures: the version, every string and char** array crossing into
// nvrtcCreateProgram and nvrtcCompileProgram intact (concurrently), the
// cubin and the log coming back, a failed compile an *Error with NVRTC's
// name for the code and the log, and every program destroyed.
func TestLib_BindingPassesEveryArgumentAndDestroysEveryProgram(t *testing.T) {
	path := fakeLib(t)
	lib, err := OpenFrom([]string{filepath.Join(filepath.Dir(path), "libnvrtc.so.13"), path})
	if err != nil {
		t.Fatal(err)
	}
	if lib.Compiler() != "NVRTC 12.8" {
		t.Errorf("compiler %q, want NVRTC 12.8", lib.Compiler())
	}
	if got, _ := filepath.EvalSymlinks(lib.Path()); got != path {
		if want, _ := filepath.EvalSymlinks(path); got != want {
			t.Errorf("path %q, want %q", lib.Path(), path)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("unit%d", i)
			hs := []Header{{Name: "a.cuh", Text: "A" + name}, {Name: "stdint.h", Text: "typedef int x;"}}
			cubin, log, err := lib.Compile(name, "src of "+name, hs, []string{"--gpu-architecture=sm_90a", "--std=c++17"})
			want := "\x7fELF|" + name + "|src of " + name + "|a.cuh=A" + name + "|stdint.h=typedef int x;|--gpu-architecture=sm_90a|--std=c++17"
			switch {
			case err != nil:
				errs[i] = err
			case string(cubin) != want:
				errs[i] = fmt.Errorf("cubin %q, want %q", cubin, want)
			case log != "fake: compiled\n":
				errs[i] = fmt.Errorf("log %q", log)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	_, log, err := lib.Compile("bad", "#error here", nil, nil)
	var ne *Error
	if !errors.As(err, &ne) || ne.Code != 6 || ne.Name != "NVRTC_ERROR_COMPILATION" || ne.Call != "nvrtcCompileProgram" || !strings.Contains(log, "planted") {
		t.Errorf("a failed compile: %v, log %q; want nvrtcCompileProgram's NVRTC_ERROR_COMPILATION (6) and the log", err, log)
	}
	h, err := dynlib.Open(path, dynlib.Local)
	if err != nil {
		t.Fatal(err)
	}
	if n := dynlib.Call(dynlib.Sym(h, "fake_live")); n != 0 {
		t.Errorf("%d programs were not destroyed", n)
	}
}

// Build over the real embedded sources through the binding: each unit's
// generated source, every source and the shims as headers, and the
// options reach the compiler; the stamp unit carries the stamp.
func TestBuild_RealSourcesThroughTheBinding(t *testing.T) {
	lib, err := OpenFrom([]string{fakeLib(t)})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options("sm_90a", []string{"/usr/local/cuda/include"})
	res, err := Build(Config{Sources: kernels.Sources(), SourceHash: kernels.SourceHash(), Compiler: lib.Compiler(), Arch: "sm_90a",
		Options: opts, CacheDir: t.TempDir(), Compile: lib.Compile})
	if err != nil {
		t.Fatal(err)
	}
	units, _ := Units(kernels.Sources())
	if len(res.Images) != len(units)+1 {
		t.Fatalf("%d images for %d units and the stamp", len(res.Images), len(units))
	}
	for i, u := range units {
		img := string(res.Images[i])
		for _, want := range []string{"|" + u.Name + "|" + u.Source() + "|", "|common.cuh=", "|stdint.h=", "|" + preludeName + "=", "|" + strings.Join(opts, "|")} {
			if !strings.Contains(img, want) {
				t.Errorf("unit %s: the compiler was not given %q", u.Name, want)
			}
		}
	}
	if stamp := string(res.Images[len(units)]); !strings.Contains(stamp, `minfer_kernels_stamp[] = "minfer-kernels-stamp v1\nsource_sha256=`+kernels.SourceHash()+`\ncompiler=NVRTC 12.8\n`) {
		t.Errorf("the stamp unit: %q", stamp)
	}
}

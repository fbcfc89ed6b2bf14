package nvrtc

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A missing libnvrtc is one error, matching ErrNotFound, that names what was
// tried and why, says how to get NVRTC (the toolkit or the redistributable
// package) and that a prebuilt kernels file works without it.
func TestOpen_MissingLibnvrtcIsOneErrorSayingHowToGetItOrAPrebuiltFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnvrtc.so.13")
	_, err := OpenFrom([]string{missing, "libnvrtc-minfer-test-absent.so"})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenFrom of absent libraries: %v, want ErrNotFound", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("the error spans lines: %q", msg)
	}
	for _, want := range []string{"libnvrtc.so.13, libnvrtc-minfer-test-absent.so on the loader's path", "and in " + filepath.Dir(missing), "CUDA toolkit", "redistributable NVRTC package", "LD_LIBRARY_PATH",
		"prebuilt kernels file", "scripts/build-kernels.sh", "MINFER_KERNELS"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
}

// Open tries the versioned names on the loader's path before the toolkit's
// directories, CUDA 13 before 12.
func TestCandidates_VersionedNamesFirstThenToolkitDirectories(t *testing.T) {
	c := Candidates()
	want := []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13"}
	for i, w := range want {
		if i >= len(c) || c[i] != w {
			t.Fatalf("candidates %q, want them to begin %q", c, want)
		}
	}
	if !strings.Contains(strings.Join(c, " "), "/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.12") {
		t.Errorf("candidates %q lack the toolkit's targets directory", c)
	}
}

// On a machine with NVRTC: the binding answers a version and compiles a
// trivial kernel to a cubin (an ELF); a syntax error is an error with
// NVRTC's log. Skipped where no libnvrtc loads (this CPU machine).
func TestLib_CompilesATrivialKernelWhereNVRTCIsInstalled(t *testing.T) {
	lib, err := Open()
	if errors.Is(err, ErrNotFound) {
		t.Skipf("no libnvrtc: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if major, _ := lib.Version(); major < 11 {
		t.Fatalf("%s at %s: version %d", lib.Compiler(), lib.Path(), major)
	}
	// NVRTC 11 has no sm_90a (BuildEmbedded refuses that pairing).
	arch := "sm_90a"
	if major, _ := lib.Version(); major < 12 {
		arch = "sm_80"
	}
	src := "#include \"h.cuh\"\nextern \"C\" __global__ void minfer_t(float* x) { x[threadIdx.x] = K; }\n"
	cubin, log, err := lib.Compile("t", src, []Header{{Name: "h.cuh", Text: "#define K 2.0f\n"}}, Options(arch, nil))
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if len(cubin) < 4 || string(cubin[:4]) != "\x7fELF" {
		t.Errorf("cubin of %d bytes begins %q, want an ELF", len(cubin), cubin[:min(4, len(cubin))])
	}
	if _, log, err := lib.Compile("bad", "this is not C++", nil, Options(arch, nil)); err == nil || log == "" {
		t.Errorf("a syntax error: %v, log %q; want an error and NVRTC's log", err, log)
	}
}

package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/cuda/kernels"
	"github.com/minfer-go/minfer/cuda/nvrtc"
	"github.com/minfer-go/minfer/engine/levers"
)

// The NVRTC build compiles the units scripts/build-kernels.sh compiles with
// KERNELS_SPLIT=1: the script run with a fake nvcc copies each generated
// unit out, and their #include lists are nvrtc.Units, unit for unit.
func TestNVRTCUnits_AreTheScriptsSplitUnits(t *testing.T) {
	dir := t.TempDir()
	if _, log, ok := buildKernels(t, t.TempDir(), "KERNELS_SPLIT=1", "FAKE_UNITS="+dir); !ok {
		t.Fatalf("split build failed:\n%s", log)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	include := regexp.MustCompile(`#include "([^"]+)"`)
	script := map[string][]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(e.Name(), "unit-"), ".cu")
		for _, m := range include.FindAllStringSubmatch(string(b), -1) {
			script[name] = append(script[name], filepath.Base(m[1]))
		}
	}
	units, err := nvrtc.Units(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	if len(units) != len(script) {
		t.Errorf("nvrtc forms %d units, the script %d", len(units), len(script))
	}
	for _, u := range units {
		if !slices.Equal(u.Files, script[u.Name]) {
			t.Errorf("unit %s: nvrtc includes %q, the script %q", u.Name, u.Files, script[u.Name])
		}
	}
}

// The NVRTC build's stamp reads as a kernels file's stamp: this binary's
// source hash, the NVRTC compiler and its flags, through the same
// C string literal the stamp unit declares.
func TestNVRTCStamp_IsTheFileStampFormat(t *testing.T) {
	flags := strings.Join(nvrtc.Options("sm_90a", []string{"/usr/local/cuda/include"}), " ") + " split=1"
	text := nvrtc.StampText(kernels.SourceHash(), "NVRTC 13.0", flags)
	st, err := checkStamp("manifest.json", []byte(text+"\x00"), kernels.SourceHash())
	if err != nil {
		t.Fatal(err)
	}
	if st.Compiler != "NVRTC 13.0" || st.Flags != flags {
		t.Errorf("stamp %+v, want compiler NVRTC 13.0 and flags %q", st, flags)
	}
}

// A kernels path the user named that does not exist stays an error: no
// NVRTC build is made in its place.
func TestOpenKernels_NamedMissingFileIsAnErrorNeverACompile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.fatbin")
	_, _, _, err := openKernels(nil, KernelsOptions{Path: missing, NVRTCCache: t.TempDir()})
	if !errors.Is(err, driver.ErrKernelsNotFound) || errors.Is(err, nvrtc.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Errorf("MINFER_KERNELS=%s (absent): %v; want the file's not-found error, nothing of NVRTC", missing, err)
	}
}

// With no kernels file given or beside the binary and no libnvrtc, loading
// is one error that says both: what was looked for, how to get NVRTC and
// that a prebuilt file works. (Skipped where NVRTC loads or a file lies
// beside the test binary: the device test covers that machine.)
func TestOpenKernels_NoFileAndNoNVRTCIsOneErrorNamingBothWays(t *testing.T) {
	if _, err := nvrtc.Open(); err == nil {
		t.Skip("libnvrtc loads here")
	}
	if p, err := driver.FindKernels(""); err == nil {
		t.Skipf("a kernels file lies beside the test binary: %s", p)
	}
	_, _, _, err := openKernels(nil, KernelsOptions{NVRTCCache: t.TempDir()})
	if !errors.Is(err, driver.ErrKernelsNotFound) || !errors.Is(err, nvrtc.ErrNotFound) {
		t.Fatalf("%v: want ErrKernelsNotFound and nvrtc.ErrNotFound", err)
	}
	msg := err.Error()
	beside, _ := driver.KernelsBesideExecutable()
	for _, want := range []string{"MINFER_KERNELS is unset", beside, "needs NVRTC", "CUDA toolkit", "redistributable NVRTC package", "scripts/build-kernels.sh"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("the error spans lines: %q", msg)
	}
}

// MINFER_KERNELS=nvrtc names the NVRTC build: no file is looked for, not
// even beside the executable (so an A/B arm cannot silently load one); a
// named path that does not exist stays an error, never compiled around;
// unset looks beside the executable and falls back to NVRTC.
func TestPlanKernels_NVRTCIsExplicitAndAMissingFileStaysAnError(t *testing.T) {
	for v, want := range map[string]kernelsPlan{
		levers.KernelsNVRTC:        {NVRTC: true},
		"":                         {Fallback: true},
		"/abs/k.fatbin":            {File: "/abs/k.fatbin"},
		"nvrtc.fatbin":             {File: "nvrtc.fatbin"},
		"./" + levers.KernelsNVRTC: {File: "./" + levers.KernelsNVRTC},
	} {
		if got := planKernels(v); got != want {
			t.Errorf("MINFER_KERNELS=%q: plan %+v, want %+v", v, got, want)
		}
	}
	c, err := levers.Parse([]string{"MINFER_KERNELS=nvrtc"})
	if err != nil || !planKernels(c.Kernels).NVRTC {
		t.Errorf("the levers' MINFER_KERNELS=nvrtc (%q, %v) does not plan the NVRTC build", c.Kernels, err)
	}
	// Without libnvrtc (this machine) the explicit NVRTC build fails with
	// NVRTC's own error, naming the setting, and never a file's.
	if _, err := nvrtc.Open(); err == nil {
		t.Skip("libnvrtc loads here: the device tests load the build")
	}
	_, _, _, err = openKernels(nil, KernelsOptions{Path: levers.KernelsNVRTC, NVRTCCache: t.TempDir()})
	if !errors.Is(err, nvrtc.ErrNotFound) || errors.Is(err, driver.ErrKernelsNotFound) || !strings.Contains(err.Error(), "MINFER_KERNELS=nvrtc") {
		t.Errorf("MINFER_KERNELS=nvrtc without libnvrtc: %v; want NVRTC's error naming the setting, no file's", err)
	}
}

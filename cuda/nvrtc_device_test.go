package cuda

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/cuda/kernels"
	"github.com/minfer-go/minfer/engine/levers"
)

// On the GPU (issue 25): the embedded sources compile through NVRTC into a
// fresh cache, load, carry this binary's stamp (compiler NVRTC), and
// export exactly the kernels the nvcc kernels file (MINFER_KERNELS, or the
// file beside the test binary) exports; loading again is a cache hit that
// compiles nothing. The cold compile time is logged.
func TestNVRTCKernels_ExportEveryKernelOfTheNvccFileAndHitTheCache(t *testing.T) {
	dev, cfg := dsOpenDevice(t)
	cache := t.TempDir()
	opts := KernelsOptions{NVRTCCache: cache, Logf: t.Logf}
	// The nvcc file is found and read here, on the test's goroutine:
	// t.Skip or t.Fatal inside dev.Do ends the device's worker goroutine
	// and every later call waits forever (the first KERNELS=nvrtc suite on
	// the H200 hung here for 10 minutes).
	nvccPath := cfg.Kernels
	if nvccPath == levers.KernelsNVRTC { // the suite's NVRTC arm: compare with the file beside the binary, if any
		nvccPath = ""
	}
	nvcc, nvccErr := driver.FindKernels(nvccPath)
	var imgs [][]byte
	var names []string
	if nvccErr == nil {
		imgs, names = readFatbins(t, nvcc), sourceKernelNames(t)
	}
	err := dev.Do(func() error {
		mod, res, err := loadNVRTC(dev, opts, planKernels(""))
		if err != nil {
			return err
		}
		defer mod.Unload()
		if res.Hit {
			t.Errorf("a fresh cache %s hit", cache)
		}
		t.Logf("NVRTC cold compile of %d units: %.1f s (%s); entry %s", len(res.Units), res.Compile.Seconds(), res.Flags, res.Dir)
		raw, err := readStamp(dev, mod)
		if err != nil {
			return err
		}
		st, err := checkStamp(mod.Path, raw, kernels.SourceHash())
		if err != nil {
			return err
		}
		if !strings.HasPrefix(st.Compiler, "NVRTC ") || st.Flags != res.Flags {
			t.Errorf("stamp %+v: want compiler NVRTC and flags %q", st, res.Flags)
		}
		built := cubinKernels(res.Images)
		if len(built) < 50 {
			t.Errorf("the NVRTC cubins export %d minfer_ kernels: %q", len(built), built)
		}
		if nvccErr == nil {
			if err := compareWithNvccFile(t, dev, nvcc, imgs, names, mod, built); err != nil {
				return err
			}
		}

		again, res2, err := loadNVRTC(dev, opts, planKernels(""))
		if err != nil {
			return err
		}
		defer again.Unload()
		if !res2.Hit {
			t.Errorf("the second load compiled again (entry %s)", res2.Dir)
		}
		t.Logf("NVRTC cache hit: loaded in %d ms", res2.Elapsed.Milliseconds())
		for i := range res.Images {
			if !bytes.Equal(res.Images[i], res2.Images[i]) {
				t.Errorf("unit %s: the cached cubin differs from the compiled one", res.Units[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if nvccErr != nil {
		t.Skipf("the NVRTC build loaded and hit its cache, but no nvcc kernels file to compare it with (set MINFER_KERNELS): %v", nvccErr)
	}
}

// compareWithNvccFile checks that every kernel the nvcc kernels file
// exports is found in the NVRTC modules and the other way round. The
// file's names come from the ELF images in its fatbin containers; when
// they are compressed (nvcc's default since CUDA 12.4), from a lookup in
// the file of every name the NVRTC cubins export and every kernel name
// the sources spell out.
// It runs inside dev.Do: it reports with t.Errorf and returns its errors,
// never t.Fatal or t.Skip.
func compareWithNvccFile(t *testing.T, dev *driver.Device, path string, imgs [][]byte, sourceNames []string, nv *driver.Module, built []string) error {
	file, err := dev.LoadImages(path, imgs)
	if err != nil {
		return fmt.Errorf("the nvcc kernels file: %w", err)
	}
	defer file.Unload()
	var embedded []byte
	for _, img := range imgs {
		embedded = append(embedded, img...)
	}
	exported := elfKernels(embedded)
	if len(exported) == 0 {
		cands := append(slices.Clone(built), sourceNames...)
		slices.Sort(cands)
		for _, n := range slices.Compact(cands) {
			if _, err := file.Function(n); err == nil {
				exported = append(exported, n)
			}
		}
		t.Logf("%s: compressed images; %d kernels found by name", path, len(exported))
	} else {
		t.Logf("%s exports %d kernels", path, len(exported))
	}
	for _, n := range exported {
		if _, err := nv.Function(n); err != nil {
			t.Errorf("%s exports %s; the NVRTC build does not: %v", path, n, err)
		}
	}
	for _, n := range built {
		if _, err := file.Function(n); err != nil {
			t.Errorf("the NVRTC build exports %s; %s does not: %v", n, path, err)
		}
	}
	return nil
}

// cubinKernels are the minfer_ functions the cubins export.
func cubinKernels(imgs [][]byte) []string {
	var out []string
	for _, img := range imgs {
		out = append(out, elfKernels(img)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// elfKernels reads every ELF image found in data (a cubin, or fatbin
// containers holding uncompressed ones) and returns its global minfer_
// functions marked as kernel entries (STO_CUDA_ENTRY in st_other; all
// global minfer_ functions if no symbol carries the mark).
func elfKernels(data []byte) []string {
	const stoCudaEntry = 0x10
	var out, entries []string
	for off := 0; ; {
		i := bytes.Index(data[off:], []byte("\x7fELF"))
		if i < 0 {
			break
		}
		off += i
		if f, err := elf.NewFile(bytes.NewReader(data[off:])); err == nil {
			syms, _ := f.Symbols()
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL && strings.HasPrefix(s.Name, "minfer_") {
					out = append(out, s.Name)
					if s.Other&stoCudaEntry != 0 {
						entries = append(entries, s.Name)
					}
				}
			}
		}
		off += 4
	}
	if len(entries) > 0 {
		out = entries
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sourceKernelNames are the kernel names the sources spell out whole
// (names pasted together by macros are not among them).
func sourceKernelNames(t *testing.T) []string {
	t.Helper()
	re := regexp.MustCompile(`\b(minfer_[A-Za-z0-9_]+)\s*\(`)
	var out []string
	names, _ := fs.Glob(kernels.Sources(), "*.cu")
	for _, n := range names {
		b, err := fs.ReadFile(kernels.Sources(), n)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasSuffix(m[1], "_") {
				out = append(out, m[1])
			}
		}
	}
	return out
}

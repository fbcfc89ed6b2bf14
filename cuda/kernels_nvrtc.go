package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/cuda/nvrtc"
	"github.com/minfer-go/minfer/engine/levers"
)

// kernelsPlan is what openKernels does with a MINFER_KERNELS value.
type kernelsPlan struct {
	// File is the kernels file to load ("": beside the executable);
	// unused when NVRTC.
	File string
	// NVRTC: compile the embedded sources with NVRTC, no file looked for
	// (MINFER_KERNELS=nvrtc, even with a file beside the executable).
	NVRTC bool
	// Fallback: when no file lies beside the executable, the NVRTC build
	// (only with MINFER_KERNELS unset: a named file that does not exist is
	// an error, never compiled around).
	Fallback bool
}

// planKernels decides where the kernels come from for MINFER_KERNELS=v.
func planKernels(v string) kernelsPlan {
	switch v {
	case levers.KernelsNVRTC:
		return kernelsPlan{NVRTC: true}
	case "":
		return kernelsPlan{Fallback: true}
	}
	return kernelsPlan{File: v}
}

// openKernels loads the kernels: the file driver.FindKernels finds
// (MINFER_KERNELS, else beside the executable), or the embedded sources
// compiled with NVRTC, from its cache when it has them (issue 25): with
// MINFER_KERNELS=nvrtc, or when no path was given and no file lies beside
// the executable. A path the user named that does not exist stays an
// error: nothing is compiled in its place. how says which path was taken,
// for the log; nvrtcBuild reports the NVRTC build (the census names it).
func openKernels(dev *driver.Device, opts KernelsOptions) (mod *driver.Module, how string, nvrtcBuild bool, err error) {
	plan := planKernels(opts.Path)
	why := "no kernels file given"
	if plan.NVRTC {
		why = "MINFER_KERNELS=" + levers.KernelsNVRTC
	} else {
		mod, err = dev.LoadKernels(plan.File)
		if err == nil {
			return mod, "kernels: file " + mod.Path, false, nil
		}
		if !plan.Fallback || !errors.Is(err, driver.ErrKernelsNotFound) {
			return nil, "", false, err
		}
	}
	mod, res, err := loadNVRTC(dev, opts, plan)
	if err != nil {
		return nil, "", false, err
	}
	if res.Hit {
		how = fmt.Sprintf("kernels: %s; the embedded sources' NVRTC build (%s) came from the cache %s in %d ms (its cold compile took %.1f s)",
			why, res.Flags, res.Dir, res.Elapsed.Milliseconds(), res.Compile.Seconds())
	} else {
		how = fmt.Sprintf("kernels: %s; compiled the embedded sources with NVRTC (%s) in %.1f s (cold; cached in %s for the next run)",
			why, res.Flags, res.Compile.Seconds(), res.Dir)
	}
	return mod, how, true, nil
}

// loadNVRTC compiles the embedded sources for dev with NVRTC (or takes
// them from the cache) and loads each unit's cubin as a module; the
// module's Path is the cache entry's manifest. Inside Do.
func loadNVRTC(dev *driver.Device, opts KernelsOptions, plan kernelsPlan) (*driver.Module, *nvrtc.Result, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	lib, err := nvrtc.Open()
	if err != nil && plan.NVRTC {
		return nil, nil, fmt.Errorf("MINFER_KERNELS=%s asks for the embedded kernel sources compiled with NVRTC, which needs NVRTC: %w",
			levers.KernelsNVRTC, err)
	}
	if err != nil {
		beside, berr := driver.KernelsBesideExecutable()
		if berr != nil {
			beside = berr.Error()
		}
		return nil, nil, fmt.Errorf("%w (MINFER_KERNELS is unset and there is none at %s), and compiling the embedded kernel sources instead needs NVRTC: %w",
			driver.ErrKernelsNotFound, beside, err)
	}
	cache := opts.NVRTCCache
	if cache == "" {
		if cache, err = nvrtc.DefaultCacheDir(); err != nil {
			// No HOME (a bare container): the build still runs, cached
			// where this machine keeps temporary files.
			cache = filepath.Join(os.TempDir(), "minfer-kernels")
			opts.Logf("kernels: %v; caching the NVRTC build in %s", err, cache)
		}
	}
	res, err := nvrtc.BuildEmbedded(lib, nvrtc.Arch(dev.Attr.CCMajor, dev.Attr.CCMinor), cache, opts.Logf)
	if err != nil {
		return nil, nil, fmt.Errorf("cuda: compiling the embedded kernel sources (no kernels file given; %s at %s): %w", lib.Compiler(), lib.Path(), err)
	}
	mod, err := dev.LoadImages(res.Manifest, res.Images)
	if err != nil {
		v := dev.Attr.DriverVersion
		return nil, nil, fmt.Errorf("cuda: loading the NVRTC build %s (%s; the driver supports CUDA %d.%d, and one older than NVRTC may refuse its cubins): %w",
			res.Dir, lib.Compiler(), v/1000, v%1000/10, err)
	}
	return mod, res, nil
}

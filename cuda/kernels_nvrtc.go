package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/cuda/nvrtc"
)

// openKernels loads the kernels: the file driver.FindKernels finds
// (MINFER_KERNELS, else beside the executable), or, when no path was given
// and no file lies beside the executable, the embedded sources compiled
// with NVRTC, from its cache when it has them (issue 25). A path the user
// named that does not exist stays an error: nothing is compiled in its
// place. how says which path was taken, for the log.
func openKernels(dev *driver.Device, opts KernelsOptions) (mod *driver.Module, how string, err error) {
	mod, err = dev.LoadKernels(opts.Path)
	if err == nil {
		return mod, "kernels: file " + mod.Path, nil
	}
	if opts.Path != "" || !errors.Is(err, driver.ErrKernelsNotFound) {
		return nil, "", err
	}
	mod, res, err := loadNVRTC(dev, opts)
	if err != nil {
		return nil, "", err
	}
	if res.Hit {
		how = fmt.Sprintf("kernels: no kernels file given; the embedded sources' NVRTC build (%s) came from the cache %s in %d ms (its cold compile took %.1f s)",
			res.Flags, res.Dir, res.Elapsed.Milliseconds(), res.Compile.Seconds())
	} else {
		how = fmt.Sprintf("kernels: no kernels file given; compiled the embedded sources with NVRTC (%s) in %.1f s (cold; cached in %s for the next run)",
			res.Flags, res.Compile.Seconds(), res.Dir)
	}
	return mod, how, nil
}

// loadNVRTC compiles the embedded sources for dev with NVRTC (or takes
// them from the cache) and loads each unit's cubin as a module; the
// module's Path is the cache entry's manifest. Inside Do.
func loadNVRTC(dev *driver.Device, opts KernelsOptions) (*driver.Module, *nvrtc.Result, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	lib, err := nvrtc.Open()
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

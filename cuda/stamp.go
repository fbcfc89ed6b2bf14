package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/cuda/kernels"
)

// ErrStaleKernels is matched (errors.Is) by the refusal of a kernels file
// that was not built from this binary's kernel sources (minfer exits with
// schema.ExitStaleKernels): the set-up is wrong, the path is not at fault.
var ErrStaleKernels = errors.New("kernels file not built from this binary's sources")

// staleError is the refusal's one line, matching ErrStaleKernels.
type staleError struct{ line string }

func (e *staleError) Error() string { return e.line }
func (e *staleError) Unwrap() error { return ErrStaleKernels }

func stale(format string, a ...any) error { return &staleError{fmt.Sprintf(format, a...)} }

// stampSymbol is the device string scripts/build-kernels.sh writes into
// every kernels file it builds.
const stampSymbol = "minfer_kernels_stamp"

// KernelsStamp is what a kernels file says of its build: the hash of the
// sources (cuda/kernels.Hash), the compiler and its flags.
type KernelsStamp struct {
	Source   string `json:"source_sha256"`
	Compiler string `json:"compiler"`
	Flags    string `json:"flags"`
}

// ParseKernelsStamp reads the stamp's text: a "minfer-kernels-stamp v1"
// line, then key=value lines (a trailing NUL and unknown keys ignored).
func ParseKernelsStamp(b []byte) (KernelsStamp, error) {
	b, _, _ = bytes.Cut(b, []byte{0})
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[0] != "minfer-kernels-stamp v1" {
		return KernelsStamp{}, fmt.Errorf("not a v1 kernels stamp (first line %q)", lines[0])
	}
	var st KernelsStamp
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "source_sha256":
			st.Source = v
		case "compiler":
			st.Compiler = v
		case "flags":
			st.Flags = v
		}
	}
	if len(st.Source) != 64 {
		return KernelsStamp{}, fmt.Errorf("kernels stamp: source_sha256 %q is no sha256", st.Source)
	}
	return st, nil
}

// checkStamp refuses a kernels file built from other sources than want
// (the hash of this binary's embedded sources), in one line that names
// both hashes and the command that rebuilds it. raw is the stamp as read,
// nil when the file has none.
func checkStamp(path string, raw []byte, want string) (KernelsStamp, error) {
	rebuild := fmt.Sprintf("rebuild it from this binary's sources: scripts/build-kernels.sh %s", path)
	if raw == nil {
		return KernelsStamp{}, stale("cuda: kernels file %s has no source stamp (%s missing: built by an older scripts/build-kernels.sh, or not by it); this minfer's kernel sources are %s: %s",
			path, stampSymbol, short(want), rebuild)
	}
	st, err := ParseKernelsStamp(raw)
	if err != nil {
		return KernelsStamp{}, stale("cuda: kernels file %s: %v: %s", path, err, rebuild)
	}
	if st.Source != want {
		return st, stale("cuda: kernels file %s was built from kernel sources %s, this minfer's are %s (a source changed after the build, or the file is another commit's): %s",
			path, short(st.Source), short(want), rebuild)
	}
	return st, nil
}

func short(h string) string { return h[:min(len(h), 16)] }

// readStamp reads the stamp from the loaded module: nil, nil when the file
// has none.
func readStamp(dev *driver.Device, mod *driver.Module) (b []byte, err error) {
	s, err := dev.NewStream()
	if err != nil {
		return nil, err
	}
	// A failed destroy is an error too (the driver-call sweep found it
	// dropped here).
	defer func() { err = errors.Join(err, s.Destroy()) }()
	b, err = mod.ReadGlobal(s, stampSymbol)
	if driver.IsCode(err, driver.CodeNotFound) {
		return nil, nil
	}
	return b, err
}

// wantSources is the hash a kernels file must carry: opts.Sources when a
// test plants another (a source changed after the build), else the
// embedded sources'.
func wantSources(opts KernelsOptions) string {
	if opts.Sources != "" {
		return opts.Sources
	}
	return kernels.SourceHash()
}

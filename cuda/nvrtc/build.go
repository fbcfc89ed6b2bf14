package nvrtc

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minfer-go/minfer/cuda/kernels"
)

// CompileFunc compiles one unit's source to a cubin: (*Lib).Compile in use,
// a fake in tests.
type CompileFunc func(name, source string, headers []Header, options []string) (cubin []byte, log string, err error)

// Config is what Build compiles, with what, and where it caches.
type Config struct {
	Sources    fs.FS  // the .cu and .cuh files (cuda/kernels.Sources())
	SourceHash string // their hash (cuda/kernels.Hash)
	Compiler   string // "NVRTC 13.0" (Lib.Compiler): the stamp's compiler, part of the key
	Arch       string // "sm_90a" (Arch)
	Options    []string
	// CacheDir is the cache's root: a build lives in CacheDir/<key>/.
	CacheDir string
	Compile  CompileFunc
	// Parallel bounds the units compiled at once (<= 0: runtime.NumCPU()).
	Parallel int
	// Logf receives the progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// Result is a build: its cubins (one per unit, the stamp unit last), where
// it is cached and whether the cache had it.
type Result struct {
	Dir      string   // the cache entry
	Manifest string   // its manifest file: the build's "kernels file"
	Units    []string // unit names, in image order
	Images   [][]byte // the cubins
	Stamp    string   // the stamp text the stamp unit carries
	Flags    string   // the stamp's flags
	Hit      bool     // loaded from the cache
	// Elapsed is the whole of Build; Compile the cold compile's wall time
	// (on a hit, the one recorded when the entry was built).
	Elapsed, Compile time.Duration
}

// manifestName is the file of a cache entry that lists its cubins.
const manifestName = "manifest.json"

// cacheFormat versions the key, the manifest and the unit rule.
const cacheFormat = "minfer-nvrtc-cache v1"

type manifest struct {
	Format    string         `json:"format"`
	Key       string         `json:"key"`
	Source    string         `json:"source_sha256"`
	Compiler  string         `json:"compiler"`
	Arch      string         `json:"arch"`
	Flags     string         `json:"flags"`
	CompileMS int64          `json:"compile_ms"`
	Units     []manifestUnit `json:"units"`
}

type manifestUnit struct {
	Name   string   `json:"name"`
	Files  []string `json:"files,omitempty"`
	Cubin  string   `json:"cubin"`
	Size   int      `json:"size"`
	SHA256 string   `json:"sha256"`
}

// Key is the cache key: sha256 of the cache format, the source hash, the
// options, the architecture and the compiler (NVRTC's version), and of the
// generated prelude the units include.
func Key(sourceHash string, options []string, arch, compiler string) string {
	h := sha256.New()
	for _, s := range []string{cacheFormat, sourceHash, strings.Join(options, "\x1f"), arch, compiler, prelude, stdintShim} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DefaultCacheDir is os.UserCacheDir()/minfer/kernels.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("nvrtc: no user cache directory for the compiled kernels: %w", err)
	}
	return filepath.Join(d, "minfer", "kernels"), nil
}

// Build returns the cubins of the sources: from the cache entry of their
// key when it is whole (every cubin present with the sha256 its manifest
// records), else compiled (every unit in parallel, one progress line each)
// and written to the entry, each file atomically (temporary file, then
// rename) and the manifest last. A corrupt or partial entry is rebuilt,
// never trusted. A failed compile writes nothing.
func Build(cfg Config) (*Result, error) {
	start := time.Now()
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.Compile == nil || cfg.Sources == nil || cfg.CacheDir == "" {
		return nil, errors.New("nvrtc: Build needs sources, a compile function and a cache directory")
	}
	units, err := Units(cfg.Sources)
	if err != nil {
		return nil, err
	}
	flags := strings.Join(cfg.Options, " ") + " split=1"
	stamp := StampText(cfg.SourceHash, cfg.Compiler, flags)
	key := Key(cfg.SourceHash, cfg.Options, cfg.Arch, cfg.Compiler)
	dir := filepath.Join(cfg.CacheDir, key[:32])
	want := manifest{Format: cacheFormat, Key: key, Source: cfg.SourceHash, Compiler: cfg.Compiler, Arch: cfg.Arch, Flags: flags}
	names := append(unitNames(units), StampUnit)

	res := &Result{Dir: dir, Manifest: filepath.Join(dir, manifestName), Units: names, Stamp: stamp, Flags: flags}
	imgs, ms, why := readEntry(dir, want, names)
	if why == "" {
		res.Images, res.Hit = imgs, true
		res.Compile = time.Duration(ms) * time.Millisecond
		res.Elapsed = time.Since(start)
		return res, nil
	}
	if why != "absent" {
		logf("kernels: the NVRTC cache entry %s is unusable (%s): rebuilding it", dir, why)
	}

	headers, err := Headers(cfg.Sources)
	if err != nil {
		return nil, err
	}
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.NumCPU()
	}
	jobs := make([]job, 0, len(units)+1)
	for _, u := range units {
		jobs = append(jobs, job{name: u.Name, files: u.Files, source: u.Source()})
	}
	jobs = append(jobs, job{name: StampUnit, source: stampSource(stamp)})
	logf("kernels: compiling %d units of the embedded sources with %s for %s (%d at a time); once: the result is cached in %s",
		len(jobs), cfg.Compiler, cfg.Arch, min(par, len(jobs)), dir)
	// The largest units start first, so the slowest is not the last to
	// begin when there are more units than workers.
	size := map[string]int{}
	for _, h := range headers {
		size[h.Name] = len(h.Text)
	}
	for i := range jobs {
		for _, f := range jobs[i].files {
			jobs[i].size += size[f]
		}
	}
	cstart := time.Now()
	compileAll(jobs, par, func(j *job) {
		t := time.Now()
		j.cubin, j.log, j.err = cfg.Compile(j.name, j.source, headers, cfg.Options)
		j.took = time.Since(t)
	}, func(j *job, done int) {
		state := "compiled"
		if j.err != nil {
			state = "FAILED"
		}
		logf("kernels: [%d/%d] %s %s in %.1fs", done, len(jobs), state, j.name, j.took.Seconds())
	})
	compileTime := time.Since(cstart)
	var failed []string
	var first error
	for _, j := range jobs {
		if j.err != nil {
			failed = append(failed, j.name)
			if first == nil {
				first = fmt.Errorf("unit %s (%s): %w", j.name, strings.Join(j.files, " "), j.err)
				if l := strings.TrimSpace(j.log); l != "" {
					first = fmt.Errorf("%w:\n%s", first, firstLines(l, 40))
				}
			}
		} else if l := strings.TrimSpace(j.log); l != "" {
			logf("kernels: %s: %s", j.name, firstLines(l, 20))
		}
	}
	if first != nil {
		return nil, fmt.Errorf("nvrtc: %d of %d kernel units did not compile with %s %s (%s)%s: %w",
			len(failed), len(jobs), cfg.Compiler, strings.Join(cfg.Options, " "), strings.Join(failed, ", "), headersHint(first, cfg.Options), first)
	}
	res.Images = make([][]byte, len(jobs))
	for i, j := range jobs {
		res.Images[i] = j.cubin
	}
	want.CompileMS = compileTime.Milliseconds()
	if err := writeEntry(dir, want, jobs); err != nil {
		// The build is good; only the next run pays for the cache.
		logf("kernels: could not cache the NVRTC build in %s: %v", dir, err)
	}
	res.Compile = compileTime
	res.Elapsed = time.Since(start)
	return res, nil
}

type job struct {
	name   string
	files  []string
	size   int // bytes of its sources: the larger start first
	source string
	cubin  []byte
	log    string
	err    error
	took   time.Duration
}

// compileAll runs do on every job, at most par at once, the largest
// first, and reports each as it finishes (done counts the finished, in
// finishing order).
func compileAll(jobs []job, par int, do func(*job), report func(j *job, done int)) {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return jobs[order[a]].size > jobs[order[b]].size })
	sem := make(chan struct{}, par)
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := 0
	for _, i := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(j *job) {
			defer wg.Done()
			defer func() { <-sem }()
			do(j)
			mu.Lock()
			done++
			report(j, done)
			mu.Unlock()
		}(&jobs[i])
	}
	wg.Wait()
}

// headersHint says what to do when NVRTC found no CUDA toolkit headers.
func headersHint(err error, options []string) string {
	msg := err.Error()
	if !strings.Contains(msg, "cuda_fp16.h") && !strings.Contains(msg, "mma.h") {
		return ""
	}
	var dirs []string
	for _, o := range options {
		if d, ok := strings.CutPrefix(o, "--include-path="); ok {
			dirs = append(dirs, d)
		}
	}
	where := "none was found (looked beside libnvrtc and in /usr/local/cuda/include)"
	if len(dirs) > 0 {
		where = "looked in " + strings.Join(dirs, ", ")
	}
	return "; the kernels include the CUDA toolkit's cuda_fp16.h and mma.h, which NVRTC reads from the toolkit's include directory (" + where +
		"): install the toolkit's headers, or use a prebuilt kernels file (scripts/build-kernels.sh; MINFER_KERNELS)"
}

func unitNames(units []Unit) []string {
	out := make([]string, len(units))
	for i, u := range units {
		out[i] = u.Name
	}
	return out
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("... (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

// readEntry loads a cache entry: its cubins in the order of names and the
// recorded compile time, or why it cannot be used ("absent" when there is
// no manifest).
func readEntry(dir string, want manifest, names []string) ([][]byte, int64, string) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, "absent"
	}
	if err != nil {
		return nil, 0, err.Error()
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, 0, "manifest: " + err.Error()
	}
	if m.Format != want.Format || m.Key != want.Key || m.Source != want.Source || m.Compiler != want.Compiler || m.Arch != want.Arch || m.Flags != want.Flags {
		return nil, 0, "the manifest describes another build"
	}
	if len(m.Units) != len(names) {
		return nil, 0, fmt.Sprintf("the manifest lists %d units, the sources make %d", len(m.Units), len(names))
	}
	imgs := make([][]byte, len(names))
	for i, u := range m.Units {
		if u.Name != names[i] {
			return nil, 0, fmt.Sprintf("unit %d is %q, want %q", i, u.Name, names[i])
		}
		if u.Cubin != filepath.Base(u.Cubin) || u.Cubin == manifestName {
			return nil, 0, fmt.Sprintf("unit %s: cubin file name %q", u.Name, u.Cubin)
		}
		c, err := os.ReadFile(filepath.Join(dir, u.Cubin))
		if err != nil {
			return nil, 0, fmt.Sprintf("unit %s: %v", u.Name, err)
		}
		sum := sha256.Sum256(c)
		if got := hex.EncodeToString(sum[:]); got != u.SHA256 || len(c) != u.Size {
			return nil, 0, fmt.Sprintf("unit %s: %s is %d bytes of sha256 %s, the manifest says %d bytes of %s", u.Name, u.Cubin, len(c), short(got), u.Size, short(u.SHA256))
		}
		imgs[i] = c
	}
	return imgs, m.CompileMS, ""
}

// writeEntry writes the cubins, each under a name carrying its hash, and
// then the manifest, each atomically.
func writeEntry(dir string, m manifest, jobs []job) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, j := range jobs {
		sum := sha256.Sum256(j.cubin)
		h := hex.EncodeToString(sum[:])
		name := j.name + "-" + h[:16] + ".cubin"
		if err := writeAtomic(dir, name, j.cubin); err != nil {
			return err
		}
		m.Units = append(m.Units, manifestUnit{Name: j.name, Files: j.files, Cubin: name, Size: len(j.cubin), SHA256: h})
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(dir, manifestName, append(b, '\n'))
}

// writeAtomic writes dir/name through a temporary file in dir and a
// rename, so a reader sees the whole file or none.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if serr := f.Sync(); werr == nil {
		werr = serr
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, filepath.Join(dir, name))
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", filepath.Join(dir, name), werr)
	}
	return nil
}

func short(h string) string { return h[:min(len(h), 16)] }

// BuildEmbedded builds minfer's embedded kernel sources (cuda/kernels) for
// arch with lib, cached under cache: the one configuration the backend and
// the driver's device tests both load.
func BuildEmbedded(lib *Lib, arch, cache string, logf func(string, ...any)) (*Result, error) {
	// NVRTC 11 knows no architecture-specific (sm_XXa) targets; say so
	// before 18 units fail one by one with "invalid value".
	if major, minor := lib.Version(); major < 12 && strings.HasSuffix(arch, "a") {
		return nil, fmt.Errorf("nvrtc: %s (%s, %d.%d) cannot compile for %s, which needs NVRTC 12.0 or later: install the CUDA 12+ NVRTC (the toolkit or its redistributable NVRTC package), or give a prebuilt kernels file (MINFER_KERNELS=FILE)",
			lib.Compiler(), lib.Path(), major, minor, arch)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	return Build(Config{
		Sources: kernels.Sources(), SourceHash: kernels.SourceHash(),
		Compiler: lib.Compiler(), Arch: arch, Options: Options(arch, IncludeDirs(lib.Path(), exists)),
		CacheDir: cache, Compile: lib.Compile, Logf: logf,
	})
}

package nvrtc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
)

// fakeCompiler is a CompileFunc that "compiles" a unit to its name and
// source, counts its calls and the most it ran at once, and fails the
// units named in fail.
type fakeCompiler struct {
	calls, running, peak atomic.Int32
	fail                 map[string]bool
	mu                   sync.Mutex
	opts                 [][]string
}

func (f *fakeCompiler) compile(name, source string, headers []Header, options []string) ([]byte, string, error) {
	f.calls.Add(1)
	n := f.running.Add(1)
	defer f.running.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	f.mu.Lock()
	f.opts = append(f.opts, options)
	f.mu.Unlock()
	if f.fail[name] {
		return nil, "x.cu(1): error: cannot open source file \"cuda_fp16.h\"", errors.New("NVRTC_ERROR_COMPILATION (6)")
	}
	if len(headers) == 0 {
		return nil, "", errors.New("no headers given")
	}
	return []byte("cubin:" + name + "\n" + source), "", nil
}

func testSources() fstest.MapFS {
	return fstest.MapFS{
		"a.cu":       {Data: []byte("a")},
		"b.cu":       {Data: []byte("b")},
		"mmvq.cu":    {Data: []byte("m")},
		"mmvq_nt.cu": {Data: []byte("n")},
		"c.cuh":      {Data: []byte("c")},
	}
}

func testConfig(t *testing.T, f *fakeCompiler) Config {
	return Config{
		Sources: testSources(), SourceHash: strings.Repeat("ab", 32), Compiler: "NVRTC 13.0", Arch: "sm_90a",
		Options: Options("sm_90a", []string{"/usr/local/cuda/include"}), CacheDir: t.TempDir(), Compile: f.compile, Parallel: 2,
	}
}

// coldBuild runs a first build over f into a fresh cache and returns the
// config (its Logf appends each line to *logs) and the result.
func coldBuild(t *testing.T, f *fakeCompiler) (Config, *Result, *[]string) {
	t.Helper()
	cfg := testConfig(t, f)
	logs := new([]string)
	cfg.Logf = func(format string, a ...any) { *logs = append(*logs, fmt.Sprintf(format, a...)) }
	cold, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cold, logs
}

// A cold build compiles every unit plus the stamp unit, at most Parallel
// at once, with one progress line each; the second build is a cache hit
// that compiles nothing and returns the same cubins; the stamp unit
// carries the stamp text of scripts/build-kernels.sh's format.
func TestBuild_ColdCompilesEveryUnitThenTheCacheHits(t *testing.T) {
	f := &fakeCompiler{}
	cfg, cold, logs := coldBuild(t, f)
	wantUnits := []string{"a", "b", "mmvq", StampUnit}
	if cold.Hit || f.calls.Load() != 4 || strings.Join(cold.Units, ",") != strings.Join(wantUnits, ",") || len(cold.Images) != 4 {
		t.Fatalf("cold: hit %v, %d compiles, units %q, %d images; want a miss compiling %q", cold.Hit, f.calls.Load(), cold.Units, len(cold.Images), wantUnits)
	}
	if p := f.peak.Load(); p > 2 {
		t.Errorf("%d units compiled at once, Parallel is 2", p)
	}
	progress := 0
	for _, l := range *logs {
		if strings.Contains(l, "] compiled ") {
			progress++
		}
	}
	if progress != 4 {
		t.Errorf("%d progress lines, want one per unit (4):\n%s", progress, strings.Join(*logs, "\n"))
	}
	stampImg := string(cold.Images[3])
	if !strings.Contains(stampImg, `extern "C" __device__ char minfer_kernels_stamp[] = "minfer-kernels-stamp v1\nsource_sha256=`+cfg.SourceHash+`\ncompiler=NVRTC 13.0\nflags=--gpu-architecture=sm_90a`) {
		t.Errorf("the stamp unit's source:\n%s", stampImg)
	}
	if !strings.HasSuffix(cold.Flags, " split=1") || !strings.Contains(cold.Stamp, "flags="+cold.Flags+"\n") {
		t.Errorf("flags %q, stamp %q", cold.Flags, cold.Stamp)
	}
	if !strings.Contains(string(cold.Images[2]), "#include \"mmvq.cu\"\n#include \"mmvq_nt.cu\"") {
		t.Errorf("the mmvq unit's source:\n%s", cold.Images[2])
	}

	warm, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !warm.Hit || f.calls.Load() != 4 {
		t.Fatalf("second build: hit %v after %d compiles, want a hit compiling nothing", warm.Hit, f.calls.Load())
	}
	for i := range cold.Images {
		if string(warm.Images[i]) != string(cold.Images[i]) {
			t.Errorf("image %d differs between the cold build and the cache", i)
		}
	}
	if warm.Manifest != filepath.Join(warm.Dir, "manifest.json") || warm.Dir != cold.Dir {
		t.Errorf("entry %s / %s, cold %s", warm.Dir, warm.Manifest, cold.Dir)
	}
}

// The key changes with each of its inputs, and only the same inputs hit.
func TestKey_ChangesWithEachInput(t *testing.T) {
	src, opts, arch, comp := strings.Repeat("ab", 32), Options("sm_90a", nil), "sm_90a", "NVRTC 13.0"
	base := Key(src, opts, arch, comp)
	if Key(src, Options("sm_90a", nil), arch, comp) != base {
		t.Fatal("the same inputs give another key")
	}
	for name, k := range map[string]string{
		"source hash":  Key(strings.Repeat("cd", 32), opts, arch, comp),
		"options":      Key(src, append(Options("sm_90a", nil), "--include-path=/x"), arch, comp),
		"architecture": Key(src, opts, "sm_89", comp),
		"NVRTC":        Key(src, opts, arch, "NVRTC 12.8"),
	} {
		if k == base {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
	if Key(src, []string{"--a --b"}, arch, comp) == Key(src, []string{"--a", "--b"}, arch, comp) {
		t.Error("two options and one option with a space share a key")
	}
}

// A cache entry that is corrupt or partial (a cubin changed, truncated or
// gone, the manifest garbled, truncated or of another build) is rebuilt,
// never loaded, and the rebuilt entry hits again.
func TestBuild_CorruptOrPartialCacheEntryIsRebuilt(t *testing.T) {
	damage := map[string]func(t *testing.T, dir string){
		"cubin byte flipped": func(t *testing.T, dir string) { editCubin(t, dir, func(b []byte) []byte { b[0] ^= 1; return b }) },
		"cubin truncated":    func(t *testing.T, dir string) { editCubin(t, dir, func(b []byte) []byte { return b[:len(b)/2] }) },
		"cubin removed": func(t *testing.T, dir string) {
			if err := os.Remove(firstCubin(t, dir)); err != nil {
				t.Fatal(err)
			}
		},
		"manifest garbled": func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "manifest.json"), "{not json") },
		"manifest truncated": func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
			writeFile(t, filepath.Join(dir, "manifest.json"), string(b[:len(b)/2]))
		},
		"manifest of another build": func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
			writeFile(t, filepath.Join(dir, "manifest.json"), strings.Replace(string(b), "NVRTC 13.0", "NVRTC 12.0", 1))
		},
		"manifest escapes the entry": func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
			writeFile(t, filepath.Join(dir, "manifest.json"), strings.Replace(string(b), `"cubin": "a-`, `"cubin": "../a-`, 1))
		},
	}
	for name, spoil := range damage {
		t.Run(name, func(t *testing.T) {
			f := &fakeCompiler{}
			cfg, cold, logs := coldBuild(t, f)
			spoil(t, cold.Dir)
			re, err := Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if re.Hit || f.calls.Load() != 8 {
				t.Fatalf("after %s: hit %v, %d compiles; want a rebuild (8)", name, re.Hit, f.calls.Load())
			}
			if !strings.Contains(strings.Join(*logs, "\n"), "unusable") {
				t.Errorf("the rebuild does not say why:\n%s", strings.Join(*logs, "\n"))
			}
			for i := range cold.Images {
				if string(re.Images[i]) != string(cold.Images[i]) {
					t.Errorf("image %d: the rebuild differs", i)
				}
			}
			if again, err := Build(cfg); err != nil || !again.Hit {
				t.Errorf("after the rebuild: hit %v, %v; want a hit", again != nil && again.Hit, err)
			}
		})
	}
}

// A unit that does not compile fails the build naming it, with NVRTC's log
// and the hint about the toolkit headers, and caches nothing.
func TestBuild_FailedUnitNamesItAndCachesNothing(t *testing.T) {
	f := &fakeCompiler{fail: map[string]bool{"b": true}}
	cfg := testConfig(t, f)
	_, err := Build(cfg)
	if err == nil {
		t.Fatal("a failed unit built")
	}
	msg := err.Error()
	for _, want := range []string{"1 of 4 kernel units", "unit b (b.cu)", "cannot open source file", "NVRTC 13.0", "--include-path=/usr/local/cuda/include", "scripts/build-kernels.sh"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if ents, _ := os.ReadDir(cfg.CacheDir); len(ents) != 0 {
		t.Errorf("a failed build left %d cache entries", len(ents))
	}
}

func firstCubin(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "a-*.cubin"))
	if err != nil || len(m) != 1 {
		t.Fatalf("cubin of unit a: %v %v", m, err)
	}
	return m[0]
}

func editCubin(t *testing.T, dir string, edit func([]byte) []byte) {
	t.Helper()
	p := firstCubin(t, dir)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, p, string(edit(b)))
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// With fewer workers than units the largest units start first (the
// slowest compile is not the last to begin); images stay in unit order.
func TestBuild_LargestUnitsStartFirst(t *testing.T) {
	var mu sync.Mutex
	var started []string
	f := &fakeCompiler{}
	cfg := testConfig(t, f)
	cfg.Sources = fstest.MapFS{"a.cu": {Data: []byte("a")}, "big.cu": {Data: []byte(strings.Repeat("x", 100))}, "mid.cu": {Data: []byte("0123456789")}}
	cfg.Parallel = 1
	cfg.Compile = func(name, source string, headers []Header, options []string) ([]byte, string, error) {
		mu.Lock()
		started = append(started, name)
		mu.Unlock()
		return f.compile(name, source, headers, options)
	}
	res, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(started, ","); got != "big,mid,a,stamp" {
		t.Errorf("units started %s, want big,mid,a,stamp", got)
	}
	if got := strings.Join(res.Units, ","); got != "a,big,mid,stamp" {
		t.Errorf("images in order %s, want a,big,mid,stamp", got)
	}
}

// An NVRTC 11 cannot build sm_90a: one error naming the version and the
// two ways out, before any unit is compiled.
func TestBuildEmbedded_NVRTC11RefusesAnArchitectureSpecificTarget(t *testing.T) {
	lib := &Lib{path: "/x/libnvrtc.so.11.2", major: 11, minor: 8}
	_, err := BuildEmbedded(lib, "sm_90a", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "11.8") || !strings.Contains(err.Error(), "NVRTC 12.0 or later") || !strings.Contains(err.Error(), "MINFER_KERNELS") {
		t.Fatalf("NVRTC 11.8, sm_90a: %v", err)
	}
}

package gates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/harness"
	"github.com/minfer-go/minfer/harness/profile"
	"github.com/minfer-go/minfer/schema"
)

// sassListing is a cuobjdump --dump-sass listing of one function.
func sassListing(fn, op string) string {
	return "\tcode for sm_90a\n\t\tFunction : " + fn + "\n" +
		"        /*0000*/                   " + op + " R0, R2, R4, R0 ;          /* 0x0000 */\n"
}

// fakeCuobjdump puts a cuobjdump on PATH that prints the listing saved
// beside the file it is given (F.sass), and fails for a file without one.
func fakeCuobjdump(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n[ \"$1\" = --dump-sass ] && [ -f \"$2.sass\" ] && exec cat \"$2.sass\"\necho \"cuobjdump: $2: no listing\" >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "cuobjdump"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// With no fatbin given or beside minfer, the SASS census reads the NVRTC
// build the arms' benches loaded (every cubin of its cache entry), so an A/B
// on NVRTC's kernels still gets its SASS evidence; a bench that names no
// NVRTC build leaves the evidence missing, never invented.
func TestSASS_ReadsTheArmsNVRTCBuildWhenNoFatbinIsGiven(t *testing.T) {
	fakeCuobjdump(t)
	bin := t.TempDir()
	env := &Env{M: harness.Minfer{R: &harness.Runner{Bin: filepath.Join(bin, "minfer")}}}
	entry := t.TempDir()
	manifest := filepath.Join(entry, "manifest.json")
	writeFile(t, manifest, "{}")
	for unit, fn := range map[string]string{"gemm16": "minfer_gemm16_q8_0r", "mmq": "minfer_mmq_q8_0"} {
		cubin := filepath.Join(entry, unit+".cubin")
		writeFile(t, cubin, "cubin")
		writeFile(t, cubin+".sass", sassListing(fn, "HMMA.16816.F32"))
	}
	switched := []profile.CensusDiff{{Kernel: "minfer_gemm16_q8_0r"}}
	nvrtc := &schema.Kernels{Path: manifest}

	d := &ProfileDetail{}
	sass(context.Background(), Config{}, env, d, switched, nil, nvrtc)
	if len(d.SASS) != 1 || d.SASS[0].Name != "minfer_gemm16_q8_0r" || !d.SASS[0].Has("HMMA") || !strings.Contains(d.SASSNote, "2 cubins of the NVRTC build") {
		t.Fatalf("NVRTC build: SASS %+v, note %q", d.SASS, d.SASSNote)
	}

	// A fatbin beside minfer is still what the census reads first.
	fat := filepath.Join(bin, "minfer-kernels.fatbin")
	writeFile(t, fat, "fatbin")
	writeFile(t, fat+".sass", sassListing("minfer_gemm16_q8_0r", "IMMA.16832.S8.S8"))
	d = &ProfileDetail{}
	sass(context.Background(), Config{}, env, d, switched, nvrtc)
	if len(d.SASS) != 1 || !d.SASS[0].Has("IMMA") || !strings.Contains(d.SASSNote, "minfer-kernels.fatbin") {
		t.Fatalf("fatbin beside minfer: SASS %+v, note %q", d.SASS, d.SASSNote)
	}
	if err := os.Remove(fat); err != nil {
		t.Fatal(err)
	}

	for name, arms := range map[string][]*schema.Kernels{
		"no kernels named":     {nil, nil},
		"an nvcc file":         {{Path: filepath.Join(entry, "other.fatbin")}},
		"an empty NVRTC entry": {{Path: filepath.Join(t.TempDir(), "manifest.json")}},
	} {
		d = &ProfileDetail{}
		sass(context.Background(), Config{}, env, d, switched, arms...)
		if len(d.SASS) != 0 || d.SASSNote == "" || strings.Contains(d.SASSNote, "matched") {
			t.Errorf("%s: SASS %+v, note %q", name, d.SASS, d.SASSNote)
		}
	}
	// A cubin cuobjdump cannot read is named, not skipped.
	writeFile(t, filepath.Join(entry, "zz.cubin"), "cubin")
	d = &ProfileDetail{}
	sass(context.Background(), Config{}, env, d, switched, nvrtc)
	if len(d.SASS) != 0 || !strings.Contains(d.SASSNote, "zz.cubin") {
		t.Errorf("unreadable cubin: SASS %+v, note %q", d.SASS, d.SASSNote)
	}
}

// The census bench's document names the kernels file it loaded; the
// evidence keeps it for the SASS census.
func TestArmCensus_RecordsTheKernelsFileTheBenchLoaded(t *testing.T) {
	cfg := leverCfg(t, "MINFER_MMQ")
	cfg.TmpDir = t.TempDir()
	in, err := armCensus(context.Background(), cfg, &Env{M: fake(t), HasGPU: true}, cfg.B)
	if err != nil {
		t.Fatal(err)
	}
	if in.Kernels == nil || in.Kernels.Path != "fake.fatbin" {
		t.Fatalf("kernels %+v", in.Kernels)
	}
}

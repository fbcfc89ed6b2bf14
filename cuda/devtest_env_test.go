package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// A device test's own setting must not be named MINFER_*: every engine the
// suite opens parses the environment (levers.Parse), which refuses an
// unknown MINFER_ name, so the setting fails the test that reads it. Seen on
// the H200 (2026-12-02): MINFER_SESSION_BENCH=... ended the 32K session
// measurement with "unknown lever".
func TestDeviceTests_EnvSettingsAreLeversOrNotMinferNamed(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	getenv := regexp.MustCompile(`(?:Getenv|LookupEnv)\("(MINFER_[A-Z0-9_]+)"\)`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range getenv.FindAllSubmatch(src, -1) {
			if _, ok := levers.Lookup(string(m[1])); !ok {
				t.Errorf("%s reads %s, which is no lever: levers.Parse refuses it in every engine the test opens; name it without MINFER_", f, m[1])
			}
		}
	}
}

// The settings the device tests pin (MINFER_NAME=VALUE literals and the
// shared pin sets) are levers at values they accept, and the shared sets
// mean what their names say: a typo would surface only on the GPU, where
// levers.Parse refuses it, or not at all (a valid lever at a value that
// pins nothing).
func TestDeviceTests_PinnedSettingsAreLeverValues(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`"(MINFER_[A-Z0-9_]+=[A-Za-z0-9_.:]+)"`)
	n := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range setting.FindAllSubmatch(src, -1) {
			n++
			if _, err := levers.Parse([]string{string(m[1])}); err != nil {
				t.Errorf("%s pins %s: %v", f, m[1], err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no MINFER_NAME=VALUE setting found in the test files")
	}
	parse := func(name string, set []string) levers.Config {
		t.Helper()
		c, err := levers.Parse(set)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c
	}
	if c := parse("dsMMVQ", dsMMVQ); c.NoQ80MMVQ || c.NoQ40MMVQ || c.NoKQMMVQ || len(c.Set()) != 3 {
		t.Errorf("dsMMVQ %v does not turn every MMVQ kill switch off", dsMMVQ)
	}
	if c := parse("dsNoMMVQ", dsNoMMVQ); !c.NoQ80MMVQ || !c.NoQ40MMVQ || !c.NoKQMMVQ {
		t.Errorf("dsNoMMVQ %v does not set every MMVQ kill switch", dsNoMMVQ)
	}
	if c := parse("dsOneWarpDecode", dsOneWarpDecode); c.NoQ80MMVQ || c.NoQ40MMVQ || c.NoKQMMVQ || c.MMVQSplit || len(c.Set()) != 4 {
		t.Errorf("dsOneWarpDecode %v does not pin the one-warp MMVQ kernels", dsOneWarpDecode)
	}
	if c := parse("dsGraphsOn", dsGraphsOn); c.NoCUDAGraph || len(c.Set()) != 1 {
		t.Errorf("dsGraphsOn %v does not pin graphs on", dsGraphsOn)
	}
}

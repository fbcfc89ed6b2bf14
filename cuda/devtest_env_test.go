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

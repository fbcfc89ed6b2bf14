package gates

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpandGlobs_ReportsPatternsThatMatchNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.test"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	bins, unmatched := expandGlobs([]string{filepath.Join(dir, "*.test"), filepath.Join(dir, "missing*.test")})
	if len(bins) != 1 || len(unmatched) != 1 || !strings.Contains(unmatched[0], "missing") {
		t.Fatalf("bins %v unmatched %v", bins, unmatched)
	}
}

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/cuda/kernels"
)

func stampText(source string) []byte {
	return []byte("minfer-kernels-stamp v1\nsource_sha256=" + source + "\ncompiler=Cuda compilation tools, release 13.0\nflags=-fatbin -O3 split=0\n\x00")
}

// Issue 25: a kernels file built from other sources (a source changed
// after the build), or with no stamp at all, is refused in one line that
// names both hashes and the rebuild command; the file of this binary's
// sources loads.
func TestCheckStamp_StaleOrUnstampedKernelsFileIsRefusedNamingBothHashes(t *testing.T) {
	ours := kernels.SourceHash()
	stale := strings.Repeat("ab", 32)
	const path = "bin/minfer-kernels.fatbin"

	st, err := checkStamp(path, stampText(ours), ours)
	if err != nil || st.Source != ours || st.Compiler != "Cuda compilation tools, release 13.0" || st.Flags != "-fatbin -O3 split=0" {
		t.Fatalf("this binary's file: %+v, %v", st, err)
	}
	for name, raw := range map[string][]byte{"stale": stampText(stale), "unstamped": nil, "garbled": []byte("hello\x00")} {
		_, err := checkStamp(path, raw, ours)
		if !errors.Is(err, ErrStaleKernels) {
			t.Fatalf("%s: %v, want ErrStaleKernels", name, err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, ours[:16]) && name != "garbled" || !strings.Contains(msg, "scripts/build-kernels.sh "+path) {
			t.Errorf("%s: %q: want one line naming this binary's sources and the rebuild command", name, msg)
		}
		if name == "stale" && !strings.Contains(msg, stale[:16]) {
			t.Errorf("stale: %q does not name the file's hash", msg)
		}
	}
}

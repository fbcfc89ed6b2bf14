package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/gates"
)

// TestRealMinfer_MutationsTurnTheirGatesRed builds the real minfer and runs
// tiny lever runs against its embedded model: perturb_logit must turn greedy
// red and skip_bias parity. Skipped with -short or while the engine cannot
// generate yet.
func TestRealMinfer_MutationsTurnTheirGatesRed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the real minfer (-short)")
	}
	bin := filepath.Join(t.TempDir(), "minfer")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/minfer-go/minfer/cmd/minfer").CombinedOutput(); err != nil {
		t.Skipf("cmd/minfer does not build right now: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "generate", "--greedy", "-n", "2", "--json", "hi").CombinedOutput(); err != nil {
		t.Skipf("minfer cannot generate yet: %s", strings.TrimSpace(string(out)))
	}
	code, rec := runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "greedy", "--mutate", "perturb_logit", "--prompts", "testdata/short_prompts.txt")
	if code != 1 || status(rec, "greedy") != gates.Fail {
		t.Errorf("perturb_logit: exit %d, %s", code, rec.VerdictLine)
	}
	code, rec = runAbtest(t, bin, "--lever", "MINFER_NO_FUSE_QKV", "--gates", "parity", "--mutate", "skip_bias")
	if code != 1 || status(rec, "parity") != gates.Fail {
		t.Errorf("skip_bias: exit %d, %s", code, rec.VerdictLine)
	}
}

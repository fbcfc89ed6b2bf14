package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
)

// An explicit MINFER_ONE_COPY=1 is refused, naming the setting, under every
// lever value that routes a Q8_0 / Q6_K matmul to a kernel reading GGUF
// bytes (each of its registry Requires flipped), and accepted with the
// defaults, off, or left at its default (which yields).
func TestOneCopyConflict_EveryRequiresFlippedIsRefusedByName(t *testing.T) {
	parse := func(env ...string) levers.Config { return ocParse(t, env...) }
	if err := oneCopyConflict(parse("MINFER_ONE_COPY=1")); err != nil {
		t.Errorf("defaults: %v", err)
	}
	l, _ := levers.Lookup("MINFER_ONE_COPY")
	if len(l.Requires) < 7 {
		t.Fatalf("MINFER_ONE_COPY requires %v: want the seven routing settings", l.Requires)
	}
	for _, r := range l.Requires {
		name, want, _ := strings.Cut(r, "=")
		other := "1"
		if want == "1" {
			other = "0"
		}
		if err := oneCopyConflict(parse(name + "=" + other)); err != nil {
			t.Errorf("lever off, %s=%s: %v", name, other, err)
		}
		err := oneCopyConflict(parse("MINFER_ONE_COPY=1", name+"="+other))
		if err == nil || !strings.Contains(err.Error(), name+"="+other) {
			t.Errorf("MINFER_ONE_COPY=1 with %s=%s: %v, want a refusal naming it", name, other, err)
		}
	}
}

// At its default the one-copy layout is on, and it yields to each setting
// of its Requires flipped (two copies, one log line naming the setting),
// except where no repacked copy is made at all (REPACK=0: one copy either
// way, nothing to say). Set to 0, it says nothing.
func TestOneCopyDefault_OnAndYieldsToEveryRequiresFlippedWithOneLine(t *testing.T) {
	parse := func(env ...string) levers.Config { return ocParse(t, env...) }
	if lv := parse(); !lv.OneCopy || oneCopyYielded(lv) != "" {
		t.Errorf("defaults: OneCopy %v, line %q", lv.OneCopy, oneCopyYielded(lv))
	}
	l, _ := levers.Lookup("MINFER_ONE_COPY")
	for _, r := range l.Requires {
		name, want, _ := strings.Cut(r, "=")
		other := map[string]string{"0": "1", "1": "0"}[want]
		lv := parse(name + "=" + other)
		if lv.OneCopy {
			t.Errorf("%s=%s: the default one copy did not yield", name, other)
		}
		line := oneCopyYielded(lv)
		noCopy := name == "MINFER_MMVQ_REPACK"
		if noCopy && line != "" || !noCopy && !strings.Contains(line, name+"="+other) {
			t.Errorf("%s=%s: line %q", name, other, line)
		}
		if line := oneCopyYielded(parse("MINFER_ONE_COPY=0", name+"="+other)); line != "" {
			t.Errorf("MINFER_ONE_COPY=0, %s=%s: line %q", name, other, line)
		}
	}
}

// ocParse is levers.Parse of env, a test failure on an error.
func ocParse(t *testing.T, env ...string) levers.Config {
	t.Helper()
	lv, err := levers.Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	return lv
}

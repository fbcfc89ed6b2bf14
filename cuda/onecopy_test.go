package cuda

import (
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/quant"
)

// MINFER_ONE_COPY=1 is refused, naming the setting, under every lever value
// that routes a Q8_0 / Q6_K matmul to a kernel reading GGUF bytes (each of
// its registry Requires flipped), and accepted with the defaults or off.
func TestOneCopyConflict_EveryRequiresFlippedIsRefusedByName(t *testing.T) {
	parse := func(env ...string) levers.Config {
		lv, err := levers.Parse(env)
		if err != nil {
			t.Fatal(err)
		}
		return lv
	}
	if err := oneCopyConflict(parse("MINFER_ONE_COPY=1")); err != nil {
		t.Errorf("defaults: %v", err)
	}
	l, _ := levers.Lookup("MINFER_ONE_COPY")
	if len(l.Requires) < 8 {
		t.Fatalf("MINFER_ONE_COPY requires %v: want the eight routing settings", l.Requires)
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

// The repacked MMQ kernels are named per tile and exist for Q8_0 and Q6_K
// only, never async.
func TestMMQPlan_RepackedKernelNames(t *testing.T) {
	for _, c := range []struct {
		p    mmqPlan
		t    quant.Type
		want string
	}{
		{mmqPlan{rows: mmqRows, repacked: true}, quant.Q8_0, "minfer_mmq_q8_0r"},
		{mmqPlan{rows: mmqRowsSmall, repacked: true}, quant.Q6_K, "minfer_mmq_q6_kr_r64"},
		{mmqPlan{rows: mmqRows, repacked: true}, quant.Q4_K, ""},
		{mmqPlan{rows: mmqRows, repacked: true, async: true}, quant.Q8_0, ""},
		{mmqPlan{rows: mmqRows}, quant.Q8_0, "minfer_mmq_q8_0"},
	} {
		if got := c.p.kernel(c.t); got != c.want {
			t.Errorf("%+v %s: %q, want %q", c.p, c.t, got, c.want)
		}
	}
}

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
	"github.com/minfer-go/minfer/engine/model"
)

// sweepOnce loads the model on CUDA with one driver call failing once
// (MINFER_TEST_CALL_FAIL=NAME@1), runs a prefill and enough decode steps
// to capture and replay the decode graph, and closes the engine. It
// returns how many calls the seam failed (-1: no backend was built to
// ask) and the first error.
func sweepOnce(path, seam string) (int64, error) {
	lv, err := levers.Parse([]string{"MINFER_TEST_CALL_FAIL=" + seam})
	if err != nil {
		return -1, err
	}
	var be *Backend
	e, err := model.Load(path, model.Options{Device: "cuda", NCtx: 64, Levers: lv,
		NewDevice: func(lv levers.Config, logf func(string, ...any)) (graph.Backend, error) {
			b, err := New(Options{Levers: lv, Logf: logf})
			be = b
			return b, err
		}})
	injected := func() int64 {
		if be == nil {
			return -1
		}
		return be.InjectedFailures()
	}
	if err != nil {
		return injected(), err
	}
	in := []int32{10, 200, 33, 7, 99}
	for step := 0; step < 8 && err == nil; step++ {
		var l []float32
		if l, err = e.Forward(in, false); err == nil {
			in = []int32{int32(dsArgmax(l))}
		}
	}
	n := injected()
	if be != nil && be.CaptureStats().Fallbacks > 0 && err == nil {
		// A graph failure run on with direct launches (capture.go's
		// fallBack): absorbed by design, logged and counted.
		n = 0
	}
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// Issue 23 item 5 (the design's section 7.1): every driver call the
// backend makes, failed once, gives an error that names the call (or, for
// the graph machinery, a counted fallback to direct launches), never a
// hang, a panic or a silently absorbed failure; and device memory returns
// to where it was (except after a failed free, which leaks by
// construction).
func TestCallFailSweep_EachDriverCallFailedOnceIsANamedError(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	probe, err := driver.Open(driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	free := func() uint64 {
		var f uint64
		if err := probe.Do(func() (err error) { f, _, err = probe.MemInfo(); return err }); err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := free()
	for _, name := range driver.CallNames() {
		t.Run(name, func(t *testing.T) {
			type result struct {
				err error
				n   int64
			}
			done := make(chan result, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						done <- result{fmt.Errorf("panic: %v", p), -1}
					}
				}()
				n, err := sweepOnce(path, name+"@1")
				done <- result{err, n}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(90 * time.Second):
				t.Fatalf("%s@1: no answer in 90 s (a hang)", name)
			}
			stem := strings.TrimSuffix(name, "_v2")
			switch {
			case r.err != nil && strings.HasPrefix(r.err.Error(), "panic:"):
				t.Fatalf("%s@1: %v", name, r.err)
			case r.err != nil && !strings.Contains(r.err.Error(), stem):
				t.Errorf("%s@1: the error does not name the call: %v", name, r.err)
			case r.err == nil && r.n > 0:
				t.Errorf("%s@1: the failure was reached (%d injected) but no error came back: absorbed silently", name, r.n)
			case r.err == nil:
				t.Logf("%s: not called on this path", name)
			default:
				var de *driver.Error
				t.Logf("%s@1: %v (driver error: %v)", name, r.err, errors.As(r.err, &de))
			}
			if name == "cuMemFree_v2" || name == "cuMemFreeHost" {
				return // a failed free leaks what it held, by construction
			}
			if got := free(); base > got && base-got > 64<<20 {
				t.Errorf("%s@1: %d MiB of device memory not returned", name, (base-got)>>20)
			}
		})
	}
}

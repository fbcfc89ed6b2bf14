package cuda

import (
	"math"
	"testing"
)

// Issue 23 item 4 (the design's rule): a CUDA graph that fails in the graph
// machinery, not in a node (its capture cannot end, it cannot be
// instantiated, its first launch or a replay fails), turns graphs off for
// the session with one log line and the step carries on with direct
// launches: the logits are bitwise those of a run without graphs, and the
// census line counts the fallback. Graphs are pinned on (dsGraphsOn): with
// them off there is no graph to fail.
func TestCapture_FailedGraphFallsBackToDirectLaunchesBitwise(t *testing.T) {
	dsNeedDevice(t)
	path := dsSynth(t, "qwen2-tiny", "Q8_0")
	const n = 10
	_, want := dsGreedyLogits(t, dsEngine(t, path, "cuda", 128, "MINFER_NO_CUDA_GRAPH=1"), dsPrompt, n)
	for _, seam := range []string{"cuGraphLaunch@1", "cuGraphLaunch@2", "cuGraphInstantiateWithFlags@1", "cuStreamEndCapture@1"} {
		t.Run(seam, func(t *testing.T) {
			e := dsEngine(t, path, "cuda", 128, append([]string{"MINFER_TEST_CALL_FAIL=" + seam}, dsGraphsOn...)...)
			_, got := dsGreedyLogits(t, e, dsPrompt, n)
			for i := range want {
				for j := range want[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("step %d logit %d: %g after the fallback, %g without graphs", i, j, got[i][j], want[i][j])
					}
				}
			}
			b := dsDeviceBackend(t, e)
			st := b.CaptureStats()
			if st.Fallbacks != 1 || !st.Disabled || b.InjectedFailures() != 1 {
				t.Errorf("stats %+v, %d injected: want one fallback, graphs off, the one failure", st, b.InjectedFailures())
			}
		})
	}
}

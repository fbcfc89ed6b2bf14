package model

import (
	"testing"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// TestGraphParams_FuseFFNQ8FollowsItsLever: MINFER_FUSE_FFN_Q8 reaches
// graph.Params (off by default); the fuse pass itself needs the residual
// and FFN fusions as well (engine/graph's tests).
func TestGraphParams_FuseFFNQ8FollowsItsLever(t *testing.T) {
	h := HParams{Arch: Qwen2, NVocab: 8, NEmbd: 8, NLayer: 1, NHead: 2, NHeadKV: 1, HeadDim: 4, NFF: 32}
	for env, want := range map[string]bool{"": false, "MINFER_FUSE_FFN_Q8=0": false, "MINFER_FUSE_FFN_Q8=1": true} {
		var e []string
		if env != "" {
			e = []string{env}
		}
		lv, err := levers.Parse(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := GraphParams(h, 1, 16, false, kv.F32, lv).FuseFFNQ8; got != want {
			t.Errorf("%q: Params.FuseFFNQ8 %v, want %v", env, got, want)
		}
	}
}

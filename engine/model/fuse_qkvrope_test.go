package model

import (
	"testing"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// TestGraphParams_FuseQKVRopeFollowsItsLever: MINFER_FUSE_QKV_ROPE reaches
// graph.Params (off by default); the fuse pass itself needs the QKV fusion
// and a decode graph as well (engine/graph's tests).
func TestGraphParams_FuseQKVRopeFollowsItsLever(t *testing.T) {
	h := HParams{Arch: Qwen2, NVocab: 8, NEmbd: 8, NLayer: 1, NHead: 2, NHeadKV: 1, HeadDim: 4, NFF: 32}
	for env, want := range map[string]bool{"": false, "MINFER_FUSE_QKV_ROPE=0": false, "MINFER_FUSE_QKV_ROPE=1": true} {
		var e []string
		if env != "" {
			e = []string{env}
		}
		lv, err := levers.Parse(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := GraphParams(h, 1, 16, false, kv.F32, lv).FuseQKVRope; got != want {
			t.Errorf("%q: Params.FuseQKVRope %v, want %v", env, got, want)
		}
	}
}

package model

import (
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/levers"
)

// TestGraphParams_DecodeFusionLeversReachTheirParams: each opt-in decode
// fusion lever reaches its graph.Params field (off unset and at 0, on at
// 1); the fuse passes themselves need their other fusions and a decode
// graph as well (engine/graph's tests).
func TestGraphParams_DecodeFusionLeversReachTheirParams(t *testing.T) {
	h := HParams{Arch: Qwen2, NVocab: 8, NEmbd: 8, NLayer: 1, NHead: 2, NHeadKV: 1, HeadDim: 4, NFF: 32}
	for _, c := range []struct {
		lever string
		field func(graph.Params) bool
	}{
		{"MINFER_FUSE_QKV_ROPE", func(p graph.Params) bool { return p.FuseQKVRope }},
	} {
		for env, want := range map[string]bool{"": false, c.lever + "=0": false, c.lever + "=1": true} {
			var e []string
			if env != "" {
				e = []string{env}
			}
			lv, err := levers.Parse(e)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.field(GraphParams(h, 1, 16, false, kv.F32, lv)); got != want {
				t.Errorf("%s %q: the Params field %v, want %v", c.lever, env, got, want)
			}
		}
	}
}

package arch_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/model/arch"
	"github.com/minfer-go/minfer/engine/model/qwen2"
	_ "github.com/minfer-go/minfer/engine/model/qwen3"
)

func TestLookup_UnknownNamesItAndTheKnownOnes(t *testing.T) {
	if a, err := arch.Lookup("qwen3"); err != nil || a.Name != "qwen3" || a.Needs != arch.QKNorm {
		t.Fatalf("qwen3: %v %v", a, err)
	}
	_, err := arch.Lookup("llama")
	if err == nil || !strings.Contains(err.Error(), `"llama"`) || !strings.Contains(err.Error(), "qwen2, qwen3") {
		t.Fatalf("err = %v, want one naming llama and the registered architectures", err)
	}
	if got := arch.Names(); !slices.Equal(got, []string{"qwen2", "qwen3"}) {
		t.Errorf("Names() = %v", got)
	}
}

func TestRegister_TwiceOrIncompletePanics(t *testing.T) {
	for _, a := range []*arch.Arch{
		{Name: "qwen2", Tensors: qwen2.Tensors, Build: qwen2.Build},
		{Name: "nobuilder", Tensors: qwen2.Tensors},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%s) did not panic", a.Name)
				}
			}()
			arch.Register(a)
		}()
	}
}

func TestSpecs_RepeatTheLayerRunPerBlockAndSkipAbsentOptions(t *testing.T) {
	a, _ := arch.Lookup("qwen2")
	p := graph.Params{NVocab: 10, NEmbd: 8, NLayer: 2, NHead: 2, NHeadKV: 1, HeadDim: 4, NFF: 12, TiedOutput: true}
	var names []string
	for _, s := range a.Specs(p) {
		names = append(names, s.Name)
	}
	want := []string{"token_embd.weight"}
	for _, b := range []string{"blk.0.", "blk.1."} {
		for _, n := range []string{"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
			"ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"} {
			want = append(want, b+n)
		}
	}
	want = append(want, "output_norm.weight")
	if !slices.Equal(names, want) {
		t.Errorf("specs\n got %v\nwant %v", names, want)
	}
}

func TestTensorIs_MatchesEveryBlockOnly(t *testing.T) {
	for name, want := range map[string]bool{
		"blk.0.attn_q.bias": true, "blk.27.attn_q.bias": true, "attn_q.bias": false, "blk.x.attn_q.bias": false,
		"blk.0.attn_k.bias": false, "blk.0.attn_q.bias.x": false, "blk.0.1.attn_q.bias": false,
	} {
		if got := qwen2.AttnQBias.Is(name); got != want {
			t.Errorf("AttnQBias.Is(%q) = %v", name, got)
		}
	}
	if !qwen2.TokenEmbd.Is("token_embd.weight") || qwen2.TokenEmbd.Is("blk.0.token_embd.weight") {
		t.Error("a global tensor matches its own name only")
	}
}

package oracle

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/minfer-go/minfer/engine/gguf"
	"github.com/minfer-go/minfer/engine/quant"
)

// synthSpec is the shape of a synthetic model written by writeSynth.
type synthSpec struct {
	arch                               string // qwen2 or qwen3
	nEmbd, nLayer, nHead, nHeadKV, nFF int
	headDim                            int // 0: nEmbd/nHead, no key_length key
	tied                               bool
	ropeTheta                          float32
	seed                               uint64
}

// byteRunes is GPT-2's byte-level alphabet: byte b is written as rune
// byteRunes[b] in the vocabulary.
func byteRunes() [256]rune {
	var out [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			out[b] = rune(b)
		} else {
			out[b] = rune(256 + n)
			n++
		}
	}
	return out
}

// synthVocab is the 256 byte tokens, one merge ("Ġ t") and three control
// tokens, the last of them <|im_end|> (EOS).
func synthVocab() (tokens []string, types []int32, merges []string) {
	br := byteRunes()
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(br[b]))
		types = append(types, 1)
	}
	sp := string(br[' '])
	tokens = append(tokens, sp+"t")
	types = append(types, 1)
	merges = []string{sp + " t"}
	for _, s := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, 3)
	}
	return tokens, types, merges
}

// writeSynth writes a random-weight F32 model of the given shape to dir and
// returns its path. Norm weights are near 1, matrices scaled by 1/sqrt(cols)
// so activations stay O(1).
func writeSynth(t testing.TB, dir string, s synthSpec) string {
	t.Helper()
	r := rand.New(rand.NewPCG(s.seed, 99))
	tokens, types, merges := synthVocab()
	nVocab := len(tokens)
	hd := s.headDim
	w := gguf.NewWriter()
	a := s.arch + "."
	w.AddString("general.architecture", s.arch)
	w.AddString("general.name", "synth-"+s.arch)
	w.AddUint32(a+"context_length", 512)
	w.AddUint32(a+"embedding_length", uint32(s.nEmbd))
	w.AddUint32(a+"block_count", uint32(s.nLayer))
	w.AddUint32(a+"feed_forward_length", uint32(s.nFF))
	w.AddUint32(a+"attention.head_count", uint32(s.nHead))
	w.AddUint32(a+"attention.head_count_kv", uint32(s.nHeadKV))
	if hd != 0 {
		w.AddUint32(a+"attention.key_length", uint32(hd))
		w.AddUint32(a+"attention.value_length", uint32(hd))
	} else {
		hd = s.nEmbd / s.nHead
	}
	w.AddFloat32(a+"rope.freq_base", s.ropeTheta)
	w.AddFloat32(a+"attention.layer_norm_rms_epsilon", 1e-6)
	w.AddString("tokenizer.ggml.model", "gpt2")
	w.AddString("tokenizer.ggml.pre", "qwen2")
	w.AddStrings("tokenizer.ggml.tokens", tokens)
	w.AddInt32s("tokenizer.ggml.token_type", types)
	w.AddStrings("tokenizer.ggml.merges", merges)
	w.AddUint32("tokenizer.ggml.eos_token_id", uint32(nVocab-1))
	w.AddUint32("tokenizer.ggml.padding_token_id", uint32(nVocab-3))
	w.AddUint32("tokenizer.ggml.bos_token_id", uint32(nVocab-3))
	w.AddBool("tokenizer.ggml.add_bos_token", false)

	add := func(name string, dims ...int) {
		n := 1
		d := make([]uint64, len(dims))
		for i, x := range dims {
			n *= x
			d[i] = uint64(x)
		}
		buf := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			var v float64
			if len(dims) == 1 {
				v = 1 + 0.2*r.NormFloat64()
			} else {
				v = r.NormFloat64() / math.Sqrt(float64(dims[0]))
			}
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
		}
		if err := w.AddTensor(name, quant.F32, d, buf); err != nil {
			t.Fatal(err)
		}
	}
	nq, nkv := s.nHead*hd, s.nHeadKV*hd
	add("token_embd.weight", s.nEmbd, nVocab)
	for i := 0; i < s.nLayer; i++ {
		b := "blk." + strconv.Itoa(i) + "."
		add(b+"attn_norm.weight", s.nEmbd)
		add(b+"attn_q.weight", s.nEmbd, nq)
		add(b+"attn_k.weight", s.nEmbd, nkv)
		add(b+"attn_v.weight", s.nEmbd, nkv)
		if s.arch == "qwen2" {
			add(b+"attn_q.bias", nq)
			add(b+"attn_k.bias", nkv)
			add(b+"attn_v.bias", nkv)
		} else {
			add(b+"attn_q_norm.weight", hd)
			add(b+"attn_k_norm.weight", hd)
		}
		add(b+"attn_output.weight", nq, s.nEmbd)
		add(b+"ffn_norm.weight", s.nEmbd)
		add(b+"ffn_gate.weight", s.nEmbd, s.nFF)
		add(b+"ffn_up.weight", s.nEmbd, s.nFF)
		add(b+"ffn_down.weight", s.nFF, s.nEmbd)
	}
	add("output_norm.weight", s.nEmbd)
	if !s.tied {
		add("output.weight", s.nEmbd, nVocab)
	}
	path := filepath.Join(dir, s.arch+".gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	synthQwen2 = synthSpec{arch: "qwen2", nEmbd: 64, nLayer: 2, nHead: 4, nHeadKV: 2, nFF: 96, tied: true, ropeTheta: 10000, seed: 1}
	synthQwen3 = synthSpec{arch: "qwen3", nEmbd: 64, nLayer: 2, nHead: 4, nHeadKV: 1, nFF: 80, headDim: 32, tied: false, ropeTheta: 1e6, seed: 2}
)

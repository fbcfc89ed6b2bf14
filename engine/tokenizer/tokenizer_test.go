package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/minfer-go/minfer/engine/gguf"
)

var qwen struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

// qwenTokenizer loads the real Qwen2 tokenizer of the shared test model once,
// skipping the test when the model is absent.
func qwenTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	if _, err := os.Stat(modelPath); err != nil {
		t.Skipf("test model absent (%v): skipping real-vocabulary test", err)
	}
	qwen.once.Do(func() {
		f, err := gguf.Open(modelPath)
		if err != nil {
			qwen.err = err
			return
		}
		defer f.Close()
		qwen.tok, qwen.err = FromGGUF(f)
	})
	if qwen.err != nil {
		t.Fatal(qwen.err)
	}
	return qwen.tok
}

type vector struct {
	input string
	ids   []int32
}

func loadVectors(t *testing.T) []vector {
	inp, err := os.ReadFile(vectorsPath + ".inp")
	if err != nil {
		t.Skipf("test vectors absent (%v)", err)
	}
	out, err := os.ReadFile(vectorsPath + ".out")
	if err != nil {
		t.Fatal(err)
	}
	inputs := strings.Split(strings.TrimSuffix(string(inp), "\n__ggml_vocab_test__\n"), "\n__ggml_vocab_test__\n")
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(inputs) != len(lines) {
		t.Fatalf("%d inputs, %d expected lines", len(inputs), len(lines))
	}
	vs := make([]vector, len(inputs))
	for i := range inputs {
		vs[i].input = inputs[i]
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			vs[i].ids = append(vs[i].ids, int32(id))
		}
	}
	return vs
}

func TestEncodeQwen2_MatchesLlamaCppVocabVectors(t *testing.T) {
	tok := qwenTokenizer(t)
	vs := loadVectors(t)
	for i, v := range vs {
		got := tok.Encode(v.input, false)
		if !slices.Equal(got, v.ids) {
			t.Errorf("vector %d %q:\n got  %v\n want %v", i, v.input, got, v.ids)
		}
		// Again through the warm cache.
		if again := tok.Encode(v.input, false); !slices.Equal(again, got) {
			t.Errorf("vector %d %q: cached encode differs: %v", i, v.input, again)
		}
	}
	t.Logf("%d vectors", len(vs))
}

func TestDecodeQwen2_RoundTripsToNFC(t *testing.T) {
	tok := qwenTokenizer(t)
	inputs := []string{"e\u0301t\u00e9 cafe\u0301", "Ä\u0308", "한국어 \u1100\u1161"}
	for _, v := range loadVectors(t) {
		inputs = append(inputs, v.input)
	}
	for _, s := range inputs {
		if got, want := tok.Decode(tok.Encode(s, false)), norm.NFC.String(s); got != want {
			t.Errorf("decode(encode(%q)) = %q, want NFC %q", s, got, want)
		}
	}
}

func TestEncodeQwen2_ParsesSpecialTokensOnlyWhenAsked(t *testing.T) {
	tok := qwenTokenizer(t)
	start, ok1 := tok.ID("<|im_start|>")
	end, ok2 := tok.ID("<|im_end|>")
	if !ok1 || !ok2 || start != 151644 || end != 151645 {
		t.Fatalf("ChatML ids: %d %v %d %v", start, ok1, end, ok2)
	}
	text := "<|im_start|>user\nhi<|im_end|>"
	got := tok.Encode(text, true)
	want := slices.Concat([]int32{start}, tok.Encode("user\nhi", false), []int32{end})
	if !slices.Equal(got, want) {
		t.Fatalf("parseSpecial: got %v, want %v", got, want)
	}
	if want := []int32{151644, 872, 198, 6023, 151645}; !slices.Equal(got, want) {
		t.Fatalf("parseSpecial: got %v, want %v", got, want)
	}
	plain := tok.Encode(text, false)
	for _, id := range plain {
		if tok.Type(id) != TypeNormal {
			t.Fatalf("no parseSpecial: special id %d (%q) in %v", id, tok.Token(id), plain)
		}
	}
	if tok.Decode(plain) != text || tok.Decode(got) != text {
		t.Fatalf("decode: %q / %q", tok.Decode(plain), tok.Decode(got))
	}
	// Leftmost-longest, adjacent specials, a special at the very end, and
	// text that only starts like one.
	text = "<|im_start|><|im_end|>a<|im_e<tool_call></tool_call><|endoftext|>"
	got = tok.Encode(text, true)
	want = slices.Concat([]int32{start, end}, tok.Encode("a<|im_e", false), []int32{151657, 151658, 151643})
	if !slices.Equal(got, want) {
		t.Fatalf("%q: got %v, want %v", text, got, want)
	}
}

func TestTokenizerQwen2_MetadataAndEOG(t *testing.T) {
	tok := qwenTokenizer(t)
	if tok.NVocab() != 151936 || tok.Model() != "gpt2" || tok.Pre() != "qwen2" {
		t.Fatalf("nvocab %d model %q pre %q", tok.NVocab(), tok.Model(), tok.Pre())
	}
	if tok.BOS() != -1 || tok.AddBOS() || tok.EOS() != 151645 || tok.PAD() != 151643 {
		t.Fatalf("bos %d addbos %v eos %d pad %d", tok.BOS(), tok.AddBOS(), tok.EOS(), tok.PAD())
	}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, _ := tok.ID(s); !tok.IsEOG(id) {
			t.Errorf("%s (%d) is not EOG", s, id)
		}
	}
	for _, s := range []string{"<|im_start|>", "Hello", "<tool_call>"} {
		if id, _ := tok.ID(s); tok.IsEOG(id) {
			t.Errorf("%s (%d) is EOG", s, id)
		}
	}
	if got := string(tok.TokenBytes(9707)); got != "Hello" {
		t.Errorf("TokenBytes(9707) = %q", got)
	}
	if got := string(tok.TokenBytes(220)); got != " " || tok.Token(220) != "Ġ" {
		t.Errorf("token 220: %q / %q", got, tok.Token(220))
	}
	if tok.TokenBytes(-1) != nil || tok.TokenBytes(int32(tok.NVocab())) != nil || tok.Token(1<<30) != "" {
		t.Error("out-of-range ids must give nil / empty")
	}
}

func TestDecodeQwen2_KeepsInvalidUTF8Bytes(t *testing.T) {
	tok := qwenTokenizer(t)
	raw := "ok \xff\xfe\xc3 \xe2\x82 end\x80"
	var ids []int32
	for i := 0; i < len(raw); i++ {
		id := tok.byteTok[raw[i]]
		if id < 0 {
			t.Fatalf("no byte token for %#x", raw[i])
		}
		ids = append(ids, id)
	}
	if got := tok.Decode(ids); got != raw {
		t.Fatalf("Decode(byte tokens) = %q, want %q", got, raw)
	}
	// Encoding invalid UTF-8 keeps every byte too.
	if got := tok.Decode(tok.Encode(raw, false)); got != raw {
		t.Fatalf("Decode(Encode(%q)) = %q", raw, got)
	}
	// A character split across tokens: streaming bytes reassemble it.
	for _, c := range []string{"🦙", "\U0001FAE8", "\U00010348", "\U0001D518"} {
		ids = tok.Encode(c, false)
		if len(ids) < 2 {
			continue
		}
		var stream []byte
		for _, id := range ids {
			stream = append(stream, tok.TokenBytes(id)...)
		}
		if string(stream) != c || utf8.Valid(tok.TokenBytes(ids[0])) {
			t.Fatalf("%q -> %v, stream %q", c, ids, stream)
		}
		return
	}
	t.Fatal("no test character splits across tokens")
}

// toyVocab is a small byte-level vocabulary with every byte, a few merges
// and special tokens, for tests that need no model file.
func toyVocab() Vocab {
	v := Vocab{Model: "gpt2", Pre: "qwen2", BOS: -1, EOS: -1, PAD: -1}
	for b := range 256 {
		v.Tokens = append(v.Tokens, string(byteToRune[b]))
	}
	merge := func(a, b string) {
		v.Merges = append(v.Merges, a+" "+b)
		if !slices.Contains(v.Tokens, a+b) {
			v.Tokens = append(v.Tokens, a+b)
		}
	}
	merge("a", "a")
	merge("aa", "aa")
	merge("b", "a")
	merge("a", "b")
	merge("ab", "ab")
	merge("aaaa", "aaaa")
	merge("Ġ", "a")
	merge("ba", "aa")
	merge("aa", "a")
	v.Types = make([]int32, len(v.Tokens))
	for i := range v.Types {
		v.Types[i] = TypeNormal
	}
	for _, s := range []string{"<s>", "<|x|>", "<|xy|>"} {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, TypeControl)
	}
	v.EOS = int32(len(v.Tokens) - 3)
	return v
}

func TestBPE_HeapMatchesFlatMerge(t *testing.T) {
	tok, err := New(toyVocab())
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	letters := "aab \xff"
	for n := 2; n <= smallPiece; n++ {
		for range 200 {
			b := make([]byte, n)
			for i := range b {
				b[i] = letters[r.IntN(len(letters))]
			}
			flat := tok.bpe(nil, string(b))
			heap := tok.bpeHeap(nil, string(b))
			if !slices.Equal(flat, heap) {
				t.Fatalf("%q: flat %v, heap %v", b, flat, heap)
			}
			if got := tok.Decode(heap); got != string(b) {
				t.Fatalf("%q decodes to %q", b, got)
			}
		}
	}
	// Lowest rank first: "baa" -> "b" "aa" (a+a outranks b+a).
	aa, _ := tok.ID("aa")
	aaaa, _ := tok.ID("aaaa")
	b, a := tok.byteTok['b'], tok.byteTok['a']
	if got := tok.bpe(nil, "baa"); !slices.Equal(got, []int32{b, aa}) {
		t.Fatalf("baa -> %v, want %v", got, []int32{b, aa})
	}
	// Leftmost first among equal ranks: "aaaaa" -> "aaaa" "a", not "a" "aaaa".
	for _, f := range []func([]int32, string) []int32{tok.bpe, tok.bpeHeap} {
		if got := f(nil, "aaaaa"); !slices.Equal(got, []int32{aaaa, a}) {
			t.Fatalf("aaaaa -> %v, want %v", got, []int32{aaaa, a})
		}
	}
}

func TestEncodeToy_SpecialTokensLongestMatchAndPlainText(t *testing.T) {
	tok, err := New(toyVocab())
	if err != nil {
		t.Fatal(err)
	}
	x, _ := tok.ID("<|x|>")
	xy, _ := tok.ID("<|xy|>")
	s, _ := tok.ID("<s>")
	got := tok.Encode("<|xy|><|x|>a<s>", true)
	if want := []int32{xy, x, tok.byteTok['a'], s}; !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
	if !tok.IsEOG(s) || tok.IsEOG(x) {
		t.Fatalf("EOG: %v", tok.EOG())
	}
	plain := tok.Encode("<s>", false)
	if len(plain) != 3 || tok.Decode(plain) != "<s>" {
		t.Fatalf("plain: %v", plain)
	}
}

func TestNew_RefusesUnsupportedModelsByName(t *testing.T) {
	for _, tc := range []struct{ model, pre, want string }{
		{"llama", "qwen2", `"llama"`},
		{"gpt2", "deepseek-llm", `"deepseek-llm"`},
		{"gpt2", "", `""`},
	} {
		v := toyVocab()
		v.Model, v.Pre = tc.model, tc.pre
		_, err := New(v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s/%s: err %v, want it to name %s", tc.model, tc.pre, err, tc.want)
		}
	}
	for _, pre := range []string{"gpt2", "default"} {
		v := toyVocab()
		v.Pre = pre
		if _, err := New(v); err != nil {
			t.Errorf("pre %s: %v", pre, err)
		}
	}
	v := toyVocab()
	v.Types = v.Types[:3]
	if _, err := New(v); err == nil {
		t.Error("short token types accepted")
	}
	v = toyVocab()
	v.EOS = int32(len(v.Tokens))
	if _, err := New(v); err == nil {
		t.Error("out-of-range EOS accepted")
	}
}

func TestEncodeQwen2_ConcurrentCallsAgree(t *testing.T) {
	tok := qwenTokenizer(t)
	text := mixedText(64 << 10)
	want := tok.Encode(text, true)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3 {
				if got := tok.Encode(text, true); !slices.Equal(got, want) {
					errs <- fmt.Errorf("goroutine %d round %d differs", g, k)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if tok.Decode(want) != norm.NFC.String(text) {
		t.Error("mixed text does not round-trip")
	}
}

// User-defined tokens (<think>, <tool_call>) are matched even without special
// parsing, as llama.cpp and HF do; control tokens are not.
func TestEncodeQwen2_UserDefinedTokensMatchWithoutSpecialParsing(t *testing.T) {
	tok := qwenTokenizer(t)
	think, ok := tok.ID("<think>")
	if !ok || tok.Type(think) != TypeUserDefined {
		t.Fatalf("<think>: id %d ok %v type %d", think, ok, tok.Type(think))
	}
	got := tok.Encode("<think>x<|im_end|>", false)
	if got[0] != think {
		t.Fatalf("<think> not matched as one token: %v", got)
	}
	end, _ := tok.ID("<|im_end|>")
	if slices.Contains(got, end) {
		t.Fatalf("control token <|im_end|> matched without special parsing: %v", got)
	}
}

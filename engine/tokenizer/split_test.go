package tokenizer

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// oracleSplit returns the match boundaries of pattern over s, in runes, as
// regexp2 (the .NET-semantics engine with lookahead) finds them.
func oracleSplit(t testing.TB, re *regexp2.Regexp, s string) [][2]int {
	t.Helper()
	var out [][2]int
	m, err := re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, [2]int{m.Index, m.Index + m.Length})
	}
	if err != nil {
		t.Fatalf("regexp2: %v", err)
	}
	return out
}

// handSplit returns the piece boundaries of split over s, in runes (an
// invalid UTF-8 byte counts as one rune, as in []rune(s)).
func handSplit(split func(string, int) int, s string) [][2]int {
	var out [][2]int
	runes := 0
	for i := 0; i < len(s); {
		j := split(s, i)
		if j <= i || j > len(s) {
			panic("splitter made no progress")
		}
		n := 0
		for k := i; k < j; {
			_, sz := utf8.DecodeRuneInString(s[k:j])
			k += sz
			n++
		}
		out = append(out, [2]int{runes, runes + n})
		runes += n
		i = j
	}
	return out
}

// splitAlphabet covers every class boundary of the patterns: ASCII classes,
// the contraction letters in both cases, all \s members that are not ASCII,
// letters that case-fold oddly (ſ, K, İ), Nl/No numbers, combining and
// format marks (neither L nor N), emoji, and invalid UTF-8 bytes.
var splitAlphabet = []string{
	"a", "b", "z", "Q", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D",
	"'", "'", "'", "0", "7", "9", " ", " ", " ", " ", "\t", "\n", "\n", "\r", "\v", "\f",
	"!", ".", ",", "(", ")", "_", "-", "=", "\"", "#", "~",
	"\u0085", "\u00a0", "\u1680", "\u2000", "\u2009", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff",
	"é", "ß", "ſ", "\u212a", "İ", "Ä", "我", "工", "ក", "ា", "н", "\u0301", "\u200d", "\ufe0f",
	"²", "½", "Ⅻ", "٣", "🦙", "😁", "🚀", "\ufffd", "\xff", "\xc3", "\xe2\x82",
}

func randomSplitInput(r *rand.Rand) string {
	var b strings.Builder
	n := r.IntN(24)
	for range n {
		b.WriteString(splitAlphabet[r.IntN(len(splitAlphabet))])
	}
	return b.String()
}

func splitCorpus(t testing.TB) []string {
	inputs := []string{
		"", "'s", "'S", "'ll", "'LL", "'lL", "'ve", "'re", "'x", "''s", "'ſ", "a's", "!'s",
		"   ", "  \n  x", " \n\n \t", "\r\n", "x  ", "x \t y", " !!", " (", "\n =", "3333",
		"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
	}
	if data, err := os.ReadFile(vectorsPath + ".inp"); err == nil {
		inputs = append(inputs, strings.Split(string(data), "\n__ggml_vocab_test__\n")...)
	}
	if data, err := os.ReadFile("split.go"); err == nil {
		inputs = append(inputs, string(data))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		inputs = append(inputs, randomSplitInput(r))
	}
	return inputs
}

func testSplitterMatchesRegexp2(t *testing.T, pattern string, split func(string, int) int) {
	re := regexp2.MustCompile(pattern, regexp2.None)
	for _, s := range splitCorpus(t) {
		want := oracleSplit(t, re, s)
		got := handSplit(split, s)
		if len(got) != len(want) {
			t.Fatalf("%q: got %v pieces %v, regexp2 %v", s, len(got), got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: piece %d: got %v, regexp2 %v (all: %v vs %v)", s, i, got[i], want[i], got, want)
			}
		}
	}
}

func TestSplitQwen2_MatchesRegexp2Exactly(t *testing.T) {
	testSplitterMatchesRegexp2(t, qwen2Pattern, splitQwen2)
}

func TestSplitGPT2_MatchesRegexp2Exactly(t *testing.T) {
	testSplitterMatchesRegexp2(t, gpt2Pattern, splitGPT2)
}

func TestBMPClassTable_MatchesUnicodePredicates(t *testing.T) {
	for r := rune(0); r < 0x10000; r++ {
		if got, want := bmpClass[r], classOf(r); got != want {
			t.Fatalf("U+%04X: table %d, predicates %d", r, got, want)
		}
	}
}

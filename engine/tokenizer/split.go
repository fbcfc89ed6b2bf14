package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Pre-tokenizers: hand-coded equivalents of the pre-tokenizer regular
// expressions, one function per expression. Each returns the end of the piece
// that starts at byte offset i of s (i < len(s)); the pieces tile the input
// because every alternative set below matches some prefix at any position.
//
// Character classes follow the regex engines the expressions are written for
// (and the regexp2 oracle used by the tests): \p{L} is unicode.IsLetter, \p{N}
// is unicode.IsNumber (Nd, Nl, No) and \s is unicode.IsSpace (the Unicode
// White_Space property: \t\n\v\f\r, space, U+0085, U+00A0 and \p{Z}). An
// invalid UTF-8 byte is one U+FFFD rune, which is "other".

// qwen2Pattern is the Qwen2 pre-tokenizer regex that splitQwen2 implements.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// gpt2Pattern is the GPT-2 pre-tokenizer regex that splitGPT2 implements.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

type charClass uint8

const (
	clsOther charClass = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass = func() (t [utf8.RuneSelf]charClass) {
	for c := rune(0); c < utf8.RuneSelf; c++ {
		t[c] = classOf(c)
	}
	return t
}()

func classOf(r rune) charClass {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// bmpClass is classOf for the Basic Multilingual Plane, filled from the
// same range tables (unicode.IsLetter is unicode.Letter, IsNumber is
// unicode.Number and IsSpace is unicode.White_Space).
var bmpClass = func() *[0x10000]charClass {
	t := new([0x10000]charClass)
	for _, x := range []struct {
		tab *unicode.RangeTable
		cls charClass
	}{{unicode.Letter, clsLetter}, {unicode.Number, clsNumber}, {unicode.White_Space, clsSpace}} {
		for _, r := range x.tab.R16 {
			for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
				t[c] = x.cls
			}
		}
	}
	return t
}()

// classAt returns the class, rune and encoded size of the rune at s[i].
func classAt(s string, i int) (charClass, rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return bmpClass[r], r, n
	}
	return classOf(r), r, n
}

// runEnd returns the end of the run of class cls starting at i.
func runEnd(s string, i int, cls charClass) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return i
			}
			i++
			continue
		}
		c, _, n := classAt(s, i)
		if c != cls {
			return i
		}
		i += n
	}
	return i
}

// contraction reports the length of 's|'t|'re|'ve|'m|'ll|'d after the
// apostrophe at i (0 when none). With fold, letters compare after
// unicode.ToLower, as a case-insensitive group does.
func contraction(s string, i int, fold bool) int {
	j := i + 1
	at := func(k int) (rune, int) {
		if k >= len(s) {
			return -1, 0
		}
		r, n := rune(s[k]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(s[k:])
		}
		if fold {
			r = unicode.ToLower(r)
		}
		return r, n
	}
	r1, n1 := at(j)
	switch r1 {
	case 's', 't', 'm', 'd':
		return 1 + n1
	case 'r', 'v', 'l':
		want := 'e'
		if r1 == 'l' {
			want = 'l'
		}
		if r2, n2 := at(j + n1); r2 == want {
			return 1 + n1 + n2
		}
	}
	return 0
}

// spaceEnd implements the whitespace tail shared by both patterns,
// `\s+(?!\S)|\s+`, for a whitespace run that starts at i and ends at j.
func spaceEnd(s string, i, j int) int {
	if j == len(s) {
		return j
	}
	// Give back the last whitespace rune so the next piece can take it as
	// its leading space, unless that would leave nothing.
	_, last := utf8.DecodeLastRuneInString(s[i:j])
	if j-last > i {
		return j - last
	}
	return j
}

// splitQwen2 returns the end of the Qwen2 pre-tokenizer piece starting at i.
func splitQwen2(s string, i int) int {
	c, r, n := classAt(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if k := contraction(s, i, true); k > 0 {
			return i + k
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return runEnd(s, i+n, clsLetter)
	}
	if c != clsNumber && r != '\r' && r != '\n' && i+n < len(s) {
		if c2, _, n2 := classAt(s, i+n); c2 == clsLetter {
			return runEnd(s, i+n+n2, clsLetter)
		}
	}
	// \p{N}
	if c == clsNumber {
		return i + n
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if r == ' ' && i+1 < len(s) {
		if c2, _, _ := classAt(s, i+1); c2 == clsOther {
			j = i + 1
		}
	}
	if j > i || c == clsOther {
		j = runEnd(s, j, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c is whitespace from here on.
	// \s*[\r\n]+ : up to and including the last CR/LF of the whitespace run.
	j = i
	lastNL := -1
	for j < len(s) {
		cj, rj, nj := classAt(s, j)
		if cj != clsSpace {
			break
		}
		if rj == '\r' || rj == '\n' {
			lastNL = j
		}
		j += nj
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S)|\s+
	return spaceEnd(s, i, j)
}

// splitGPT2 returns the end of the GPT-2 pre-tokenizer piece starting at i.
func splitGPT2(s string, i int) int {
	c, r, n := classAt(s, i)
	// 's|'t|'re|'ve|'m|'ll|'d
	if r == '\'' {
		if k := contraction(s, i, false); k > 0 {
			return i + k
		}
	}
	//  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
	if c != clsSpace {
		return runEnd(s, i+n, c)
	}
	if r == ' ' && i+1 < len(s) {
		if c2, _, n2 := classAt(s, i+1); c2 != clsSpace {
			return runEnd(s, i+1+n2, c2)
		}
	}
	// \s+(?!\S)|\s+
	return spaceEnd(s, i, runEnd(s, i, clsSpace))
}

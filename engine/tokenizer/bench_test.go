package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// mixedText returns about n bytes of deterministic mixed text: Python code,
// English prose, CJK, Cyrillic, emoji, numbers and whitespace runs.
func mixedText(n int) string {
	chunks := []string{
		"def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return self.proj(x) * 0.5\n",
		"    for i, (k, v) in enumerate(items.items()):\n        if v is None:\n            continue\n",
		"The quick brown fox jumps over the lazy dog. It's what they'd've wanted, isn't it? ",
		"In 2024 the model processed 1,234,567 requests at 98.6% uptime (p99 = 12.5ms).\n",
		"我想在苹果公司工作，因为那里的工程师非常优秀。今天天气很好！",
		"Привет, мир! Это тестовая строка на русском языке. ",
		"🚀 launch 😶‍🌫️ mood ✅ done 🦙 llama 👍🏽 ",
		"\t\tconfig = {\"name\": \"minfer\", \"threads\": 16, \"ratio\": 3.14159}\n\n\n",
		"Äpfel, Cửa Việt, naïve café, Straße — «quotes» … ",
		"    // TODO: handle the edge case where len(buf) == 0\n",
		"0x7fffffff 0b1011 1e-9 -42 +17 3/4 ",
	}
	r := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	words := strings.Fields(strings.Join(chunks, " "))
	for b.Len() < n {
		if r.IntN(4) == 0 {
			// Shuffled words and fresh numbers so that not every piece is a
			// cache hit.
			for range 12 {
				b.WriteString(words[r.IntN(len(words))])
				b.WriteByte(' ')
			}
			b.WriteString(strings.Repeat("9", r.IntN(3)))
			b.WriteString(string(rune('a' + r.IntN(26))))
			b.WriteString(string(rune(0x4e00 + r.IntN(0x5000))))
			b.WriteByte('\n')
		} else {
			b.WriteString(chunks[r.IntN(len(chunks))])
		}
	}
	return b.String()
}

func BenchmarkEncode(b *testing.B) {
	tok := qwenTokenizer(b)
	text := mixedText(1 << 20)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(text, true)
	}
}

func BenchmarkEncodeCold(b *testing.B) {
	tok := qwenTokenizer(b)
	text := mixedText(1 << 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.cache.mu.Lock()
		clear(tok.cache.m)
		tok.cache.mu.Unlock()
		tok.Encode(text, true)
	}
}

func BenchmarkSplitQwen2(b *testing.B) {
	text := mixedText(1 << 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		for i := 0; i < len(text); {
			i = splitQwen2(text, i)
		}
	}
}

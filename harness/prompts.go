package harness

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Prompt is one fixed prompt of the greedy identity gate.
type Prompt struct {
	Name string `json:"name"`
	Text string `json:"text,omitempty"`
	// IDs, when set, is the prompt as token ids (`minfer generate --ids`):
	// a prompt of an exact token count whatever the vocabulary (a lever
	// whose path runs only for a 2..8-token forward gets one).
	IDs []int32 `json:"ids,omitempty"`
}

// LongPromptWords is the word count of the long default prompt: about 2K
// tokens with the embedded synthetic model's small BPE vocabulary (600 words
// encode to ~2050 tokens there; a real Qwen vocabulary gives ~800).
const LongPromptWords = 600

// DefaultPrompts is the fixed prompt set: three short prompts of different
// character and one long one built deterministically from a word list.
func DefaultPrompts() []Prompt {
	return []Prompt{
		{Name: "pangram", Text: "The quick brown fox jumps over the lazy dog."},
		{Name: "code", Text: "func main() {\n\tfmt.Println(\"hello, world\")\n}"},
		{Name: "numbers", Text: "1, 1, 2, 3, 5, 8, 13, 21, 34,"},
		{Name: "long-2k", Text: LongPrompt(LongPromptWords)},
	}
}

var words = strings.Fields(`the of and to in is was for on that with as by at from his her
an be this which or had not are but were they have one all their there been has when who will
more no if out so said what up its about into than them can only other new some could time these
two may then do first any my now such like our over man me even most made after also did many
before must through back years where much your way well down should because each just those
people how too little state good very make world still own see men work long get here between
both life being under never day same another know while last might us great old year off come
since against go came right used take three river model token engine kernel cache memory
matrix vector graph layer weight scale block prefill decode attention softmax`)

// LongPrompt returns n words drawn by a fixed LCG, with a full stop every 12.
func LongPrompt(n int) string {
	var b strings.Builder
	x := uint64(0x5eed)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		w := words[(x>>33)%uint64(len(words))]
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		if i%12 == 11 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// ReadPrompts reads a prompts file: prompts are separated by lines holding
// only "---"; a first line "# name" names the prompt.
func ReadPrompts(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ps []Prompt
	var cur []string
	flush := func() {
		text := strings.TrimSpace(strings.Join(cur, "\n"))
		cur = nil
		if text == "" {
			return
		}
		name := fmt.Sprintf("prompt-%d", len(ps)+1)
		if first, rest, _ := strings.Cut(text, "\n"); strings.HasPrefix(first, "# ") {
			name = strings.TrimSpace(first[2:])
			text = strings.TrimSpace(rest)
		}
		if text != "" {
			ps = append(ps, Prompt{Name: name, Text: text})
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "---" {
			flush()
			continue
		}
		cur = append(cur, sc.Text())
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	return ps, nil
}

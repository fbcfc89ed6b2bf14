package chat

import (
	"bufio"
	"errors"
	"io"
	"strings"
)

// ReadScript reads the user turns of a chat script: turns are separated by
// lines that hold only "---" (the separator of abtest's prompts files), each
// turn is its lines with the blank space around them trimmed, and an empty
// turn is skipped. A turn may span several lines.
func ReadScript(r io.Reader) ([]string, error) {
	var turns, cur []string
	flush := func() {
		if t := strings.TrimSpace(strings.Join(cur, "\n")); t != "" {
			turns = append(turns, t)
		}
		cur = nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "---" {
			flush()
			continue
		}
		cur = append(cur, strings.TrimSuffix(sc.Text(), "\r"))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	flush()
	if len(turns) == 0 {
		return nil, errors.New("the script holds no turn")
	}
	return turns, nil
}

package harness

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress prints one line per step, or a redrawn bar on a terminal.
type Progress struct {
	W     io.Writer
	TTY   bool
	Total int

	mu    sync.Mutex
	done  int
	start time.Time
}

// NewProgress writes to w; a bar is drawn only when w is a terminal.
func NewProgress(w io.Writer, total int) *Progress {
	return &Progress{W: w, TTY: IsTerminal(w), Total: total, start: time.Now()}
}

// IsTerminal reports whether w is a character device.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Step records one finished unit of work.
func (p *Progress) Step(format string, a ...any) {
	if p == nil || p.W == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	msg := fmt.Sprintf(format, a...)
	el := time.Since(p.start).Round(100 * time.Millisecond)
	if !p.TTY {
		fmt.Fprintf(p.W, "abtest: [%d/%d %s] %s\n", p.done, p.Total, el, msg)
		return
	}
	const width = 30
	filled := 0
	if p.Total > 0 {
		filled = min(width, width*p.done/p.Total)
	}
	fmt.Fprintf(p.W, "\r\033[K[%s%s] %d/%d %s %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), p.done, p.Total, el, msg)
	if p.done >= p.Total {
		fmt.Fprintln(p.W)
	}
}

// Note prints a line that stays (also on a terminal).
func (p *Progress) Note(format string, a ...any) {
	if p == nil || p.W == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.TTY {
		fmt.Fprint(p.W, "\r\033[K")
	}
	fmt.Fprintf(p.W, "abtest: "+format+"\n", a...)
}

// AddTotal grows the expected step count.
func (p *Progress) AddTotal(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.Total += n
	p.mu.Unlock()
}

// Order returns the slot order of round i (0-based): AB, BA, AB, ...
func Order(i int) string {
	if i%2 == 0 {
		return "AB"
	}
	return "BA"
}

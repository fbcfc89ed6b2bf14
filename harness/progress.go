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

// ETA estimates the time left of a sequence of jobs (a nightly's levers, a
// bisect's steps): a pending job counts its expected seconds when known
// (the last nightly's time), else the mean of the jobs finished so far.
type ETA struct {
	Start time.Time
	done  []float64
}

// Done records a finished job's seconds.
func (e *ETA) Done(seconds float64) { e.done = append(e.done, seconds) }

// Line is "elapsed E, about L left (basis)" for the pending jobs' expected
// seconds (<= 0: unknown), or says that nothing is known yet.
func (e *ETA) Line(pending []float64) string {
	el := time.Since(e.Start).Round(time.Second)
	mean := 0.0
	for _, d := range e.done {
		mean += d / float64(len(e.done))
	}
	left, known, guessed := 0.0, 0, 0
	for _, p := range pending {
		switch {
		case p > 0:
			left += p
			known++
		case mean > 0:
			left += mean
			guessed++
		default:
			return fmt.Sprintf("elapsed %s, time left unknown until a job has finished", el)
		}
	}
	var basis []string
	if known > 0 {
		basis = append(basis, fmt.Sprintf("%d by the last nightly's times", known))
	}
	if guessed > 0 {
		basis = append(basis, fmt.Sprintf("%d at the mean so far", guessed))
	}
	if len(basis) == 0 {
		basis = append(basis, "nothing left")
	}
	return fmt.Sprintf("elapsed %s, about %s left (%s)", el, time.Duration(left*float64(time.Second)).Round(time.Second), strings.Join(basis, ", "))
}

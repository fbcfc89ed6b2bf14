package profile

import (
	"bufio"
	"strings"
)

// TestRun is the tally of one `go test -v` output.
type TestRun struct {
	Binary   string   `json:"binary"`
	Passed   int      `json:"passed"`
	Failed   int      `json:"failed"`
	Skipped  int      `json:"skipped"`
	Failures []string `json:"failures,omitempty"`
	Skips    []string `json:"skips,omitempty"`
	Panicked bool     `json:"panicked,omitempty"`
}

// ParseGoTestV counts the "--- PASS/FAIL/SKIP: Name (..)" lines of `go test
// -v` (subtests included) and notes a panic; a panic with no FAIL line is
// recorded as a failure of the test that was running.
func ParseGoTestV(out string) TestRun {
	var r TestRun
	running := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "=== RUN"); ok {
			running = strings.TrimSpace(rest)
			continue
		}
		if strings.HasPrefix(line, "panic:") {
			r.Panicked = true
			continue
		}
		rest, ok := strings.CutPrefix(line, "--- ")
		if !ok {
			continue
		}
		status, name, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		if i := strings.LastIndex(name, " ("); i >= 0 {
			name = name[:i]
		}
		switch status {
		case "PASS":
			r.Passed++
		case "FAIL":
			r.Failed++
			r.Failures = append(r.Failures, name)
		case "SKIP":
			r.Skipped++
			r.Skips = append(r.Skips, name)
		}
	}
	if r.Panicked && r.Failed == 0 {
		r.Failed++
		if running == "" {
			running = "(panic outside a test)"
		}
		r.Failures = append(r.Failures, running+" (panic)")
	}
	return r
}

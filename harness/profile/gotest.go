package profile

import (
	"bufio"
	"strings"
)

// failureLogLines bounds the log kept per failed test.
const failureLogLines = 12

// TestRun is the tally of one `go test -v` output.
type TestRun struct {
	Binary   string   `json:"binary"`
	Passed   int      `json:"passed"`
	Failed   int      `json:"failed"`
	Skipped  int      `json:"skipped"`
	Failures []string `json:"failures,omitempty"`
	// FailureLogs holds, per failed test, its last log lines (what it
	// said before failing): a suite verdict must say why, not only who.
	FailureLogs map[string][]string `json:"failure_logs,omitempty"`
	Skips       []string            `json:"skips,omitempty"`
	Panicked    bool                `json:"panicked,omitempty"`
	// NoDeviceSkips counts tests that skipped because no CUDA device
	// answered them (a device suite where that happens proves nothing).
	NoDeviceSkips int `json:"no_device_skips,omitempty"`
	// Reused, when set, says the run was not made now: a cached identical
	// run (same binaries, kernels, settings and GPU) was reused.
	Reused string `json:"reused,omitempty"`
}

// ParseGoTestV counts the "--- PASS/FAIL/SKIP: Name (..)" lines of `go test
// -v` (subtests included) and notes a panic; a panic with no FAIL line is
// recorded as a failure of the test that was running. The log lines printed
// while a test ran (its t.Log/t.Error output, indented) are kept for the
// tests that fail, the last failureLogLines of them. A line belongs to the
// test the last "=== RUN", "=== CONT" or "=== NAME" named: a parent's
// "--- FAIL" lines for its subtests come after the last subtest ran, so
// the lines since the last marker would name the wrong test.
func ParseGoTestV(out string) TestRun {
	var r TestRun
	running := ""
	logs := map[string][]string{} // per test: its lines, the last 2 x failureLogLines at most
	keep := func(name, test string) {
		if r.FailureLogs == nil {
			r.FailureLogs = map[string][]string{}
		}
		l := logs[test]
		if len(l) > failureLogLines {
			l = l[len(l)-failureLogLines:]
		}
		r.FailureLogs[name] = append([]string(nil), l...)
	}
	add := func(line string) {
		l := append(logs[running], line)
		if len(l) > 2*failureLogLines {
			l = append(l[:0], l[len(l)-failureLogLines:]...)
		}
		logs[running] = l
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "=== RUN"); ok {
			running = strings.TrimSpace(rest)
			logs[running] = nil
			continue
		}
		if rest, ok := cutAny(line, "=== CONT", "=== NAME"); ok {
			running = strings.TrimSpace(rest)
			continue
		}
		if strings.HasPrefix(line, "panic:") {
			r.Panicked = true
			add(line)
			continue
		}
		rest, ok := strings.CutPrefix(line, "--- ")
		if !ok {
			if line != "" && !strings.HasPrefix(line, "=== ") && line != "FAIL" && line != "PASS" {
				add(line)
			}
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
			keep(name, name)
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
		keep(running+" (panic)", running)
	}
	return r
}

// cutAny is strings.CutPrefix for the first of prefixes that line has.
func cutAny(line string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(line, p); ok {
			return rest, true
		}
	}
	return "", false
}

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minfer-go/minfer/harness/gpumem"
)

// Runner executes the minfer binary as separate processes, one per call,
// each with a clean environment: the parent's minus every MINFER_* variable,
// plus the pinned values and the arm's own. It keeps the time spent inside
// those processes (and, through Account, in profilers and device tests) so
// the harness can state its own overhead.
type Runner struct {
	Bin     string            // path of the minfer binary
	Timeout time.Duration     // per process; 0 = no limit beyond ctx
	Pinned  map[string]string // MINFER_* values every process gets (harness pins)
	Base    []string          // parent environment without MINFER_*; nil = os.Environ() filtered
	// GPUMem, when set, samples the device memory of every process run
	// without a wrapper, from outside it, for the process's lifetime
	// (Exec.DeviceMemory): a peer engine run through the runner is
	// measured the same way as minfer.
	GPUMem *gpumem.Monitor

	mu   sync.Mutex
	work map[string]WorkTime
}

// Kinds of work the harness does not count as its own overhead: the minfer
// processes of the arms, the profilers that run (or read the output of) the
// arms, and the device test binaries.
const (
	WorkMinfer      = "minfer"
	WorkProfilers   = "profilers"
	WorkDeviceTests = "device tests"
)

// WorkTime is the wall time and the number of processes of one kind.
type WorkTime struct {
	Wall  time.Duration `json:"wall_ns"`
	Execs int           `json:"execs"`
}

// Account adds one finished process of the given kind (WorkProfilers for
// nsys stats, the importer, cuobjdump; WorkDeviceTests for the suite).
func (r *Runner) Account(kind string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.work == nil {
		r.work = map[string]WorkTime{}
	}
	w := r.work[kind]
	w.Wall += d
	w.Execs++
	r.work[kind] = w
}

// Work is a snapshot of the time accounted so far, per kind.
func (r *Runner) Work() map[string]WorkTime {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]WorkTime, len(r.work))
	for k, v := range r.work {
		out[k] = v
	}
	return out
}

// CleanEnv returns env without any MINFER_* entry.
func CleanEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "MINFER_") {
			out = append(out, kv)
		}
	}
	return out
}

// Exec is one finished process: what ran, how long, how it ended.
type Exec struct {
	Label string `json:"label"`
	// Bin is the binary that ran when it was not the Runner's (abtest pr).
	Bin       string        `json:"bin,omitempty"`
	Args      []string      `json:"args"`
	Env       []string      `json:"env"` // the MINFER_* variables it ran with
	Wall      time.Duration `json:"wall_ns"`
	Exit      int           `json:"exit"`
	TimedOut  bool          `json:"timed_out,omitempty"`
	Stdout    []byte        `json:"-"`
	Stderr    string        `json:"stderr_tail,omitempty"`
	StderrAll string        `json:"-"`
	// DeviceMemory is the process's peak device memory and the other
	// processes on the GPU meanwhile (nil: the runner samples none).
	DeviceMemory *gpumem.Usage `json:"device_memory,omitempty"`
}

// Call is one process to run: minfer's args, the MINFER_* values it gets,
// other variables (LC_ALL=C for a profiler) and an optional wrapper program
// (ncu, nsys) that runs minfer.
type Call struct {
	// Bin, when set, is the binary to run instead of the Runner's.
	Bin     string
	Label   string
	Env     map[string]string
	Extra   []string
	Wrapper []string
	Args    []string
}

// Command is the shell line that reproduces the process.
func (e *Exec) Command(bin string) string {
	parts := append([]string{}, e.Env...)
	if bin != "" {
		parts = append(parts, ShellQuote(bin))
	}
	for _, a := range e.Args {
		parts = append(parts, ShellQuote(a))
	}
	return strings.Join(parts, " ")
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:+@%", r))
	}) < 0 {
		return s
	}
	if len(s) > 80 {
		s = s[:40] + "…" + s[len(s)-20:]
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ArmError is a process that crashed, hung or exited non-zero: a FAIL with
// its stderr tail, never a lost report.
type ArmError struct {
	Exec *Exec
	Err  error
}

func (e *ArmError) Error() string {
	what := fmt.Sprintf("exit %d", e.Exec.Exit)
	if e.Exec.TimedOut {
		what = fmt.Sprintf("timed out after %s", e.Exec.Wall.Round(time.Millisecond))
	} else if e.Err != nil && e.Exec.Exit < 0 {
		what = e.Err.Error()
	}
	tail := strings.TrimSpace(e.Exec.Stderr)
	if tail == "" {
		tail = "(no stderr)"
	}
	args := make([]string, len(e.Exec.Args))
	for i, a := range e.Exec.Args {
		args[i] = ShellQuote(a) // long prompts are shortened
	}
	return fmt.Sprintf("%s: minfer %s: %s; stderr tail: %s", e.Exec.Label, strings.Join(args, " "), what, tail)
}

func (e *ArmError) Unwrap() error { return e.Err }

// StderrTailBytes is how much of a process's stderr a report keeps.
const StderrTailBytes = 2000

// Run executes minfer with args and the extra MINFER_* variables in env.
// A non-zero exit, a timeout or a failure to start returns an *ArmError.
func (r *Runner) Run(ctx context.Context, label string, env map[string]string, args ...string) (*Exec, error) {
	return r.RunCall(ctx, Call{Label: label, Env: env, Args: args})
}

// RunCall runs one Call; see Run.
func (r *Runner) RunCall(ctx context.Context, c Call) (*Exec, error) {
	label, env, args := c.Label, c.Env, c.Args
	merged := map[string]string{}
	for k, v := range r.Pinned {
		merged[k] = v
	}
	for k, v := range env {
		if v == Unset {
			delete(merged, k)
			continue
		}
		merged[k] = v
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	base := r.Base
	if base == nil {
		base = CleanEnv(os.Environ())
	} else {
		base = CleanEnv(base)
	}
	e := &Exec{Label: label, Args: args}
	full := append(append([]string{}, base...), c.Extra...)
	for _, k := range keys {
		kv := k + "=" + merged[k]
		e.Env = append(e.Env, kv)
		full = append(full, kv)
	}
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	bin := r.Bin
	if c.Bin != "" {
		bin = c.Bin
		e.Bin = bin
	}
	name, argv := bin, args
	if len(c.Wrapper) > 0 {
		name = c.Wrapper[0]
		argv = append(append(append([]string{}, c.Wrapper[1:]...), bin), args...)
		e.Args = append([]string{name}, argv...) // Command("") reproduces it
		e.Env = append(append([]string{}, c.Extra...), e.Env...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Env = full
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Start()
	var w *gpumem.Watch
	if err == nil {
		if r.GPUMem != nil && len(c.Wrapper) == 0 {
			w = r.GPUMem.Watch(cmd.Process.Pid)
		}
		err = cmd.Wait()
	}
	e.Wall = time.Since(start)
	if w != nil {
		e.DeviceMemory = w.Stop() // its last reading: who is on the GPU after the process
	}
	kind := WorkMinfer
	if len(c.Wrapper) > 0 {
		kind = WorkProfilers // ncu / nsys running the arm
	}
	r.Account(kind, e.Wall)
	e.Stdout = stdout.Bytes()
	e.StderrAll = stderr.String()
	e.Stderr = tail(e.StderrAll, StderrTailBytes)
	if err == nil {
		return e, nil
	}
	e.Exit = -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		e.Exit = ee.ExitCode()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e.TimedOut = true
	}
	return e, &ArmError{Exec: e, Err: err}
}

// ArmTime is the total wall time spent inside minfer processes run
// directly (not under a profiler) so far.
func (r *Runner) ArmTime() (time.Duration, int) {
	w := r.Work()[WorkMinfer]
	return w.Wall, w.Execs
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Package gpumem measures a process's device memory from outside it: a
// Sampler lists the compute processes on the GPUs (NVML's
// nvmlDeviceGetComputeRunningProcesses, bound through purego), and a Watch
// polls it for the lifetime of one process, keeping that process's peak and
// every other process seen on the GPU meanwhile (a neighbour whose job
// shares the GPU). Because it measures from outside, any engine, ours or a
// peer, is measured the same way (GATES.md gate 3, issue 19).
//
// Nothing here fails a run: a machine without NVML, a sampler error or a
// process never seen on the GPU is a Usage with Why set ("not measured:
// ..."), never a crash.
package gpumem

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Proc is one compute process on one GPU as a sample saw it.
type Proc struct {
	PID int
	GPU int
	// Bytes is the device memory NVML attributes to the process; Known is
	// false where NVML cannot say (NVML_VALUE_NOT_AVAILABLE).
	Bytes uint64
	Known bool
}

// Sampler lists the compute processes on the machine's GPUs now.
type Sampler interface {
	Processes() ([]Proc, error)
	// Name says what samples ("NVML 580.65 (libnvidia-ml.so.1), 1 GPU").
	Name() string
}

// FakeEnv is the test seam: ABTEST_FAKE_GPUMEM=FILE makes Open return the
// file sampler of FILE instead of NVML (see FileSampler). Tests only.
const FakeEnv = "ABTEST_FAKE_GPUMEM"

// Open returns the machine's sampler: the test seam's file when FakeEnv is
// set, else NVML. The error is the reason memory is not measured.
func Open() (Sampler, error) {
	if f := os.Getenv(FakeEnv); f != "" {
		return &FileSampler{Path: f}, nil
	}
	return openNVML()
}

// DefaultInterval is how often a Watch polls.
const DefaultInterval = 20 * time.Millisecond

// Monitor watches processes with one sampler. A Monitor without a sampler
// (S nil) hands out Usages that say Why.
type Monitor struct {
	S        Sampler
	Why      string        // why there is no sampler
	Interval time.Duration // 0: DefaultInterval

	mu   sync.Mutex
	mine map[int]bool // pids this monitor watched: never a neighbour of a later one
}

// NewMonitor opens the machine's sampler (Open); without one the monitor
// says why in every Usage.
func NewMonitor() *Monitor {
	s, err := Open()
	if err != nil {
		return &Monitor{Why: err.Error()}
	}
	return &Monitor{S: s}
}

// Watch is the sampling of one process, from Start to Stop.
type Watch struct {
	m    *Monitor
	pid  int
	stop chan struct{}
	done chan struct{}

	samples, errs int
	lastErr       error
	first         map[int]bool   // pids of the first sample (before the process held any memory)
	last          map[int]bool   // pids of the sample after the process ended
	peak          map[int]uint64 // per pid: the largest total over its GPUs in one sample
	unknown       map[int]bool   // pids NVML listed without a memory figure
}

// Watch starts sampling the process pid (just started) until Stop.
func (m *Monitor) Watch(pid int) *Watch {
	w := &Watch{m: m, pid: pid, stop: make(chan struct{}), done: make(chan struct{}), peak: map[int]uint64{}, unknown: map[int]bool{}}
	m.mu.Lock()
	if m.mine == nil {
		m.mine = map[int]bool{}
	}
	m.mine[pid] = true
	m.mu.Unlock()
	if m.S == nil {
		close(w.done)
		return w
	}
	w.first = w.sample()
	go func() {
		defer close(w.done)
		iv := m.Interval
		if iv <= 0 {
			iv = DefaultInterval
		}
		t := time.NewTicker(iv)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.sample()
			}
		}
	}()
	return w
}

// sample takes one reading and returns the pids in it (nil on an error).
func (w *Watch) sample() map[int]bool {
	ps, err := w.m.S.Processes()
	w.samples++
	if err != nil {
		w.errs++
		w.lastErr = err
		return nil
	}
	tot := map[int]uint64{}
	for _, p := range ps {
		if !p.Known {
			w.unknown[p.PID] = true
		}
		tot[p.PID] += p.Bytes
	}
	seen := map[int]bool{}
	for pid, b := range tot {
		seen[pid] = true
		if old, ok := w.peak[pid]; !ok || b > old {
			w.peak[pid] = b
		}
	}
	return seen
}

// Other is another process seen on the GPU while one was watched.
type Other struct {
	PID       int    `json:"pid"`
	PeakBytes uint64 `json:"peak_bytes"`
}

// Usage is one process's device memory, measured from outside it.
type Usage struct {
	// Measured: PeakBytes is the process's peak over the samples; else Why
	// says why not.
	Measured  bool   `json:"measured"`
	PeakBytes uint64 `json:"peak_bytes,omitempty"`
	Why       string `json:"why,omitempty"`
	// Method: "pid" (NVML listed the process by its pid), or "appearance"
	// (its pid was never listed, as where NVML reports the pids of another
	// PID namespace, and exactly one process came and went on the GPU
	// during its lifetime).
	Method  string `json:"method,omitempty"`
	Samples int    `json:"samples"`
	Errors  int    `json:"sample_errors,omitempty"`
	Source  string `json:"source,omitempty"`
	// Others are the other processes seen on the GPU meanwhile (their
	// pids as NVML reports them): a neighbour's job.
	Others []Other `json:"others,omitempty"`
}

// Stop ends the watch (after the process ended) with one last reading
// and returns the process's usage.
func (w *Watch) Stop() *Usage {
	if w.m.S == nil {
		<-w.done
		return &Usage{Why: "no sampler: " + w.m.Why}
	}
	close(w.stop)
	<-w.done
	w.last = w.sample()
	u := &Usage{Samples: w.samples, Errors: w.errs, Source: w.m.S.Name()}
	self := -1
	if _, ok := w.peak[w.pid]; ok {
		self, u.Method = w.pid, "pid"
	} else {
		var came []int
		for pid := range w.peak {
			if !w.first[pid] && !w.last[pid] && !w.m.isMine(pid) {
				came = append(came, pid)
			}
		}
		if len(came) == 1 && w.first != nil && w.last != nil {
			self, u.Method = came[0], "appearance"
		}
	}
	if self >= 0 {
		w.m.mu.Lock()
		w.m.mine[self] = true
		w.m.mu.Unlock()
	}
	switch {
	case self >= 0 && w.unknown[self]:
		u.Why = fmt.Sprintf("%s lists process %d without a memory figure (NVML_VALUE_NOT_AVAILABLE)", u.Source, self)
	case self >= 0:
		u.Measured, u.PeakBytes = true, w.peak[self]
	case w.samples == w.errs:
		u.Why = fmt.Sprintf("every one of %d samples failed: %v", w.samples, w.lastErr)
	default:
		u.Why = fmt.Sprintf("pid %d never appeared among the GPU's compute processes in %d samples (no device memory, too short to sample, or pids of another PID namespace)", w.pid, w.samples)
	}
	for pid, b := range w.peak {
		if pid != self && !w.m.isMine(pid) {
			u.Others = append(u.Others, Other{PID: pid, PeakBytes: b})
		}
	}
	sort.Slice(u.Others, func(i, j int) bool { return u.Others[i].PID < u.Others[j].PID })
	return u
}

func (m *Monitor) isMine(pid int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mine[pid]
}

// GiB renders bytes as GiB with three significant digits ("10.1 GiB",
// "0.488 GiB").
func GiB(b uint64) string {
	g := float64(b) / (1 << 30)
	if g >= 100 {
		return fmt.Sprintf("%.0f GiB", g)
	}
	return fmt.Sprintf("%.3g GiB", g)
}

// OthersLine names the other processes ("pid 4242 (1.95 GiB), pid 77 (0 GiB)").
func OthersLine(os []Other) string {
	var s []string
	for _, o := range os {
		s = append(s, fmt.Sprintf("pid %d (%s)", o.PID, GiB(o.PeakBytes)))
	}
	return strings.Join(s, ", ")
}

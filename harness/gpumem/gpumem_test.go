package gpumem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// script is a Sampler whose readings a test plays: each call returns the
// next reading (the last one repeats).
type script struct {
	mu       sync.Mutex
	readings [][]Proc
	errs     []error
	i        int
}

func (s *script) Name() string { return "script" }

func (s *script) Processes() ([]Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := min(s.i, len(s.readings)-1)
	s.i++
	var err error
	if i < len(s.errs) {
		err = s.errs[i]
	}
	return s.readings[i], err
}

func mib(n float64) uint64 { return uint64(n * (1 << 20)) }

// watch runs one watch over the readings: every reading is taken (the
// interval is long, so the first and the last are the watch's own, and
// each middle one is forced by sampleAll).
func watch(t *testing.T, pid int, readings [][]Proc, errs []error) *Usage {
	t.Helper()
	s := &script{readings: readings, errs: errs}
	m := &Monitor{S: s, Interval: time.Hour}
	w := m.Watch(pid)
	for len(readings) > 2 && s.i < len(readings)-1 {
		w.sample() // the ticker's samples, deterministically (no ticker fires in an hour)
	}
	return w.Stop()
}

func TestWatch_PeakOfItsPidAndTheOthersSeen(t *testing.T) {
	u := watch(t, 100, [][]Proc{
		{{PID: 7, Bytes: mib(500), Known: true}},
		{{PID: 7, Bytes: mib(500), Known: true}, {PID: 100, Bytes: mib(300), Known: true}},
		{{PID: 100, Bytes: mib(900), Known: true}, {PID: 100, GPU: 1, Bytes: mib(100), Known: true}},
		{{PID: 100, Bytes: mib(400), Known: true}},
		{},
	}, nil)
	if !u.Measured || u.Method != "pid" || u.PeakBytes != mib(1000) || u.Samples != 5 {
		t.Fatalf("%+v", u)
	}
	if len(u.Others) != 1 || u.Others[0].PID != 7 || u.Others[0].PeakBytes != mib(500) {
		t.Fatalf("others %+v", u.Others)
	}
	if got := OthersLine(u.Others); got != "pid 7 (0.488 GiB)" {
		t.Errorf("others line %q", got)
	}
}

// NVML in a container can report the pids of the host's namespace: the
// one process that came and went during the watch is the watched one.
func TestWatch_PidOfAnotherNamespaceIsFoundByAppearance(t *testing.T) {
	u := watch(t, 100, [][]Proc{
		{{PID: 7, Bytes: mib(50), Known: true}},
		{{PID: 7, Bytes: mib(50), Known: true}, {PID: 4100, Bytes: mib(700), Known: true}},
		{{PID: 7, Bytes: mib(50), Known: true}},
	}, nil)
	if !u.Measured || u.Method != "appearance" || u.PeakBytes != mib(700) || len(u.Others) != 1 || u.Others[0].PID != 7 {
		t.Fatalf("%+v", u)
	}
	// Two processes came and went: no guess.
	u = watch(t, 100, [][]Proc{
		{},
		{{PID: 4100, Bytes: mib(700), Known: true}, {PID: 4200, Bytes: mib(10), Known: true}},
		{},
	}, nil)
	if u.Measured || !strings.Contains(u.Why, "pid 100 never appeared") || len(u.Others) != 2 {
		t.Fatalf("%+v", u)
	}
}

// A process this monitor watched before is never a neighbour of the next
// (a driver that lists an ended process for a moment).
func TestWatch_AnEarlierArmIsNotANeighbour(t *testing.T) {
	s := &script{readings: [][]Proc{{{PID: 100, Bytes: mib(10), Known: true}}}}
	m := &Monitor{S: s, Interval: time.Hour}
	m.Watch(100).Stop()
	s.readings = [][]Proc{{{PID: 100, Bytes: mib(10), Known: true}, {PID: 101, Bytes: mib(20), Known: true}}}
	u := m.Watch(101).Stop()
	if !u.Measured || u.PeakBytes != mib(20) || len(u.Others) != 0 {
		t.Fatalf("%+v", u)
	}
}

func TestWatch_NotMeasuredSaysWhy(t *testing.T) {
	u := (&Monitor{Why: "NVML: cannot load the NVML library (libnvidia-ml.so.1: not found)"}).Watch(1).Stop()
	if u.Measured || u.Why != "no sampler: NVML: cannot load the NVML library (libnvidia-ml.so.1: not found)" {
		t.Fatalf("%+v", u)
	}
	boom := errors.New("NVML_ERROR_GPU_IS_LOST (15)")
	u = watch(t, 1, [][]Proc{nil, nil}, []error{boom, boom})
	if u.Measured || !strings.Contains(u.Why, "every one of 2 samples failed") || u.Errors != 2 {
		t.Fatalf("%+v", u)
	}
	u = watch(t, 1, [][]Proc{{{PID: 1}}}, nil)
	if u.Measured || !strings.Contains(u.Why, "without a memory figure") {
		t.Fatalf("%+v", u)
	}
}

// Sampling runs for the process's lifetime: a real ticker, a process that
// appears after the first reading.
func TestWatch_TickerSamplesDuringTheProcess(t *testing.T) {
	s := &script{readings: [][]Proc{{}, {{PID: 5, Bytes: mib(64), Known: true}}}}
	m := &Monitor{S: s, Interval: time.Millisecond}
	w := m.Watch(5)
	time.Sleep(30 * time.Millisecond)
	u := w.Stop()
	if !u.Measured || u.PeakBytes != mib(64) || u.Samples < 3 {
		t.Fatalf("%+v", u)
	}
}

// This machine has no NVML: Open says why, never panics.
func TestOpen_WithoutNVMLIsAReason(t *testing.T) {
	t.Setenv(FakeEnv, "")
	_, err := loadNVML([]string{"libnvidia-ml-does-not-exist.so.1"})
	if err == nil || !strings.Contains(err.Error(), "libnvidia-ml-does-not-exist.so.1") {
		t.Fatalf("err %v", err)
	}
	m := NewMonitor()
	if m.S == nil && !strings.HasPrefix(m.Why, "NVML: ") {
		t.Fatalf("why %q", m.Why)
	}
}

func TestFileSampler_FiguresExitsLivenessAndSeen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu")
	t.Setenv(FakeEnv, path)
	s, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := s.Processes(); err != nil || len(ps) != 0 {
		t.Fatalf("no file: %v %v", ps, err)
	}
	me := os.Getpid()
	dead := 1 << 30 // no such process
	body := fmt.Sprintf("%d 100\n%d 250\n%d 80\n%d 10\n%d exit\n", me, me, dead, me+0, me)
	body += fmt.Sprintf("%d 300\n", me)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Processes()
	if err != nil || len(ps) != 1 || ps[0].PID != me || ps[0].Bytes != mib(300) {
		t.Fatalf("%+v %v", ps, err)
	}
	s.Processes()
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), fmt.Sprintf("seen %d\n", me)); n != 1 {
		t.Errorf("%d seen lines, want 1:\n%s", n, b)
	}
}

func TestGiB(t *testing.T) {
	for b, want := range map[uint64]string{10845346611: "10.1 GiB", 19112603238: "17.8 GiB", mib(500): "0.488 GiB", 150 << 30: "150 GiB"} {
		if got := GiB(b); got != want {
			t.Errorf("GiB(%d) = %q, want %q", b, got, want)
		}
	}
}

// Two shards on a two-GPU machine watch only their own GPU: the one
// CUDA_VISIBLE_DEVICES names first.
func TestVisibleGPU_FirstEntryOfCUDAVisibleDevices(t *testing.T) {
	for v, want := range map[string]string{"": "", "1": "1", "1,0": "1", " GPU-ab,GPU-cd": "GPU-ab"} {
		if got := visibleGPU(v); got != want {
			t.Errorf("visibleGPU(%q) = %q, want %q", v, got, want)
		}
	}
}

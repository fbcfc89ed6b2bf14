package gpumem

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// FileSampler is the test seam behind ABTEST_FAKE_GPUMEM=FILE (tests
// only): the GPU's compute processes are what FILE says. Lines:
//
//	PID MIB    the process PID holds MIB MiB of device memory from now on
//	PID exit   it released its memory (it ended)
//	seen PID   written by the sampler: it has listed PID at least once
//
// A process is listed while its last line is a figure and it is alive
// (signal 0 reaches it), so a crashed process does not linger. The fake
// minfer (harness/internal/fakeminfer, FAKEMINFER_DEVICE_MIB) appends its
// figure at start, waits for the sampler's "seen" line, so that every fake
// process is sampled at least once whatever the machine's load, and
// appends "exit" when it ends; a test appends a line of its own to plant
// a neighbour on the GPU.
type FileSampler struct {
	Path string

	mu   sync.Mutex
	seen map[int]bool
}

// Name says it is the test seam.
func (f *FileSampler) Name() string { return "test seam " + FakeEnv + "=" + f.Path }

// Processes reads the file.
func (f *FileSampler) Processes() ([]Proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fh, err := os.Open(f.Path)
	if os.IsNotExist(err) {
		return nil, nil // nothing on the GPU yet
	}
	if err != nil {
		return nil, err
	}
	mib := map[int]float64{}
	var order []int
	listed := map[int]bool{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 2 || fs[0] == "seen" {
			continue
		}
		pid, err := strconv.Atoi(fs[0])
		if err != nil {
			continue
		}
		if fs[1] == "exit" {
			delete(mib, pid)
			continue
		}
		v, err := strconv.ParseFloat(fs[1], 64)
		if err != nil {
			continue
		}
		if !listed[pid] {
			listed[pid] = true
			order = append(order, pid)
		}
		mib[pid] = v
	}
	fh.Close()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []Proc
	var newly []int
	for _, pid := range order {
		v, ok := mib[pid]
		if !ok || !alive(pid) {
			continue
		}
		out = append(out, Proc{PID: pid, Bytes: uint64(v * (1 << 20)), Known: true})
		if !f.seen[pid] {
			newly = append(newly, pid)
		}
	}
	if len(newly) > 0 {
		if f.seen == nil {
			f.seen = map[int]bool{}
		}
		w, err := os.OpenFile(f.Path, os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		for _, pid := range newly {
			fmt.Fprintf(w, "seen %d\n", pid)
			f.seen[pid] = true
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// alive reports whether signal 0 reaches pid (EPERM: it exists).
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || err == syscall.EPERM
}

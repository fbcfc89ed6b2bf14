package gpumem

import (
	"os"
	"testing"
	"time"

	"github.com/minfer-go/minfer/cuda/driver"
)

// On a machine with a GPU (the H200; skipped elsewhere): this process
// allocates 256 MiB through the CUDA driver and NVML lists it with at
// least that much, by its pid or, where NVML reports the pids of another
// PID namespace, as the one process that came and went. Build with `go test
// -c ./harness/gpumem` here and run the binary there.
func TestNVML_OwnAllocationIsListed(t *testing.T) {
	t.Setenv(FakeEnv, "")
	s, err := openNVML()
	if err != nil {
		t.Skipf("no NVML: %v", err)
	}
	t.Logf("sampler: %s", s.Name())
	before, err := s.Processes()
	if err != nil {
		t.Fatalf("processes before: %v", err)
	}
	t.Logf("before: %+v", before)
	d, err := driver.Open(driver.Options{})
	if err != nil {
		t.Skipf("NVML loads but no CUDA device opens: %v", err)
	}
	const n = 256 << 20
	var p driver.DevicePtr
	if err := d.Do(func() (err error) { p, err = d.Alloc(n); return err }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	during, err := s.Processes()
	if err != nil {
		t.Fatalf("processes during: %v", err)
	}
	t.Logf("during (this pid %d): %+v", os.Getpid(), during)
	var mine *Proc
	for i, q := range during {
		if q.PID == os.Getpid() {
			mine = &during[i]
		}
	}
	if mine == nil {
		old := map[int]bool{}
		for _, q := range before {
			old[q.PID] = true
		}
		var came []Proc
		for _, q := range during {
			if !old[q.PID] {
				came = append(came, q)
			}
		}
		t.Logf("this pid is not listed (PID namespace?); processes that came: %+v", came)
		if len(came) != 1 {
			t.Fatalf("cannot find this process among %+v", during)
		}
		mine = &came[0]
	}
	if !mine.Known || mine.Bytes < n {
		t.Errorf("listed with %d bytes (known %v), want >= %d", mine.Bytes, mine.Known, n)
	}
	_ = d.Do(func() error { return d.Free(p) })
	_ = d.Close()
}

package cuda

import (
	"errors"
	"os"
	"testing"

	"github.com/minfer-go/minfer/cuda/driver"
	"github.com/minfer-go/minfer/engine/levers"
)

// dsOpenDevice opens the device for a test that drives the driver below
// the backend (skipped without one; closed at the end of the test), with
// the levers of the environment (MINFER_KERNELS among them).
func dsOpenDevice(t *testing.T) (*driver.Device, levers.Config) {
	t.Helper()
	cfg, err := levers.FromEnv()
	if err != nil {
		t.Fatalf("levers: %v", err)
	}
	dev, err := driver.Open(driver.Options{Disable: cfg.DisableCUDA})
	if errors.Is(err, driver.ErrNoDevice) {
		t.Skipf("no CUDA device answers: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev, cfg
}

// readFatbins reads a kernels file and splits it into its fatbin
// containers' images, failing the test on either error.
func readFatbins(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := driver.SplitFatbins(data)
	if err != nil {
		t.Fatal(err)
	}
	return imgs
}

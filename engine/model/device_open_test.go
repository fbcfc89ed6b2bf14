package model

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
)

// The automatic device falls back to the CPU only when there is no device
// (graph.ErrNoDevice); a device that is there but cannot be used (a stale
// kernels file, a driver error) is an error, never a silent CPU run.
func TestLoad_AutoDeviceFallsBackOnlyWhenThereIsNoDevice(t *testing.T) {
	path := writeTiny(t, t.TempDir(), tinyQwen2)
	open := func(err error) (*Engine, error) {
		return Load(path, Options{Levers: mustEnv(t), NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) { return nil, err }})
	}
	e, err := open(fmt.Errorf("cuda: %w: no GPU", graph.ErrNoDevice))
	if err != nil {
		t.Fatalf("no device: %v, want the CPU", err)
	}
	if e.Backend() != "cpu" {
		t.Errorf("no device: runs on %s, want cpu", e.Backend())
	}
	e.Close()
	stale := errors.New("cuda: kernels file k.fatbin was built from kernel sources aaaa, this minfer's are bbbb")
	if e, err := open(stale); !errors.Is(err, stale) || !strings.Contains(err.Error(), "--device cpu") {
		if e != nil {
			e.Close()
		}
		t.Errorf("a device that cannot be used: %v, want the error (and how to run on the CPU)", err)
	}
}

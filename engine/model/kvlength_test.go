package model

import (
	"slices"
	"testing"

	"github.com/minfer-go/minfer/engine/cpu"
	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/levers"
)

// kvLenDevice is a device backend that routes by the KV length (as the CUDA
// decode attention does): it records every length it is told and the
// length it holds when each split begins.
type kvLenDevice struct {
	*cpu.Backend
	told    []int
	atBegin []int
	cur     int
}

func (d *kvLenDevice) Name() string { return "kvlendev" }

func (d *kvLenDevice) SetKVLength(cells int) {
	d.told = append(d.told, cells)
	d.cur = cells
}

func (d *kvLenDevice) BeginSplit(key graph.SplitKey) (bool, error) {
	d.atBegin = append(d.atBegin, d.cur)
	return d.Backend.BeginSplit(key)
}

var _ graph.KVLengthSetter = (*kvLenDevice)(nil)

// Every forward tells a backend that implements graph.KVLengthSetter the
// kv_len of the window it writes (start + nt: the prompt's length, then one
// more a decode step, and after a Truncate the truncated length plus the
// step), before any split of that forward begins, pinned (MINFER_PIN_STEP)
// or not.
func TestForward_TellsTheBackendEachStepsKVLengthBeforeItsSplits(t *testing.T) {
	for _, lv := range []levers.Config{levers.Default(), mustEnv(t, "MINFER_PIN_STEP=1")} {
		dev := &kvLenDevice{Backend: cpu.New(cpu.Options{Threads: 1})}
		e, err := Load(writeTiny(t, t.TempDir(), tinyQwen2), Options{Levers: lv,
			NewDevice: func(levers.Config, func(string, ...any)) (graph.Backend, error) { return dev, nil }})
		if err != nil {
			t.Fatal(err)
		}
		n := len(prompt)
		for _, toks := range [][]int32{prompt, {40}, {41}} {
			if _, err := e.Forward(toks, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Truncate(3); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Forward([]int32{42, 43}, false); err != nil {
			t.Fatal(err)
		}
		e.Close()
		if want := []int{n, n + 1, n + 2, 5}; !slices.Equal(dev.told, want) {
			t.Errorf("pin %v: told %v, want %v (one kv_len a forward)", lv.PinStep, dev.told, want)
		}
		if len(dev.atBegin) == 0 || dev.atBegin[0] != n {
			t.Errorf("pin %v: lengths at the splits' begin %v, want the prompt's %d first", lv.PinStep, dev.atBegin, n)
		}
		for i, l := range dev.atBegin {
			if !slices.Contains(dev.told, l) {
				t.Errorf("pin %v: split %d began at length %d, never told", lv.PinStep, i, l)
			}
		}
	}
}

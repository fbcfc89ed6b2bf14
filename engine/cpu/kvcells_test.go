package cpu

import (
	"bytes"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
)

// WriteKVCells puts bytes into exactly the cells named (the stored bytes,
// unconverted) and ReadKVCells gives them back; a range outside the
// context, a part of a cell, an unknown layer or side, or no KV at all is
// an error that copies nothing.
func TestKVCells_CopyWholeCellsAsStoredAndRefuseBadRanges(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	if err := b.ReadKVCells(0, graph.SideK, 0, make([]byte, 34)); err == nil {
		t.Fatal("read before AllocKV")
	}
	spec := graph.KVSpec{Format: kv.Q8_0, NLayer: 2, NCtx: 8, RowLen: 64}
	if err := b.AllocKV(spec); err != nil {
		t.Fatal(err)
	}
	rb := kv.RowBytes(spec.Format, spec.RowLen)
	src := make([]byte, 3*rb)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	if err := b.WriteKVCells(1, graph.SideV, 4, src); err != nil {
		t.Fatal(err)
	}
	if got := b.KV().V(1)[4*rb : 7*rb]; !bytes.Equal(got, src) {
		t.Fatal("the V cells 4..6 of layer 1 are not the bytes written")
	}
	for _, untouched := range [][]byte{b.KV().V(1)[:4*rb], b.KV().V(1)[7*rb:], b.KV().K(1), b.KV().V(0)} {
		if bytes.Count(untouched, []byte{0}) != len(untouched) {
			t.Fatal("bytes outside the cells written changed")
		}
	}
	dst := make([]byte, 3*rb)
	if err := b.ReadKVCells(1, graph.SideV, 4, dst); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("read back: %v", err)
	}
	for _, c := range []struct {
		layer int
		side  graph.KVSide
		cell  int
		n     int
	}{{0, graph.SideK, 6, 3 * rb}, {0, graph.SideK, -1, rb}, {0, graph.SideK, 0, rb + 1}, {0, graph.SideK, 0, 0}, {2, graph.SideK, 0, rb}, {0, 7, 0, rb}} {
		if err := b.WriteKVCells(c.layer, c.side, c.cell, make([]byte, c.n)); err == nil {
			t.Errorf("write %+v: no error", c)
		}
		if err := b.ReadKVCells(c.layer, c.side, c.cell, make([]byte, c.n)); err == nil {
			t.Errorf("read %+v: no error", c)
		}
	}
}

package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSplit writes the test model as two parts the way gguf-split does:
// every KV in the first part, split.* KVs in each, tensors divided.
// mutate may change a part's writer before it is written.
func writeSplit(t *testing.T, dir string, mutate func(part int, w *Writer)) (prefix string) {
	t.Helper()
	prefix = filepath.Join(dir, "model")
	ts := testTensors()
	for p := 0; p < 2; p++ {
		w := NewWriter()
		if p == 0 {
			w.AddString("general.architecture", "qwen2")
			for _, kv := range allValues(t) {
				if err := w.Add(kv.Key, kv.Value); err != nil {
					t.Fatal(err)
				}
			}
		}
		if mutate != nil {
			mutate(p, w)
		}
		w.Add(KeySplitNo, Uint16Value(uint16(p)))
		w.Add(KeySplitCount, Uint16Value(2))
		w.Add(KeySplitTensorsCount, Int32Value(int32(len(ts))))
		for _, tt := range ts[p*2 : p*2+2] {
			if err := w.AddTensor(tt.name, tt.typ, tt.dims, tt.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.WriteFile(SplitPath(prefix, p, 2)); err != nil {
			t.Fatal(err)
		}
	}
	return prefix
}

func TestOpenSplit_TwoParts_LoadAsOneModel(t *testing.T) {
	prefix := writeSplit(t, t.TempDir(), nil)
	first := prefix + "-00001-of-00002.gguf"
	for _, path := range []string{first, prefix + "-00002-of-00002.gguf"} {
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := f.String("general.architecture"); err != nil || s != "qwen2" {
			t.Errorf("open via %s: architecture %q, %v", path, s, err)
		}
		if got := f.Parts(); len(got) != 2 || got[0] != first {
			t.Errorf("Parts = %v", got)
		}
		var size int64
		for _, p := range f.Parts() {
			st, _ := os.Stat(p)
			size += st.Size()
		}
		if f.Size() != size {
			t.Errorf("Size %d, parts hold %d", f.Size(), size)
		}
		for i, tt := range testTensors() {
			if f.Tensors[i].Name != tt.name {
				t.Errorf("tensor %d is %s, want %s", i, f.Tensors[i].Name, tt.name)
			}
			d, err := f.TensorData(tt.name)
			if err != nil || !bytes.Equal(d, tt.data) {
				t.Errorf("tensor %s: data differs (%v)", tt.name, err)
			}
			if p, _ := f.FileOffset(&f.Tensors[i]); p != SplitPath(prefix, i/2, 2) {
				t.Errorf("tensor %s lives in %s", tt.name, p)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenSplit_MissingPart_ErrorNamesMissingFile(t *testing.T) {
	prefix := writeSplit(t, t.TempDir(), nil)
	second := SplitPath(prefix, 1, 2)
	if err := os.Remove(second); err != nil {
		t.Fatal(err)
	}
	_, err := Open(SplitPath(prefix, 0, 2))
	if err == nil || !strings.Contains(err.Error(), "missing: "+second) {
		t.Fatalf("error %v, want one naming %s as missing", err, second)
	}
}

func TestOpenSplit_CountMismatch_ErrorNamesFile(t *testing.T) {
	dir := t.TempDir()
	prefix := writeSplit(t, dir, nil)
	// Part 2 rewritten claiming to be part 2 of 3.
	w := NewWriter()
	w.Add(KeySplitNo, Uint16Value(1))
	w.Add(KeySplitCount, Uint16Value(3))
	second := SplitPath(prefix, 1, 2)
	if err := w.WriteFile(second); err != nil {
		t.Fatal(err)
	}
	_, err := Open(SplitPath(prefix, 0, 2))
	if err == nil || !strings.Contains(err.Error(), second) || !strings.Contains(err.Error(), "split mismatch") {
		t.Fatalf("error %v, want a split mismatch naming %s", err, second)
	}

	// A first part whose split.count disagrees with its name.
	renamed := filepath.Join(dir, "other-00001-of-00003.gguf")
	if err := os.Rename(SplitPath(prefix, 0, 2), renamed); err != nil {
		t.Fatal(err)
	}
	_, err = Open(renamed)
	if err == nil || !strings.Contains(err.Error(), "file name says 3 parts") {
		t.Fatalf("error %v, want a name/count mismatch", err)
	}
}

func TestOpenSplit_TensorsCountMismatch_IsError(t *testing.T) {
	prefix := writeSplit(t, t.TempDir(), func(part int, w *Writer) {
		if part == 1 {
			w.AddTensor("extra", 0, []uint64{1}, make([]byte, 4))
		}
	})
	_, err := Open(SplitPath(prefix, 0, 2))
	if err == nil || !strings.Contains(err.Error(), "split.tensors.count is 4 but the 2 parts hold 5 tensors") {
		t.Fatalf("error %v", err)
	}
}

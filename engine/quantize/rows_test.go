package quantize

import (
	"bytes"
	"errors"
	"testing"
)

func TestStreamRows_InOrderForAnyWorkerCountAndStopsOnError(t *testing.T) {
	const nrows, rowBytes = 3000, 1000 // several chunks of ~1 MiB
	fill := func(first, n int, dst []byte) error {
		for r := 0; r < n; r++ {
			for i := 0; i < rowBytes; i++ {
				dst[r*rowBytes+i] = byte((first + r) * 7)
			}
		}
		return nil
	}
	var want []byte
	for _, workers := range []int{1, 2, 5} {
		var buf bytes.Buffer
		if err := StreamRows(&buf, nrows, rowBytes, workers, fill); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != nrows*rowBytes {
			t.Fatalf("workers %d: %d bytes", workers, buf.Len())
		}
		if want == nil {
			want = buf.Bytes()
		} else if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("workers %d: output differs from 1 worker", workers)
		}
	}
	boom := errors.New("boom")
	err := StreamRows(&bytes.Buffer{}, nrows, rowBytes, 3, func(first, n int, dst []byte) error {
		if first > 1000 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if err := StreamRows(&bytes.Buffer{}, 1, 0, 1, fill); err == nil {
		t.Error("zero row size accepted")
	}
}

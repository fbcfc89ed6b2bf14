package quant

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// blkRefDir holds the reference quantizer's vectors, relative to this
// package directory (the test's working directory).
const blkRefDir = "../../../shared/testdata/quant"

const (
	blkRefRows = 32
	blkRefCols = 256
)

// blkRefInput loads input.f32, or skips the test when the shared test data is
// absent.
func blkRefInput(t testing.TB) [][]float32 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(blkRefDir, "input.f32"))
	if os.IsNotExist(err) {
		t.Skipf("reference vectors absent (%s): %v", blkRefDir, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != blkRefRows*blkRefCols*4 {
		t.Fatalf("input.f32: %d bytes, want %d", len(raw), blkRefRows*blkRefCols*4)
	}
	rows := make([][]float32, blkRefRows)
	for r := range rows {
		rows[r] = make([]float32, blkRefCols)
		for c := range rows[r] {
			rows[r][c] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(r*blkRefCols+c):]))
		}
	}
	return rows
}

// blkField names the field of a block-format block at byte offset off.
func blkField(t Type, off int) string {
	type span struct {
		end  int
		name string
	}
	var spans []span
	switch t {
	case F16, BF16:
		return "value"
	case Q4_0:
		spans = []span{{2, "d"}, {18, "qs"}}
	case Q4_1:
		spans = []span{{2, "d"}, {4, "m"}, {20, "qs"}}
	case Q5_0:
		spans = []span{{2, "d"}, {6, "qh"}, {22, "qs"}}
	case Q5_1:
		spans = []span{{2, "d"}, {4, "m"}, {8, "qh"}, {24, "qs"}}
	case Q8_0:
		spans = []span{{2, "d"}, {34, "qs"}}
	}
	for _, s := range spans {
		if off < s.end {
			return s.name
		}
	}
	return "?"
}

// Every byte of every row must equal the reference quantizer's output.
func TestQuantizeBlockTypes_ByteIdenticalToReference(t *testing.T) {
	rows := blkRefInput(t)
	cases := []struct {
		typ  Type
		file string
	}{
		{F16, "f16.bin"}, {BF16, "bf16.bin"},
		{Q4_0, "q4_0.bin"}, {Q4_1, "q4_1.bin"},
		{Q5_0, "q5_0.bin"}, {Q5_1, "q5_1.bin"},
		{Q8_0, "q8_0.bin"},
	}
	for _, c := range cases {
		t.Run(c.typ.String(), func(t *testing.T) {
			rowBytes, err := c.typ.RowBytes(blkRefCols)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(blkRefDir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != blkRefRows*rowBytes {
				t.Fatalf("%s: %d bytes, want %d rows x %d", c.file, len(want), blkRefRows, rowBytes)
			}
			bb := c.typ.BlockBytes()
			mismatches := 0
			got := make([]byte, rowBytes)
			for r, row := range rows {
				if err := Quantize(c.typ, row, got); err != nil {
					t.Fatal(err)
				}
				ref := want[r*rowBytes : (r+1)*rowBytes]
				for off := range got {
					if got[off] == ref[off] {
						continue
					}
					mismatches++
					if mismatches <= 10 {
						t.Errorf("row %d block %d byte %d (row offset %d, field %s): got %#02x want %#02x",
							r, off/bb, off%bb, off, blkField(c.typ, off%bb), got[off], ref[off])
					}
				}
			}
			if mismatches > 10 {
				t.Errorf("%d mismatching bytes in all", mismatches)
			}
		})
	}
}

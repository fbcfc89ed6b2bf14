package session

import (
	"bytes"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
)

// FuzzReadSession: Read never panics nor allocates past the file, and a
// file it accepts is exactly the file Encode writes of what was read (no
// byte of an accepted file goes unchecked or is read two ways). The seed
// corpus is a valid file of every KV format, with and without a sampler,
// and every refusal of the refusal test; testdata/fuzz/FuzzReadSession
// holds the inputs worth keeping that fuzzing found.
func FuzzReadSession(f *testing.F) {
	for _, format := range kv.Formats() {
		id := testIdentity(format)
		f.Add(encode(f, id, testContents(id, 5, 4, true)))
		f.Add(encode(f, id, testContents(id, 2, 2, false)))
	}
	for _, c := range refusals(f) {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		readSession(t, data)
		// The same bytes with every checksum made right: the fields
		// behind the checksums get fuzzed too.
		readSession(t, withChecksums(data))
	})
}

// readSession reads data and, when Read accepts it, checks what was read.
func readSession(t *testing.T, data []byte) {
	r, err := Read(bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		return
	}
	h := r.Header()
	var cells []byte
	if err := r.ReadKV(func(layer int, side graph.KVSide, cell int, rows []byte) error {
		cells = append(cells, rows...)
		return nil
	}); err != nil {
		t.Fatalf("accepted, then ReadKV: %v", err)
	}
	rb := kv.RowBytes(h.KVFormat, h.RowLen)
	if len(cells) != 2*h.NLayer*h.NKV*rb {
		t.Fatalf("ReadKV gave %d bytes, want 2 x %d x %d x %d", len(cells), h.NLayer, h.NKV, rb)
	}
	off := 0
	c := Contents{Backend: h.Backend, Tokens: r.Tokens(), NKV: h.NKV, Sampler: r.Sampler(),
		KV: func(layer int, side graph.KVSide, cell int, dst []byte) error {
			off += copy(dst, cells[off:])
			return nil
		}}
	var out bytes.Buffer
	if err := Encode(&out, h.Identity, c); err != nil {
		t.Fatalf("accepted file not writable: %v", err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("accepted file written again differs: %d bytes, was %d", out.Len(), len(data))
	}
}

// withChecksums is a copy of data with the header's CRC recomputed and,
// when the header then holds and the sections fit, every section's.
func withChecksums(data []byte) []byte {
	b := bytes.Clone(data)
	if len(b) < headerSize {
		return b
	}
	fixHeader(b)
	h, err := readHeader(bytes.NewReader(b), int64(len(b)), nil)
	if err != nil {
		return b
	}
	l, err := h.layout(nil)
	if err != nil || l.fits(uint64(len(b)), nil) != nil {
		return b
	}
	for _, s := range []section{l.tokens, l.kv, l.sampler} {
		fixSection(b, s)
	}
	return b
}

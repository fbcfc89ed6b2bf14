package session

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"os"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/sample"
)

// Reader is a session file whose header and sections were checked. Its
// tokens and sampler are in memory; its KV cells are read again from the
// file by ReadKV.
type Reader struct {
	off     checks // checks turned off (tests only)
	h       Header
	tokens  []int32
	sampler *Sampler
	r       io.ReaderAt
	path    string
	lay     layout
	kvCRC   uint32
	closer  io.Closer
}

// Open reads and checks the session file at path: the header (against
// want, when not nil), the file's size against the header, then every
// section's checksum, tokens and sampler. Nothing is allocated before the
// header and the size agree, and no allocation exceeds what the file
// holds. The KV cells are read later, by ReadKV.
func Open(path string, want *Identity) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("session: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("session: %s: not a regular file", path)
	}
	r, err := Read(f, st.Size(), want)
	if err != nil {
		f.Close()
		return nil, withPath(err, path)
	}
	r.path, r.closer = path, f
	return r, nil
}

// withPath puts path into a refusal.
func withPath(err error, path string) error {
	if path == "" {
		return err
	}
	var re *RefusedError
	if errors.As(err, &re) {
		c := *re
		c.Path = path
		return &c
	}
	return fmt.Errorf("session %s: %w", path, err)
}

// Peek reads and checks the header of the session file at path, and
// nothing else (a caller choosing the context length to load a model with).
func Peek(path string) (Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, fmt.Errorf("session: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Header{}, fmt.Errorf("session: %w", err)
	}
	h, err := readHeader(f, st.Size(), nil)
	if err != nil {
		return Header{}, withPath(err, path)
	}
	return h, nil
}

// Read is Open of a file of size bytes read through r.
func Read(r io.ReaderAt, size int64, want *Identity) (*Reader, error) {
	return read(r, size, want, nil)
}

// read is Read with the checks in off turned off (tests only).
func read(r io.ReaderAt, size int64, want *Identity, off checks) (*Reader, error) {
	h, err := readHeader(r, size, off)
	if err != nil {
		return nil, err
	}
	if want != nil {
		if err := h.match(*want, off); err != nil {
			return nil, err
		}
	}
	lay, err := h.layout(off)
	if err != nil {
		return nil, err
	}
	if err := lay.fits(uint64(size), off); err != nil {
		return nil, err
	}
	rd := &Reader{h: h, r: r, lay: lay, off: off}
	if err := rd.readTokens(); err != nil {
		return nil, err
	}
	if rd.kvCRC, err = rd.streamKV(nil); err != nil {
		return nil, err
	}
	if err := rd.readSampler(); err != nil {
		return nil, err
	}
	return rd, nil
}

// Header is the file's header.
func (r *Reader) Header() Header { return r.h }

// Tokens are the context's n_tokens ids (the Reader's slice).
func (r *Reader) Tokens() []int32 { return r.tokens }

// Sampler is the saved sampler, nil when the file has none.
func (r *Reader) Sampler() *Sampler { return r.sampler }

// ReadKV reads the KV section again and hands it to fn in file order:
// layer by layer, K then V, whole cells from cell on (rows is reused
// between calls). When the bytes read differ from those Open checked (the
// file changed since), it returns a refusal of the kv section after the
// last call; fn has then been given cells that must not be used.
func (r *Reader) ReadKV(fn func(layer int, side graph.KVSide, cell int, rows []byte) error) error {
	crc, err := r.streamKV(fn)
	if err != nil {
		return withPath(err, r.path)
	}
	if crc != r.kvCRC {
		return withPath(refuse("kv", "the file changed since it was checked (checksum %08x, was %08x)", crc, r.kvCRC), r.path)
	}
	return nil
}

// Close closes the file Open opened.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	err := r.closer.Close()
	r.closer = nil
	return err
}

// readHeader reads and checks the fixed header: magic, version, checksum,
// then every field on its own (not against an engine: see match).
func readHeader(r io.ReaderAt, size int64, off checks) (Header, error) {
	var b [headerSize]byte
	n := int(min(max(size, 0), headerSize))
	if n > 0 {
		got, err := r.ReadAt(b[:n], 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return Header{}, fmt.Errorf("read header: %w", err)
		}
		n = got
	}
	m := min(n, len(Magic))
	if err := off.check(string(b[:m]) == Magic[:m], "magic", "not a minfer session file (it starts %q)", b[:m]); err != nil {
		return Header{}, err
	}
	if n < 12 { // not even the version: nothing more to say
		return Header{}, refuse("header", "truncated: a file of %d bytes, the header takes %d", size, headerSize)
	}
	var h Header
	v := binary.LittleEndian.Uint32(b[8:])
	if err := off.check(v <= Version, "version", "the file is format version %d, this minfer reads up to %d (written by a newer minfer)", v, Version); err != nil {
		return h, err
	}
	if err := off.check(v != 0, "version", "0 is no session format version"); err != nil {
		return h, err
	}
	if err := off.check(n == headerSize, "header", "truncated: a file of %d bytes, the header takes %d", size, headerSize); err != nil {
		return h, err
	}
	stored, sum := binary.LittleEndian.Uint32(b[headerSize-crcSize:]), crc32.Checksum(b[:headerSize-crcSize], castagnoli)
	if err := off.check(stored == sum, "header", "checksum mismatch (stored %08x, computed %08x): the file is corrupt", stored, sum); err != nil {
		return h, err
	}
	flags := binary.LittleEndian.Uint32(b[12:])
	if err := off.check(flags&^knownFlags == 0, "flags", "unknown bits %#x (written by a newer minfer?)", flags&^knownFlags); err != nil {
		return h, err
	}
	h.Version, h.HasSampler = int(v), flags&flagSampler != 0
	copy(h.ModelSHA256[:], b[16:48])
	var err error
	if h.Arch, err = padded("arch", b[48:48+archSize], off); err != nil {
		return h, err
	}
	if h.Backend, err = padded("backend", b[80:80+backendSize], off); err != nil {
		return h, err
	}
	u := func(off int) int { return int(binary.LittleEndian.Uint32(b[off:])) }
	code := u(96)
	h.KVFormat = kv.Format(code)
	h.NCtx, h.NLayer, h.RowLen = u(100), u(104), u(108)
	rowBytes, nVocab := u(112), u(116)
	h.NVocab, h.NTokens, h.NKV = nVocab, u(120), u(124)
	if err := off.check(code <= int(kv.Q8_0), "kv_format", "unknown format code %d (0 f32, 1 f16, 2 q8_0)", code); err != nil {
		return h, err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"n_ctx", h.NCtx}, {"n_layer", h.NLayer}, {"row_len", h.RowLen}, {"n_vocab", h.NVocab}} {
		if err := off.check(f.v > 0, f.name, "0: want a positive count"); err != nil {
			return h, err
		}
	}
	want := kv.RowBytes(h.KVFormat, h.RowLen)
	if err := off.check(want > 0 && rowBytes == want, "row_bytes", "%d, but %s rows of %d values take %d bytes", rowBytes, h.KVFormat, h.RowLen, want); err != nil {
		return h, err
	}
	if err := off.check(h.NTokens <= h.NCtx, "n_tokens", "%d tokens do not fit n_ctx %d", h.NTokens, h.NCtx); err != nil {
		return h, err
	}
	if err := off.check(h.NKV <= h.NTokens, "n_kv", "%d cells for %d tokens", h.NKV, h.NTokens); err != nil {
		return h, err
	}
	return h, nil
}

// padded decodes a NUL-padded printable-ASCII field.
func padded(field string, b []byte, off checks) (string, error) {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	for i, c := range b {
		ok := c >= 0x20 && c < 0x7f
		if i >= n {
			ok = c == 0
		}
		if err := off.check(ok, field, "byte %d is %#x: want printable ASCII, NUL-padded", i, c); err != nil {
			return "", err
		}
	}
	return string(b[:n]), nil
}

// match refuses a header whose identity is not want's, naming the first
// field that differs.
func (h Header) match(want Identity, off checks) error {
	if err := off.check(h.ModelSHA256 == want.ModelSHA256, "model_sha256", "the file is of model %s, this model is %s",
		short(h.ModelSHA256), short(want.ModelSHA256)); err != nil {
		return err
	}
	if err := off.check(h.Arch == want.Arch, "arch", "the file has %q, this model is %q", h.Arch, want.Arch); err != nil {
		return err
	}
	if err := off.check(h.KVFormat == want.KVFormat, "kv_format", "the file has %s, this run uses %s", h.KVFormat, want.KVFormat); err != nil {
		return err
	}
	if err := off.check(h.NCtx == want.NCtx, "n_ctx", "the file has %d, this run uses %d", h.NCtx, want.NCtx); err != nil {
		return err
	}
	for _, f := range []struct {
		name       string
		file, this int
	}{{"n_layer", h.NLayer, want.NLayer}, {"row_len", h.RowLen, want.RowLen}, {"n_vocab", h.NVocab, want.NVocab}} {
		if err := off.check(f.file == f.this, f.name, "the file has %d, this model has %d", f.file, f.this); err != nil {
			return err
		}
	}
	return nil
}

// short is the first 12 hex digits of a sha256.
func short(s [32]byte) string { return hex.EncodeToString(s[:6]) + "…" }

// layout places the sections of a checked header; a KV section too large to
// address is refused.
func (h Header) layout(c checks) (layout, error) {
	var l layout
	rb := uint64(kv.RowBytes(h.KVFormat, h.RowLen))               // < 2^35
	hi, kvLen := bits.Mul64(uint64(h.NLayer)*uint64(h.NKV), 2*rb) // n_layer, n_kv < 2^32
	if err := c.check(hi == 0 && kvLen <= math.MaxInt64/2, "n_kv", "2 x %d layers x %d cells x %d bytes overflow", h.NLayer, h.NKV, rb); err != nil {
		return l, err
	}
	smp := uint64(0)
	if h.HasSampler {
		smp = samplerSize
	}
	off := uint64(headerSize)
	for _, s := range []struct {
		sec  *section
		name string
		tag  string
		n    uint64
	}{{&l.tokens, "tokens", tagTokens, 4 * uint64(h.NTokens)}, {&l.kv, "kv", tagKV, kvLen}, {&l.sampler, "sampler", tagSampler, smp}} {
		*s.sec = section{name: s.name, tag: s.tag, off: off + frameSize, len: s.n}
		off = s.sec.end()
	}
	l.total = off
	return l, nil
}

// fits refuses a file whose size is not the one the header describes,
// naming the section a truncation cut into.
func (l layout) fits(size uint64, off checks) error {
	for _, s := range []section{l.tokens, l.kv, l.sampler} {
		if err := off.check(size >= s.end(), s.name, "truncated: the file ends at byte %d, the section spans bytes %d to %d",
			size, s.off-frameSize, s.end()); err != nil {
			return err
		}
	}
	return off.check(size == l.total, "file size", "%d bytes, the header describes %d (trailing data)", size, l.total)
}

// frame reads and checks a section's tag and length and starts its CRC.
func (r *Reader) frame(s section) (uint32, error) {
	var b [frameSize]byte
	if _, err := r.r.ReadAt(b[:], int64(s.off-frameSize)); err != nil {
		return 0, fmt.Errorf("read %s section: %w", s.name, err)
	}
	if err := r.off.check(string(b[:4]) == s.tag, s.name, "section tag %q, want %q", b[:4], s.tag); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(b[4:])
	if err := r.off.check(n == s.len, s.name, "section length %d, the header describes %d", n, s.len); err != nil {
		return 0, err
	}
	return crc32.Update(0, castagnoli, b[:]), nil
}

// readAt is r.ReadAt of a payload, which may be empty (a bytes.Reader
// answers io.EOF to an empty read at its end).
func readAt(r io.ReaderAt, p []byte, off uint64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return r.ReadAt(p, int64(off))
}

// sum checks a section's stored CRC against crc.
func (r *Reader) sum(s section, crc uint32) error {
	var b [crcSize]byte
	if _, err := r.r.ReadAt(b[:], int64(s.off+s.len)); err != nil {
		return fmt.Errorf("read %s section: %w", s.name, err)
	}
	stored := binary.LittleEndian.Uint32(b[:])
	return r.off.check(stored == crc, s.name, "checksum mismatch (stored %08x, computed %08x): the file is corrupt", stored, crc)
}

func (r *Reader) readTokens() error {
	s := r.lay.tokens
	crc, err := r.frame(s)
	if err != nil {
		return err
	}
	b := make([]byte, s.len) // 4 x n_tokens, inside the file
	if _, err := readAt(r.r, b, s.off); err != nil {
		return fmt.Errorf("read tokens section: %w", err)
	}
	if err := r.sum(s, crc32.Update(crc, castagnoli, b)); err != nil {
		return err
	}
	r.tokens = make([]int32, r.h.NTokens)
	for i := range r.tokens {
		id := int32(binary.LittleEndian.Uint32(b[4*i:]))
		if err := r.off.check(id >= 0 && int(id) < r.h.NVocab, "tokens", "id %d at %d is outside the vocabulary of %d", id, i, r.h.NVocab); err != nil {
			return err
		}
		r.tokens[i] = id
	}
	return nil
}

// streamKV reads the KV section in chunks of whole cells, handing each to
// fn when not nil, and returns its CRC after checking the frame (and, when
// fn is nil, the stored CRC).
func (r *Reader) streamKV(fn func(layer int, side graph.KVSide, cell int, rows []byte) error) (uint32, error) {
	s := r.lay.kv
	crc, err := r.frame(s)
	if err != nil {
		return 0, err
	}
	rb := kv.RowBytes(r.h.KVFormat, r.h.RowLen)
	per := max(1, min(chunkBytes/rb, r.h.NKV)) // cells per read
	buf := make([]byte, min(uint64(per*rb), s.len))
	off := int64(s.off)
	for l := 0; l < r.h.NLayer && r.h.NKV > 0; l++ {
		for _, side := range []graph.KVSide{graph.SideK, graph.SideV} {
			for c := 0; c < r.h.NKV; c += per {
				rows := buf[:min(per, r.h.NKV-c)*rb]
				if _, err := r.r.ReadAt(rows, off); err != nil {
					return 0, fmt.Errorf("read kv section: %w", err)
				}
				off += int64(len(rows))
				crc = crc32.Update(crc, castagnoli, rows)
				if fn != nil {
					if err := fn(l, side, c, rows); err != nil {
						return 0, err
					}
				}
			}
		}
	}
	if fn != nil {
		return crc, nil
	}
	return crc, r.sum(s, crc)
}

func (r *Reader) readSampler() error {
	s := r.lay.sampler
	crc, err := r.frame(s)
	if err != nil {
		return err
	}
	var b [samplerSize]byte
	p := b[:s.len]
	if _, err := readAt(r.r, p, s.off); err != nil {
		return fmt.Errorf("read sampler section: %w", err)
	}
	if err := r.sum(s, crc32.Update(crc, castagnoli, p)); err != nil {
		return err
	}
	if !r.h.HasSampler {
		return nil
	}
	smp, err := decodeSampler(b, r.off)
	if err != nil {
		return err
	}
	r.sampler = &smp
	return nil
}

func decodeSampler(b [samplerSize]byte, off checks) (Sampler, error) {
	le := binary.LittleEndian
	var s Sampler
	s.Params = sample.Params{
		Temp:          math.Float32frombits(le.Uint32(b[0:])),
		TopP:          math.Float32frombits(le.Uint32(b[4:])),
		RepeatPenalty: math.Float32frombits(le.Uint32(b[8:])),
		TopK:          int(int32(le.Uint32(b[12:]))),
		RepeatLastN:   int(int32(le.Uint32(b[16:]))),
		Greedy:        le.Uint32(b[20:]) == 1,
		Seed:          le.Uint64(b[24:]),
	}
	s.RNG = [2]uint64{le.Uint64(b[32:]), le.Uint64(b[40:])}
	if err := off.check(le.Uint32(b[20:]) <= 1, "sampler", "greedy flag %d: want 0 or 1", le.Uint32(b[20:])); err != nil {
		return s, err
	}
	if err := s.Params.Validate(); err != nil && !off["sampler"] {
		return s, refuse("sampler", "%v", err)
	}
	return s, nil
}

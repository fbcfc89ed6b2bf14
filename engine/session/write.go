package session

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
)

// The sampler payload: temp f32, top_p f32, repeat_penalty f32, top_k i32,
// repeat_last_n i32, greedy u32 (0 or 1), seed u64, rng_hi u64, rng_lo u64.
func encodeSampler(s Sampler) [samplerSize]byte {
	var b [samplerSize]byte
	le := binary.LittleEndian
	p := s.Params
	le.PutUint32(b[0:], math.Float32bits(p.Temp))
	le.PutUint32(b[4:], math.Float32bits(p.TopP))
	le.PutUint32(b[8:], math.Float32bits(p.RepeatPenalty))
	le.PutUint32(b[12:], uint32(int32(p.TopK)))
	le.PutUint32(b[16:], uint32(int32(p.RepeatLastN)))
	if p.Greedy {
		le.PutUint32(b[20:], 1)
	}
	le.PutUint64(b[24:], p.Seed)
	le.PutUint64(b[32:], s.RNG[0])
	le.PutUint64(b[40:], s.RNG[1])
	return b
}

// Contents is what Write saves besides the identity.
type Contents struct {
	Backend string  // the backend whose cells these are, for the record
	Tokens  []int32 // the context
	NKV     int     // the first NKV tokens have cells in KV
	Sampler *Sampler
	// KV fills dst with whole cells of a layer's K or V region from cell
	// on, as stored in the identity's KV format (graph.KVCells).
	KV func(layer int, side graph.KVSide, cell int, dst []byte) error
}

// Write saves a session to path atomically: it writes a temporary file
// beside path, syncs it and renames it over path, so a failed save leaves
// whatever path held before untouched. The file is readable by its owner
// only (it holds the conversation).
func Write(path string, id Identity, c Contents) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("session: save: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("session: save %s: %w", path, err)
		}
	}()
	w := bufio.NewWriterSize(tmp, chunkBytes)
	if err = Encode(w, id, c); err != nil {
		return err
	}
	if err = w.Flush(); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Encode writes a session to w. Contents that a reader would refuse (a
// token outside the vocabulary, more cells than tokens, ...) are an error
// before anything is written.
func Encode(w io.Writer, id Identity, c Contents) error {
	h := Header{Version: Version, Identity: id, Backend: c.Backend, NTokens: len(c.Tokens), NKV: c.NKV, HasSampler: c.Sampler != nil}
	hb, err := h.encode()
	if err != nil {
		return err
	}
	for i, t := range c.Tokens {
		if t < 0 || int(t) >= id.NVocab {
			return fmt.Errorf("token %d at %d is outside the vocabulary of %d", t, i, id.NVocab)
		}
	}
	if c.Sampler != nil {
		if err := c.Sampler.Params.Validate(); err != nil {
			return fmt.Errorf("sampler: %w", err)
		}
	}
	if c.NKV > 0 && c.KV == nil {
		return errors.New("no KV source for the cells")
	}
	lay, err := h.layout(nil)
	if err != nil {
		return err
	}
	if _, err := w.Write(hb[:]); err != nil {
		return err
	}
	sw := sectionWriter{w: w}
	sw.start(lay.tokens)
	tb := make([]byte, 4*len(c.Tokens))
	for i, t := range c.Tokens {
		binary.LittleEndian.PutUint32(tb[4*i:], uint32(t))
	}
	sw.write(tb)
	sw.end()
	sw.start(lay.kv)
	rb := kv.RowBytes(id.KVFormat, id.RowLen)
	per := max(1, min(chunkBytes/rb, c.NKV))
	buf := make([]byte, min(per*rb, int(lay.kv.len)))
	for l := 0; l < id.NLayer && c.NKV > 0 && sw.err == nil; l++ {
		for _, side := range []graph.KVSide{graph.SideK, graph.SideV} {
			for cell := 0; cell < c.NKV && sw.err == nil; cell += per {
				rows := buf[:min(per, c.NKV-cell)*rb]
				if err := c.KV(l, side, cell, rows); err != nil {
					return fmt.Errorf("KV cells of layer %d: %w", l, err)
				}
				sw.write(rows)
			}
		}
	}
	sw.end()
	sw.start(lay.sampler)
	if c.Sampler != nil {
		sb := encodeSampler(*c.Sampler)
		sw.write(sb[:])
	}
	sw.end()
	return sw.err
}

// encode checks h and lays it out.
func (h Header) encode() ([headerSize]byte, error) {
	var b [headerSize]byte
	if len(h.Arch) > archSize || len(h.Backend) > backendSize {
		return b, fmt.Errorf("arch %q or backend %q too long (%d, %d bytes at most)", h.Arch, h.Backend, archSize, backendSize)
	}
	for _, s := range []string{h.Arch, h.Backend} {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] >= 0x7f {
				return b, fmt.Errorf("arch %q or backend %q is not printable ASCII", h.Arch, h.Backend)
			}
		}
	}
	rb := kv.RowBytes(h.KVFormat, h.RowLen)
	switch {
	case h.KVFormat < kv.F32 || h.KVFormat > kv.Q8_0:
		return b, fmt.Errorf("KV format %s", h.KVFormat)
	case h.NCtx <= 0 || h.NLayer <= 0 || h.RowLen <= 0 || h.NVocab <= 0 || rb <= 0:
		return b, fmt.Errorf("n_ctx %d, n_layer %d, row_len %d (%s), n_vocab %d: want positive counts", h.NCtx, h.NLayer, h.RowLen, h.KVFormat, h.NVocab)
	case max(h.NCtx, h.NLayer, h.RowLen, h.NVocab, rb) > math.MaxUint32:
		return b, errors.New("a count exceeds 32 bits")
	case h.NTokens > h.NCtx || h.NKV < 0 || h.NKV > h.NTokens:
		return b, fmt.Errorf("%d tokens, %d cells in a context of %d", h.NTokens, h.NKV, h.NCtx)
	}
	le := binary.LittleEndian
	copy(b[:], Magic)
	le.PutUint32(b[8:], uint32(h.Version))
	if h.HasSampler {
		le.PutUint32(b[12:], flagSampler)
	}
	copy(b[16:48], h.ModelSHA256[:])
	copy(b[48:48+archSize], h.Arch)
	copy(b[80:80+backendSize], h.Backend)
	for i, v := range []int{int(h.KVFormat), h.NCtx, h.NLayer, h.RowLen, rb, h.NVocab, h.NTokens, h.NKV} {
		le.PutUint32(b[96+4*i:], uint32(v))
	}
	le.PutUint32(b[headerSize-crcSize:], crc32.Checksum(b[:headerSize-crcSize], castagnoli))
	return b, nil
}

// sectionWriter frames sections and keeps the first write error.
type sectionWriter struct {
	w   io.Writer
	crc uint32
	err error
}

func (s *sectionWriter) write(p []byte) {
	if s.err != nil {
		return
	}
	s.crc = crc32.Update(s.crc, castagnoli, p)
	_, s.err = s.w.Write(p)
}

func (s *sectionWriter) start(sec section) {
	var b [frameSize]byte
	copy(b[:], sec.tag)
	binary.LittleEndian.PutUint64(b[4:], sec.len)
	s.crc = 0
	s.write(b[:])
}

func (s *sectionWriter) end() {
	var b [crcSize]byte
	binary.LittleEndian.PutUint32(b[:], s.crc)
	if s.err == nil {
		_, s.err = s.w.Write(b[:])
	}
}

// Package session is minfer's saved-session file (the design's ADR-0014:
// a versioned, checksummed file, never a memory dump). It holds an
// engine's context — its tokens and the KV cells they produced, in the
// engine's KV format exactly as stored — and the sampler's state, so that a
// run restored from it continues bitwise like the run that was never
// stopped.
//
// The file, little-endian throughout:
//
//	header   132 bytes: magic "MINFSESS", version, flags, model sha256,
//	         architecture, backend, kv_format, n_ctx, n_layer, row_len,
//	         row_bytes, n_vocab, n_tokens, n_kv, CRC32C of the 128 before it
//	tokens   "TOKS", u64 length, n_tokens x i32, CRC32C
//	kv       "KVCL", u64 length, per layer: the K rows then the V rows of
//	         cells [0, n_kv), n_kv x row_bytes each; CRC32C
//	sampler  "SMPL", u64 length, 48 bytes of parameters and generator
//	         state (0 bytes without one), CRC32C
//
// A section's CRC32C (Castagnoli) covers its tag, length and payload. The
// header fixes every section's length, so the reader checks the file's size
// against it before it allocates anything; every refusal is one line
// naming the field (a *RefusedError wrapping ErrRefused).
//
// Tokens: the context is n_tokens ids, of which the first n_kv have their
// cells in the KV section. The rest (n_tokens - n_kv, usually the one token
// a generation sampled last) were never forwarded: a run that continues
// the session forwards them first.
package session

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/sample"
)

// Magic starts every session file.
const Magic = "MINFSESS"

// Version is the format version this package writes and the newest it
// reads.
const Version = 1

// The layout of version 1.
const (
	headerSize  = 132 // the fixed header, its CRC included
	archSize    = 32  // the architecture, NUL-padded ASCII
	backendSize = 16  // the backend that wrote the file, NUL-padded ASCII
	frameSize   = 12  // a section's tag and u64 length
	crcSize     = 4
	samplerSize = 48 // the sampler section's payload when there is one

	flagSampler = 1 << 0 // the sampler section holds a sampler
	knownFlags  = flagSampler

	// chunkBytes bounds the buffer the KV section is streamed through.
	chunkBytes = 1 << 20
)

// The section tags, in file order.
const (
	tagTokens  = "TOKS"
	tagKV      = "KVCL"
	tagSampler = "SMPL"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Identity is what a session shares with every engine that may restore it:
// a file whose identity differs from the engine's is refused.
type Identity struct {
	ModelSHA256 [32]byte // sha256 of the GGUF file (its parts in order)
	Arch        string   // general.architecture, at most 32 ASCII bytes
	KVFormat    kv.Format
	NCtx        int // the context length (KV cells) of the engine
	NLayer      int
	RowLen      int // values of one K or V cell row: n_head_kv * head_dim
	NVocab      int
}

// Header is a session file's header.
type Header struct {
	Version int
	Identity
	Backend    string // the backend that wrote the file ("cpu"), for the record
	NTokens    int    // tokens of the context
	NKV        int    // of which the first NKV have their cells saved
	HasSampler bool
}

// Sampler is the sampler state a session carries: the parameters it was
// saved with and the generator's state (sample.Sampler.RNG).
type Sampler struct {
	Params sample.Params
	RNG    [2]uint64
}

// ErrRefused is wrapped by every refusal of a file's contents: not a
// session, a newer version, another model or KV format, a truncated or
// corrupt file. Anything else the reader returns is an I/O error.
var ErrRefused = errors.New("session file refused")

// RefusedError is a refusal of a session file: Field names the header
// field or section at fault.
type RefusedError struct {
	Path  string // "" when read from an io.ReaderAt
	Field string
	Msg   string
}

func (e *RefusedError) Error() string {
	if e.Path != "" {
		return "session " + e.Path + ": " + e.Field + ": " + e.Msg
	}
	return "session: " + e.Field + ": " + e.Msg
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// checks names the checks turned off (nil: all on). Only a test turns one
// off, through read, to show that the test of each refusal fails without
// its check (TestRefusals_FailWithTheirCheckOff); Open, Read and Peek pass
// nil.
type checks map[string]bool

func refuse(field, format string, args ...any) error {
	return &RefusedError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// check refuses field unless ok (or the check is off).
func (c checks) check(ok bool, field, format string, args ...any) error {
	if ok || c[field] {
		return nil
	}
	return refuse(field, format, args...)
}

// layout is where the sections lie, from a checked header.
type layout struct {
	tokens, kv, sampler section
	total               uint64 // the file size the header describes
}

type section struct {
	name, tag string
	off, len  uint64 // payload offset and length; the frame is before off, the CRC after
}

func (s section) end() uint64 { return s.off + s.len + crcSize }

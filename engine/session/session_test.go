package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/graph"
	"github.com/minfer-go/minfer/engine/kv"
	"github.com/minfer-go/minfer/engine/sample"
)

func testIdentity(f kv.Format) Identity {
	return Identity{ModelSHA256: sha256.Sum256([]byte("model")), Arch: "qwen2", KVFormat: f, NCtx: 64, NLayer: 2, RowLen: 32, NVocab: 1000}
}

// cellByte is byte j of the row of cell c of a layer's side region: every
// byte of a test session's KV section says where it belongs.
func cellByte(layer int, side graph.KVSide, c, j int) byte {
	return byte(layer*67 + int(side)*29 + c*13 + j*7)
}

// cellSource is a KV source of cellByte rows of rb bytes.
func cellSource(rb int) func(int, graph.KVSide, int, []byte) error {
	return func(layer int, side graph.KVSide, cell int, dst []byte) error {
		for j := range dst {
			dst[j] = cellByte(layer, side, cell+j/rb, j%rb)
		}
		return nil
	}
}

func testContents(id Identity, nTok, nKV int, withSampler bool) Contents {
	c := Contents{Backend: "cpu", NKV: nKV, KV: cellSource(kv.RowBytes(id.KVFormat, id.RowLen))}
	for i := 0; i < nTok; i++ {
		c.Tokens = append(c.Tokens, int32((i*37+5)%id.NVocab))
	}
	if withSampler {
		c.Sampler = &Sampler{Params: sample.Params{Temp: 0.8, TopK: 40, TopP: 0.95, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 7},
			RNG: [2]uint64{0x0123456789abcdef, 0xfedcba9876543210}}
	}
	return c
}

func encode(t testing.TB, id Identity, c Contents) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Encode(&b, id, c); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// validFile is a session of 5 tokens, 4 of them with cells, and a sampler.
func validFile(t testing.TB, f kv.Format) []byte {
	return encode(t, testIdentity(f), testContents(testIdentity(f), 5, 4, true))
}

// sections are the sections of a valid file.
func sections(t testing.TB, data []byte) layout {
	t.Helper()
	h, err := readHeader(bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := h.layout(nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fixHeader recomputes the header's CRC after an edit.
func fixHeader(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[headerSize-crcSize:], crc32.Checksum(b[:headerSize-crcSize], castagnoli))
	return b
}

// fixSection recomputes a section's CRC after an edit.
func fixSection(b []byte, s section) []byte {
	binary.LittleEndian.PutUint32(b[s.off+s.len:], crc32.Checksum(b[s.off-frameSize:s.off+s.len], castagnoli))
	return b
}

func TestRoundTrip_ReadsBackWhatWasWrittenInEveryFormat(t *testing.T) {
	for _, f := range kv.Formats() {
		for _, tc := range []struct {
			nTok, nKV int
			smp       bool
		}{{0, 0, false}, {5, 4, true}, {5, 5, false}, {64, 63, true}} {
			t.Run(fmt.Sprintf("%s/%d-%d-%v", f, tc.nTok, tc.nKV, tc.smp), func(t *testing.T) {
				id := testIdentity(f)
				c := testContents(id, tc.nTok, tc.nKV, tc.smp)
				path := filepath.Join(t.TempDir(), "s.session")
				if err := Write(path, id, c); err != nil {
					t.Fatal(err)
				}
				r, err := Open(path, &id)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				h := r.Header()
				if h.Identity != id || h.Version != Version || h.Backend != "cpu" || h.NTokens != tc.nTok || h.NKV != tc.nKV || h.HasSampler != tc.smp {
					t.Fatalf("header %+v", h)
				}
				if !slices.Equal(r.Tokens(), c.Tokens) {
					t.Fatalf("tokens %v, want %v", r.Tokens(), c.Tokens)
				}
				if (r.Sampler() == nil) != (c.Sampler == nil) || c.Sampler != nil && *r.Sampler() != *c.Sampler {
					t.Fatalf("sampler %+v, want %+v", r.Sampler(), c.Sampler)
				}
				rb := kv.RowBytes(f, id.RowLen)
				seen := 0
				err = r.ReadKV(func(layer int, side graph.KVSide, cell int, rows []byte) error {
					for j, b := range rows {
						if b != cellByte(layer, side, cell+j/rb, j%rb) {
							return fmt.Errorf("layer %d side %d cell %d byte %d: %d", layer, side, cell+j/rb, j%rb, b)
						}
					}
					seen += len(rows)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if want := 2 * id.NLayer * tc.nKV * rb; seen != want {
					t.Fatalf("ReadKV gave %d bytes, want %d", seen, want)
				}
				st, err := os.Stat(path)
				if err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("mode %v (%v), want 0600", st.Mode(), err)
				}
			})
		}
	}
}

// refusal is a file (or an identity to read it against) that must be
// refused naming field.
type refusal struct {
	name  string
	data  []byte
	want  *Identity
	field string
}

func refusals(t testing.TB) []refusal {
	id := testIdentity(kv.F16)
	good := validFile(t, kv.F16)
	lay := sections(t, good)
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	u32 := func(off int, v uint32) []byte {
		return edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return fixHeader(b) })
	}
	other := func(f func(*Identity)) *Identity { w := id; f(&w); return &w }
	cs := []refusal{
		{"not a session", []byte("GGUF\x03\x00\x00\x00 and more bytes of a model file"), &id, "magic"},
		{"empty file", nil, &id, "header"},
		{"newer version", u32(8, Version+1), &id, "version"},
		{"version 0", u32(8, 0), &id, "version"},
		{"header cut after the version", good[:40], &id, "header"},
		{"unknown flag", u32(12, 1<<7|flagSampler), &id, "flags"},
		{"arch not padded", edit(func(b []byte) []byte { b[48+archSize-1] = 'x'; return fixHeader(b) }), &id, "arch"},
		{"backend not ASCII", edit(func(b []byte) []byte { b[80] = 0xff; return fixHeader(b) }), &id, "backend"},
		{"unknown kv_format code", u32(96, 7), &id, "kv_format"},
		{"n_ctx 0", u32(100, 0), &id, "n_ctx"},
		{"n_layer 0", u32(104, 0), &id, "n_layer"},
		{"row_len 0", u32(108, 0), &id, "row_len"},
		{"n_vocab 0", u32(116, 0), &id, "n_vocab"},
		{"row_bytes of another format", u32(112, uint32(kv.RowBytes(kv.F32, id.RowLen))), &id, "row_bytes"},
		{"n_tokens over n_ctx", u32(120, uint32(id.NCtx+1)), &id, "n_tokens"},
		{"n_kv over n_tokens", u32(124, 6), &id, "n_kv"},
		{"another model", good, other(func(w *Identity) { w.ModelSHA256[0] ^= 1 }), "model_sha256"},
		{"another arch", good, other(func(w *Identity) { w.Arch = "qwen3" }), "arch"},
		{"another n_ctx", good, other(func(w *Identity) { w.NCtx = 128 }), "n_ctx"},
		{"another n_layer", good, other(func(w *Identity) { w.NLayer = 4 }), "n_layer"},
		{"another row_len", good, other(func(w *Identity) { w.RowLen = 128 }), "row_len"},
		{"another n_vocab", good, other(func(w *Identity) { w.NVocab = 1001 }), "n_vocab"},
		{"trailing data", append(bytes.Clone(good), 0), &id, "file size"},
		{"token outside the vocabulary", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[lay.tokens.off+8:], uint32(id.NVocab))
			return fixSection(b, lay.tokens)
		}), &id, "tokens"},
		{"negative token", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[lay.tokens.off:], 0xffffffff)
			return fixSection(b, lay.tokens)
		}), &id, "tokens"},
		{"sampler of NaN temperature", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[lay.sampler.off:], math.Float32bits(float32(math.NaN())))
			return fixSection(b, lay.sampler)
		}), &id, "sampler"},
		{"sampler greedy flag 2", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[lay.sampler.off+20:], 2)
			return fixSection(b, lay.sampler)
		}), &id, "sampler"},
		{"kv section tag of the tokens", edit(func(b []byte) []byte {
			copy(b[lay.kv.off-frameSize:], tagTokens)
			return fixSection(b, lay.kv)
		}), &id, "kv"},
		{"kv section length off by one", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[lay.kv.off-8:], lay.kv.len+1)
			return fixSection(b, lay.kv)
		}), &id, "kv"},
		{"huge claims in a small file", edit(func(b []byte) []byte {
			for _, off := range []int{100, 120, 124} { // n_ctx, n_tokens, n_kv
				binary.LittleEndian.PutUint32(b[off:], 1<<24)
			}
			return fixHeader(b)[:headerSize+100]
		}), nil, "tokens"},
	}
	// Another KV format: every pair.
	for _, ff := range kv.Formats() {
		for _, fw := range kv.Formats() {
			if ff != fw {
				w := testIdentity(fw)
				cs = append(cs, refusal{"a " + ff.String() + " file read for " + fw.String(), validFile(t, ff), &w, "kv_format"})
			}
		}
	}
	// A flipped bit in every part of every section: header fields, each
	// section's frame, payload and CRC.
	for _, p := range []struct {
		field string
		at    uint64
	}{
		{"header", 9}, {"header", 20}, {"header", 100}, {"header", 126}, {"header", 129},
		{"tokens", lay.tokens.off - 10}, {"tokens", lay.tokens.off - 3}, {"tokens", lay.tokens.off + 5}, {"tokens", lay.tokens.off + lay.tokens.len + 1},
		{"kv", lay.kv.off - 12}, {"kv", lay.kv.off - 6}, {"kv", lay.kv.off}, {"kv", lay.kv.off + lay.kv.len/2}, {"kv", lay.kv.off + lay.kv.len - 1}, {"kv", lay.kv.off + lay.kv.len + 3},
		{"sampler", lay.sampler.off - 9}, {"sampler", lay.sampler.off - 1}, {"sampler", lay.sampler.off + 33}, {"sampler", lay.sampler.off + lay.sampler.len},
	} {
		bit := byte(1) << (p.at % 8)
		if p.at == 9 { // the version's second byte: 513, "newer"
			p.field = "version"
		}
		cs = append(cs, refusal{fmt.Sprintf("bit flipped at byte %d", p.at), edit(func(b []byte) []byte { b[p.at] ^= bit; return b }), &id, p.field})
	}
	// Truncated at every section boundary, and at random points.
	cut := func(n uint64) refusal {
		f := "header"
		for _, s := range []section{lay.sampler, lay.kv, lay.tokens} {
			if n >= s.off-frameSize {
				f = s.name
				break
			}
		}
		return refusal{fmt.Sprintf("truncated to %d bytes", n), good[:n], &id, f}
	}
	for _, n := range []uint64{0, 4, 12, headerSize, lay.tokens.off, lay.tokens.end(), lay.kv.off, lay.kv.end(), lay.sampler.off, lay.sampler.end() - 1} {
		cs = append(cs, cut(n))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		cs = append(cs, cut(r.Uint64N(uint64(len(good)))))
	}
	return cs
}

// Every refusal: an error wrapping ErrRefused, a *RefusedError naming the
// field, one line, and no more memory allocated than the file holds (plus a
// constant); read against a file path, the line names the path.
func TestRefusals_NameTheFieldOnOneLineAndAllocateNoMoreThanTheFile(t *testing.T) {
	for _, c := range refusals(t) {
		t.Run(c.name, func(t *testing.T) {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			_, err := Read(bytes.NewReader(c.data), int64(len(c.data)), c.want)
			runtime.ReadMemStats(&m1)
			var re *RefusedError
			if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
				t.Fatalf("%v: want a refusal of %s", err, c.field)
			}
			if re.Field != c.field {
				t.Fatalf("refused %q (%v), want field %q", re.Field, err, c.field)
			}
			if s := err.Error(); strings.ContainsAny(s, "\n\r") || !strings.HasPrefix(s, "session: "+c.field+": ") {
				t.Errorf("message %q: want one line starting with the field", s)
			}
			if got, bound := m1.TotalAlloc-m0.TotalAlloc, 2*uint64(len(c.data))+64<<10; got > bound {
				t.Errorf("allocated %d bytes reading a file of %d (bound %d)", got, len(c.data), bound)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "bad.session")
	if err := os.WriteFile(path, u32At(validFile(t, kv.F32), 8, 2), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, nil)
	if want := "session " + path + ": version: the file is format version 2, this minfer reads up to 1"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Open: %v, want %q...", err, want)
	}
	if _, err := Peek(path); err == nil || !strings.HasPrefix(err.Error(), "session "+path+": version: ") {
		t.Errorf("Peek: %v", err)
	}
}

func u32At(b []byte, off int, v uint32) []byte {
	binary.LittleEndian.PutUint32(b[off:], v)
	return fixHeader(b)
}

// Mutation evidence: with the check of a refusal turned off, the file is no
// longer refused naming that field, so each case of the test above fails
// without its check. (Truncations inside the version are refused where no
// check can be turned off: the reader has nothing to read past them.)
func TestRefusals_FailWithTheirCheckOff(t *testing.T) {
	for _, c := range refusals(t) {
		if len(c.data) < 12 && c.field == "header" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				_, err = read(bytes.NewReader(c.data), int64(len(c.data)), c.want, checks{c.field: true})
				return err
			}()
			var re *RefusedError
			if errors.As(err, &re) && re.Field == c.field {
				t.Fatalf("still refused naming %s with its check off: %v", c.field, err)
			}
			t.Logf("check %q off: %v", c.field, err)
		})
	}
}

func TestPeek_ReadsTheHeaderOnly(t *testing.T) {
	id := testIdentity(kv.Q8_0)
	data := encode(t, id, testContents(id, 9, 8, false))
	path := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(path, data[:headerSize+3], 0o600); err != nil { // sections cut: Peek does not look
		t.Fatal(err)
	}
	h, err := Peek(path)
	if err != nil || h.Identity != id || h.NTokens != 9 || h.NKV != 8 || h.HasSampler || h.Backend != "cpu" {
		t.Fatalf("Peek = %+v, %v", h, err)
	}
	if _, err := Open(path, nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("Open of the cut file: %v", err)
	}
}

// A save that fails (the KV source errs half way, or the contents are
// invalid) leaves the file that was there byte for byte and no temporary
// file behind.
func TestWrite_FailedSaveLeavesTheOldFileUntouched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.session")
	id := testIdentity(kv.F32)
	if err := Write(path, id, testContents(id, 5, 4, true)); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	failing := testContents(id, 40, 39, true)
	calls := 0
	failing.KV = func(layer int, side graph.KVSide, cell int, dst []byte) error {
		if calls++; calls == 3 {
			return errors.New("device lost")
		}
		return nil
	}
	badToken := testContents(id, 5, 4, true)
	badToken.Tokens[2] = int32(id.NVocab)
	tooMany := testContents(id, 5, 4, true)
	tooMany.NKV = 6
	for name, c := range map[string]Contents{"failing KV source": failing, "token outside the vocabulary": badToken, "more cells than tokens": tooMany} {
		if err := Write(path, id, c); err == nil {
			t.Fatalf("%s: saved", name)
		}
		after, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(after, before) {
			t.Fatalf("%s: the old file changed (%v)", name, err)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Fatalf("%s: %d files in the folder, want the session alone", name, len(ents))
		}
	}
	if err := Write(filepath.Join(dir, "missing", "s"), id, testContents(id, 1, 1, false)); err == nil {
		t.Fatal("saved into a folder that does not exist")
	}
}

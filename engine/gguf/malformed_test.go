package gguf

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/minfer-go/minfer/engine/quant"
)

type badCase struct {
	name string
	data []byte
	want []string // substrings of the error, besides the file name
}

func f32Tensor(m *img, name string, n uint64, off uint64) *img {
	return m.tensor(name, []uint64{n}, quant.F32, off)
}

func badCases(t testing.TB) []badCase {
	good := buildImage(t)
	trunc := func(n int) []byte { return append([]byte(nil), good[:n]...) }
	gf, err := Parse("good", good)
	if err != nil {
		t.Fatal(err)
	}
	dataStart := gf.parts[0].dataStart
	lastInfoEnd := int(dataStart) - 8 // inside the padding or the last tensor's offset field

	oneTensor := func(name string, dims []uint64, typ quant.Type, off uint64, dataBytes int) []byte {
		m := header(3, 1, 0).tensor(name, dims, typ, off).align(32).zeros(dataBytes)
		return m.b
	}
	nested := func(depth int) []byte {
		m := header(3, 0, 1).str("deep").u32(uint32(TypeArray))
		for i := 0; i < depth; i++ {
			m.u32(uint32(TypeArray)).u64(1)
		}
		return m.u32(uint32(TypeUint8)).u64(0).b
	}

	return []badCase{
		{"TruncatedHeader_Magic", []byte("GG"), []string{"offset 0x0", "unexpected end of file", "header"}},
		{"TruncatedHeader_Counts", []byte("GGUF\x03\x00\x00\x00\x01\x00"), []string{"offset 0x8", "unexpected end of file", "tensor count"}},
		{"TruncatedInKV_Key", header(3, 0, 1).u64(50).raw("gen").zeros(10).b, []string{"offset 0x18", "KV #0", "key length 50 runs past end of file"}},
		{"TruncatedInKV_Value", header(3, 0, 1).str("a").u32(uint32(TypeUint32)).u8(1).u8(2).b, []string{"offset 0x25", `KV "a"`, "unexpected end of file reading uint32"}},
		{"TruncatedInKV_StringValue", header(3, 0, 1).str("a").u32(uint32(TypeString)).u64(100).raw("abc").b, []string{"offset 0x25", "string length 100 runs past end of file"}},
		{"TruncatedInTensorInfos_Writer", trunc(lastInfoEnd), []string{"tensor info #3", "unexpected end of file"}},
		{"TruncatedInTensorInfos_Offset", header(3, 1, 0).str("w").u32(2).u64(4).u64(4).u32(0).b, []string{"offset 0x39", `tensor "w"`, "unexpected end of file reading tensor offset"}},
		{"TruncatedInData", trunc(len(good) - 40), []string{`tensor "blk.0.ffn_down.weight"`, "runs past end of file"}},
		{"TruncatedBeforeData", trunc(int(dataStart) - 1), []string{"data section starts at", "past end of file"}},
		{"BadMagic", append([]byte("GGML"), good[4:]...), []string{"offset 0x0", "bad magic", "GGML"}},
		{"Version1", header(1, 0, 0).b, []string{"offset 0x4", "version 1 is not supported"}},
		{"Version4", header(4, 0, 0).b, []string{"offset 0x4", "unsupported GGUF version 4"}},
		{"BigEndianVersion", append([]byte("GGUF\x00\x00\x00\x03"), make([]byte, 16)...), []string{"offset 0x4", "big-endian"}},
		{"BigEndianMagic", append([]byte("FUGG"), good[4:]...), []string{"offset 0x0", "big-endian"}},
		{"TensorDataPastEOF", f32Tensor(header(3, 1, 0), "w", 4, 1024).align(32).zeros(16).b, []string{`tensor "w"`, "runs past end of file"}},
		{"OverlappingTensors", f32Tensor(f32Tensor(header(3, 2, 0), "a", 16, 0), "b", 8, 32).align(32).zeros(128).b, []string{`tensor "b"`, `overlaps tensor "a"`}},
		{"MisalignedOffset", f32Tensor(header(3, 1, 0), "w", 4, 4).align(32).zeros(32).b, []string{`tensor "w"`, "offset 4 is not a multiple of the alignment 32"}},
		{"AlignmentNotPowerOfTwo", header(3, 0, 1).kvU32(KeyAlignment, 24).b, []string{"offset 0x18", "general.alignment 24 is not a power of two"}},
		{"AlignmentZero", header(3, 0, 1).kvU32(KeyAlignment, 0).b, []string{"general.alignment 0 is not a power of two"}},
		{"AlignmentNotInteger", header(3, 0, 1).str(KeyAlignment).u32(uint32(TypeString)).str("32").b, []string{"general.alignment", "is string"}},
		{"AbsurdTensorCount", header(3, 1<<40, 0).zeros(64).b, []string{"offset 0x8", "tensor count 1099511627776 is larger than the file could hold"}},
		{"AbsurdKVCount", header(3, 0, 1<<62).zeros(64).b, []string{"offset 0x10", "KV count 4611686018427387904 is larger than the file could hold"}},
		{"AbsurdNDims", header(3, 1, 0).str("w").u32(5).zeros(60).b, []string{`tensor "w"`, "n_dims 5 out of range"}},
		{"HugeNDims", header(3, 1, 0).str("w").u32(1 << 31).zeros(60).b, []string{`tensor "w"`, "n_dims 2147483648 out of range"}},
		{"ZeroNDims", header(3, 1, 0).str("w").u32(0).zeros(60).b, []string{`tensor "w"`, "n_dims 0 out of range"}},
		{"ZeroDimension", oneTensor("w", []uint64{4, 0}, quant.F32, 0, 0), []string{`tensor "w"`, "dimension 1 is zero"}},
		{"OverflowingDims", oneTensor("w", []uint64{1 << 32, 1 << 32}, quant.F32, 0, 0), []string{`tensor "w"`, "overflows"}},
		{"OverflowingBytes", oneTensor("w", []uint64{1 << 31, 1 << 31}, quant.F32, 0, 0), []string{`tensor "w"`, "overflows"}},
		{"NotMultipleOfBlock", oneTensor("w", []uint64{48, 2}, quant.Q4_K, 0, 0), []string{`tensor "w"`, "row length 48 (dims[0]) is not a multiple of the Q4_K block size 256"}},
		{"UnknownTensorType", oneTensor("w", []uint64{4}, quant.Type(99), 0, 16), []string{`tensor "w"`, "unknown tensor type id 99"}},
		{"DuplicateKVKey", header(3, 0, 2).kvU32("a.b", 1).kvU32("a.b", 2).b, []string{"offset 0x2b", `duplicate key "a.b"`}},
		{"DuplicateTensorName", f32Tensor(f32Tensor(header(3, 2, 0), "w", 8, 0), "w", 8, 32).align(32).zeros(64).b, []string{`duplicate tensor name "w"`}},
		{"InvalidUTF8Key", header(3, 0, 1).kvU32("bad\xffkey", 1).b, []string{"offset 0x18", "not valid UTF-8"}},
		{"InvalidUTF8TensorName", f32Tensor(header(3, 1, 0), "w\xc3", 8, 0).align(32).zeros(32).b, []string{"tensor name", "not valid UTF-8"}},
		{"EmptyKey", header(3, 0, 1).kvU32("", 1).b, []string{"empty key"}},
		{"UnknownValueType", header(3, 0, 1).str("k").u32(13).zeros(8).b, []string{"offset 0x21", `KV "k"`, "unknown metadata value type 13"}},
		{"UnknownArrayElemType", header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(42).u64(0).b, []string{`KV "k"`, "unknown metadata value type 42"}},
		{"NestedArrayDepth", nested(4), []string{`KV "deep"`, "nested deeper than the limit of 4"}},
		{"AbsurdArrayLength", header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1 << 62).zeros(16).b, []string{`KV "k"`, "array of 4611686018427387904 uint32 needs at least 4 bytes per element"}},
		{"AbsurdStringArrayLength", header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(3).u64(1).raw("a").b, []string{`KV "k"`, "array of 3 string needs at least 8 bytes per element"}},
		{"TruncatedStringArray", header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).u64(1).raw("a").u64(100).zeros(3).b, []string{`KV "k"`, "array element 1", "string length 100 runs past end of file"}},
		{"InvalidBool", header(3, 0, 1).str("k").u32(uint32(TypeBool)).u8(7).b, []string{`KV "k"`, "invalid bool value 7"}},
	}
}

func TestParse_MalformedInput_ErrorNamesFileOffsetAndCause(t *testing.T) {
	for _, c := range badCases(t) {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse("bad.gguf", c.data)
			if err == nil {
				t.Fatalf("parsed without error: %d KVs, %d tensors", len(f.KVs), len(f.Tensors))
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "gguf: bad.gguf: offset 0x") {
				t.Errorf("error %q does not start with the file name and offset", msg)
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "bad.gguf" {
				t.Errorf("error %q is not a *FormatError for bad.gguf", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestParse_AbsurdCounts_AllocateLittle(t *testing.T) {
	cases := [][]byte{
		header(3, 1<<40, 0).zeros(1000).b,
		header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(1 << 60).zeros(100).b,
		header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1 << 60).zeros(100).b,
		header(3, 0, 1).str("k").u32(uint32(TypeString)).u64(1 << 60).zeros(100).b,
		header(3, 1, 0).str("w").u32(1 << 30).zeros(100).b,
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i, c := range cases {
		if _, err := Parse("bad.gguf", c); err == nil {
			t.Errorf("case %d parsed", i)
		}
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Errorf("parsing %d tiny hostile files allocated %d bytes", len(cases), d)
	}
}

// Every prefix of a valid file fails cleanly (or, for the full length, parses).
func TestParse_EveryTruncation_ErrorNotPanic(t *testing.T) {
	good := buildImage(t)
	for n := 0; n < len(good); n++ {
		if _, err := Parse("cut.gguf", good[:n]); err == nil {
			t.Fatalf("prefix of %d/%d bytes parsed", n, len(good))
		} else if !strings.HasPrefix(err.Error(), "gguf: cut.gguf: offset 0x") {
			t.Fatalf("prefix %d: error %q lacks file and offset", n, err)
		}
	}
}

package driver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// container is one fatbin container: the 16-byte header and body.
func container(body string) []byte {
	b := make([]byte, 16, 16+len(body))
	binary.LittleEndian.PutUint32(b, fatbinMagic)
	binary.LittleEndian.PutUint16(b[4:], 1)
	binary.LittleEndian.PutUint16(b[6:], 16)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(body)))
	return append(b, body...)
}

// The per-source kernels build concatenates one container per source: each
// comes back whole and in order; nvcc's single container and a non-fatbin
// image (cubin, PTX) are one image; a cut or padded file is an error.
func TestSplitFatbins_OneImagePerContainerAndCorruptFilesRefused(t *testing.T) {
	a, b := container("kernels of attention.cu"), container("mmq")
	got, err := SplitFatbins(append(append([]byte{}, a...), b...))
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("two containers: %d images, %v", len(got), err)
	}
	if got, err := SplitFatbins(a); err != nil || len(got) != 1 || !bytes.Equal(got[0], a) {
		t.Errorf("one container: %d images, %v", len(got), err)
	}
	ptx := []byte(".version 8.0\n.target sm_90\n")
	if got, err := SplitFatbins(ptx); err != nil || len(got) != 1 || !bytes.Equal(got[0], ptx) {
		t.Errorf("PTX: %d images, %v", len(got), err)
	}
	for name, bad := range map[string][]byte{
		"cut in the body":        append(append([]byte{}, a...), b[:len(b)-1]...),
		"cut in the header":      append(append([]byte{}, a...), b[:10]...),
		"trailing bytes":         append(append([]byte{}, a...), "\x00\x00\x00\x00"...),
		"header size below 16":   func() []byte { c := container("x"); binary.LittleEndian.PutUint16(c[6:], 8); return c }(),
		"size past the end":      func() []byte { c := container("x"); binary.LittleEndian.PutUint64(c[8:], 1<<62); return c }(),
		"second is not a fatbin": append(append([]byte{}, a...), ptx...),
	} {
		if imgs, err := SplitFatbins(bad); err == nil || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%s: %d images, err %v; want an error naming the offset", name, len(imgs), err)
		}
	}
}

// A kernel is looked up in each module in turn: NOT_FOUND moves on, any
// other error stops the search, and a name in no module is NOT_FOUND.
func TestFirstFound_SkipsNotFoundStopsOnOtherErrors(t *testing.T) {
	notFound := &Error{Code: CodeNotFound, Name: "CUDA_ERROR_NOT_FOUND"}
	other := &Error{Code: 201, Name: "CUDA_ERROR_INVALID_CONTEXT"}
	lookups := func(res ...error) (func(int) (uintptr, error), *int) {
		calls := 0
		return func(i int) (uintptr, error) {
			calls++
			if res[i] != nil {
				return 0, res[i]
			}
			return uintptr(100 + i), nil
		}, &calls
	}
	get, calls := lookups(notFound, notFound, nil, nil)
	if h, err := firstFound(4, get); err != nil || h != 102 || *calls != 3 {
		t.Errorf("found in the third module: h %d err %v after %d lookups", h, err, *calls)
	}
	get, calls = lookups(notFound, other, nil)
	if _, err := firstFound(3, get); !errors.Is(err, other) || *calls != 2 {
		t.Errorf("another error: %v after %d lookups, want it at the second", err, *calls)
	}
	get, _ = lookups(notFound, notFound)
	if _, err := firstFound(2, get); !IsCode(err, CodeNotFound) {
		t.Errorf("in no module: %v", err)
	}
	if _, err := firstFound(0, get); err == nil {
		t.Error("no modules: no error")
	}
}

// testdata/two-sources.fatbin is what nvcc writes, not a hand-made header:
// `nvcc -fatbin -O3 -gencode arch=compute_90,code=sm_90 -gencode
// arch=compute_90,code=compute_90` (CUDA 11.8) of two-sources-a.cu and
// -b.cu, concatenated (cuobjdump -sass lists ka and kb from it). The split
// gives the two files back.
func TestSplitFatbins_NvccOutputOfTwoSources(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "two-sources.fatbin"))
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := SplitFatbins(data)
	if err != nil || len(imgs) != 2 || len(imgs[0]) != 2984 || len(imgs[1]) != 2984 {
		t.Fatalf("%d images (%v)", len(imgs), err)
	}
	for i, name := range []string{"ka", "kb"} {
		if !bytes.Contains(imgs[i], []byte(name)) || bytes.Contains(imgs[i], []byte("k"+string(rune('b'-i))+"\x00")) {
			t.Errorf("image %d does not hold %s alone", i, name)
		}
	}
}

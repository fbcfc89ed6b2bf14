package gguf

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
)

// The split metadata keys written by llama.cpp's gguf-split.
const (
	KeySplitNo           = "split.no"            // uint16, 0-based index of this part
	KeySplitCount        = "split.count"         // uint16, number of parts
	KeySplitTensorsCount = "split.tensors.count" // int32, tensors in all parts together
)

var splitName = regexp.MustCompile(`^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// SplitPath is the file name of part no (0-based) of count for a split
// model: PREFIX-%05d-of-%05d.gguf, numbered from 1 as gguf-split does.
func SplitPath(prefix string, no, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, no+1, count)
}

// splitKeys returns split.count and split.no of one part (1 and 0 when absent).
func splitKeys(f *File) (count, no uint64, err error) {
	count, no = 1, 0
	if _, ok := f.Value(KeySplitCount); ok {
		if count, err = f.Uint(KeySplitCount); err != nil {
			return 0, 0, err
		}
		if count == 0 {
			return 0, 0, fmt.Errorf("gguf: %s: %s is 0", f.Path, KeySplitCount)
		}
	}
	if _, ok := f.Value(KeySplitNo); ok {
		if no, err = f.Uint(KeySplitNo); err != nil {
			return 0, 0, err
		}
	}
	if no >= count {
		return 0, 0, fmt.Errorf("gguf: %s: %s %d is out of range for %s %d", f.Path, KeySplitNo, no, KeySplitCount, count)
	}
	return count, no, nil
}

// openSplit turns the first-opened part into the whole model: for a single
// file it returns f; for a split model it opens and validates the others.
func openSplit(path string, f *File) (*File, error) {
	count, no, err := splitKeys(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	if count == 1 {
		return f, nil
	}
	m := splitName.FindStringSubmatch(path)
	if m == nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %s is %d but the file name does not follow PREFIX-%%05d-of-%%05d.gguf", path, KeySplitCount, count)
	}
	nameCount, _ := strconv.ParseUint(m[3], 10, 32)
	nameNo, _ := strconv.ParseUint(m[2], 10, 32)
	if nameCount != count {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %s is %d but the file name says %d parts (expected %s)", path, KeySplitCount, count, nameCount, SplitPath(m[1], int(no), int(count)))
	}
	if nameNo != no+1 {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %s is %d but the file name says part %d (expected %s)", path, KeySplitNo, no, nameNo, SplitPath(m[1], int(no), int(count)))
	}

	parts := make([]*File, count) // count <= 99999: it matches the 5-digit name
	parts[no] = f
	closeAll := func() {
		for _, p := range parts {
			if p != nil {
				p.Close()
			}
		}
	}
	for i := range parts {
		if parts[i] != nil {
			continue
		}
		pp := SplitPath(m[1], i, int(count))
		p, err := openPart(pp)
		if err != nil {
			closeAll()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("gguf: %s: split part %d of %d is missing: %s", path, i+1, count, pp)
			}
			return nil, fmt.Errorf("gguf: split part %d of %d (%s): %w", i+1, count, pp, err)
		}
		parts[i] = p
		pc, pn, err := splitKeys(p)
		if err != nil {
			closeAll()
			return nil, err
		}
		if pc != count || pn != uint64(i) {
			closeAll()
			return nil, fmt.Errorf("gguf: %s: split mismatch: %s %d, %s %d, want part %d of %d (from %s)", pp, KeySplitNo, pn, KeySplitCount, pc, i, count, path)
		}
	}

	first := parts[0]
	out := &File{
		Path:        path,
		Version:     first.Version,
		Alignment:   first.Alignment,
		KVs:         first.KVs,
		kvIndex:     first.kvIndex,
		tensorIndex: make(map[string]int),
	}
	for i, p := range parts {
		out.parts = append(out.parts, p.parts[0])
		for _, t := range p.Tensors {
			if j, dup := out.tensorIndex[t.Name]; dup {
				closeAll()
				return nil, fmt.Errorf("gguf: %s: duplicate tensor name %q (also in %s)", p.Path, t.Name, out.parts[out.Tensors[j].part].path)
			}
			t.part = i
			out.tensorIndex[t.Name] = len(out.Tensors)
			out.Tensors = append(out.Tensors, t)
		}
	}
	if _, ok := first.Value(KeySplitTensorsCount); ok {
		n, err := first.Uint(KeySplitTensorsCount)
		if err != nil {
			closeAll()
			return nil, err
		}
		if n != uint64(len(out.Tensors)) {
			closeAll()
			return nil, fmt.Errorf("gguf: %s: %s is %d but the %d parts hold %d tensors", first.Path, KeySplitTensorsCount, n, count, len(out.Tensors))
		}
	}
	return out, nil
}

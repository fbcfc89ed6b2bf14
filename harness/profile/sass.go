package profile

import (
	"bufio"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// SASSFunction is the opcode census of one function of `cuobjdump --dump-sass`.
type SASSFunction struct {
	Name    string         `json:"name"`
	Arch    string         `json:"arch"`
	Opcodes map[string]int `json:"opcodes"` // base opcode (IMMA, HMMA, LDGSTS, ...) -> count
	Total   int            `json:"total"`
}

// Has reports whether the function uses the base opcode.
func (f SASSFunction) Has(op string) bool { return f.Opcodes[op] > 0 }

// ParseSASS builds the opcode census of every function in a cuobjdump
// --dump-sass listing (SASSOpcode of each instruction). A listing it cannot
// read to the end is an error, never the functions before the break.
func ParseSASS(out string) ([]SASSFunction, error) {
	var fs []SASSFunction
	err := scanSASS(out, func(arch, name string) {
		fs = append(fs, SASSFunction{Name: name, Arch: arch, Opcodes: map[string]int{}})
	}, func(ins string) {
		if op := SASSOpcode(ins); op != "" {
			cur := &fs[len(fs)-1]
			cur.Opcodes[op]++
			cur.Total++
		}
	})
	return fs, err
}

// SASSOpcode is an instruction's base opcode: its first word after the
// predicate (@P0, @!PT), cut at the first '.' (IMMA.16832.S8.S8 -> IMMA);
// "" for none.
func SASSOpcode(ins string) string {
	words := strings.Fields(ins)
	if len(words) > 0 && strings.HasPrefix(words[0], "@") {
		words = words[1:]
	}
	if len(words) == 0 || strings.HasPrefix(words[0], "0x") {
		return ""
	}
	op, _, _ := strings.Cut(words[0], ".")
	return op
}

// scanSASS walks a cuobjdump --dump-sass listing: fn at each function (with
// the "code for" arch above it), ins for each of its instructions as text
// (predicate, opcode, operands, spaces collapsed; no address, no encoding).
func scanSASS(out string, fn func(arch, name string), ins func(text string)) error {
	arch, in, n := "", false, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "code for "):
			arch = strings.TrimSpace(strings.TrimPrefix(line, "code for "))
		case strings.HasPrefix(line, "Function :"):
			fn(arch, strings.TrimSpace(strings.TrimPrefix(line, "Function :")))
			in = true
		case in && strings.HasPrefix(line, "/*") && strings.Contains(line, ";"):
			// "/*0030*/  @!P0 IMMA.16832.S8.S8 R4, R8, R12, R4 ;  /* 0x... */"
			end := strings.Index(line, "*/")
			if end < 0 {
				continue
			}
			text := strings.TrimSpace(line[end+2:])
			semi := strings.Index(text, ";")
			if semi < 0 {
				continue
			}
			if text = strings.Join(strings.Fields(text[:semi]), " "); text != "" && !strings.HasPrefix(text, "0x") {
				ins(text)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("SASS listing: after line %d: %w", n, err)
	}
	return nil
}

// TopOpcodes lists a function's opcodes by count, most first (ties by name).
func (f SASSFunction) TopOpcodes(n int) []string {
	ops := make([]string, 0, len(f.Opcodes))
	for op := range f.Opcodes {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if f.Opcodes[ops[i]] != f.Opcodes[ops[j]] {
			return f.Opcodes[ops[i]] > f.Opcodes[ops[j]]
		}
		return ops[i] < ops[j]
	})
	if len(ops) > n {
		ops = ops[:n]
	}
	return ops
}

// SASSListing is every function of a cuobjdump --dump-sass listing with its
// instructions as text (predicate, opcode and operands; no addresses, no
// encodings), keyed "ARCH NAME" ("sm_90a minfer_mmq_q8_0").
type SASSListing map[string][]string

// ParseSASSListing reads the instructions of every function. Branch
// targets are addresses and move whenever any code before them does, so
// they are kept: a changed target is a changed function.
func ParseSASSListing(out string) (SASSListing, error) {
	l := SASSListing{}
	cur := ""
	err := scanSASS(out, func(arch, name string) {
		cur = arch + " " + name
		if _, ok := l[cur]; !ok {
			l[cur] = []string{}
		}
	}, func(ins string) { l[cur] = append(l[cur], ins) })
	return l, err
}

// SASSDiff is how two listings differ, by function key, each list sorted.
type SASSDiff struct {
	Same    []string
	Changed []string // in both, different instructions
	Added   []string // only in the new listing
	Removed []string // only in the old listing
}

// DiffSASS compares two listings function by function.
func DiffSASS(old, cur SASSListing) SASSDiff {
	var d SASSDiff
	for k, ins := range cur {
		o, ok := old[k]
		switch {
		case !ok:
			d.Added = append(d.Added, k)
		case slices.Equal(o, ins):
			d.Same = append(d.Same, k)
		default:
			d.Changed = append(d.Changed, k)
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			d.Removed = append(d.Removed, k)
		}
	}
	for _, s := range [][]string{d.Same, d.Changed, d.Added, d.Removed} {
		sort.Strings(s)
	}
	return d
}

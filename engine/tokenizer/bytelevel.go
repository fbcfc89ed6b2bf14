package tokenizer

import "unicode/utf8"

// The GPT-2 byte-level alphabet: every byte is shown as one printable rune so
// that a vocabulary of strings can hold arbitrary bytes. Printable Latin-1
// bytes stand for themselves; the other 68 bytes are shifted to U+0100 and up,
// in byte order (so the space 0x20 becomes 'Ġ' U+0120 and '\n' becomes 'Ċ').

// byteToRune maps a byte to its rune in the byte-level alphabet.
var byteToRune [256]rune

// runeToByte maps a byte-level rune back to its byte; ok is false for runes
// outside the alphabet.
func runeToByte(r rune) (b byte, ok bool) {
	if r < 0 || int(r) >= len(runeByteTable) {
		return 0, false
	}
	v := runeByteTable[r]
	return byte(v), v >= 0
}

// runeByteTable is the inverse of byteToRune over [0, 0x144), -1 for holes.
var runeByteTable [0x144]int16

func init() {
	for i := range runeByteTable {
		runeByteTable[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeByteTable[byteToRune[b]] = int16(b)
	}
}

// byteLevelDecode turns a vocabulary string in the byte-level alphabet into
// its raw bytes. A rune outside the alphabet is kept as its UTF-8 encoding.
func byteLevelDecode(dst []byte, s string) []byte {
	for _, r := range s {
		if b, ok := runeToByte(r); ok {
			dst = append(dst, b)
		} else {
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

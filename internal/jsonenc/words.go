package jsonenc

import "encoding/binary"

// Word-at-a-time string scanning. A 1 MiB payload is one long JSON string
// in every message that carries it, and almost every byte of it needs no
// attention: looking at eight at a time beats a byte loop
// (docs/benchmarks.md).

const (
	wordOnes = 0x0101010101010101
	wordHigh = 0x8080808080808080
)

// PlainWords returns i advanced over whole words of eight bytes of b that
// hold no '"', '\\' or control character (below 0x20): it stops at the
// first word that holds one, or where fewer than eight bytes are left. It
// also reports whether a byte it stepped over is 0x80 or above (not ASCII:
// the caller may have UTF-8 to check). A scanner looks at the bytes from
// the returned index one by one, and at the eight from there at least
// before it calls again: testing a word at every byte of a string dense
// with escapes or non-ASCII text cost more than the byte loop saved.
func PlainWords(b []byte, i int) (int, bool) {
	high := uint64(0)
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if hasQuoteOrControl(w) {
			break
		}
		high |= w
	}
	return i, high&wordHigh != 0
}

// load64 reads the eight bytes of s from i, little endian (one load: the
// compiler combines the shifts).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// hasZero reports whether a byte of v is zero, and hasBelow whether a byte
// of v is below n (n <= 0x80). Both are exact: the subtraction's borrow
// can set a high bit only above a byte that already matched.
func hasZero(v uint64) uint64         { return (v - wordOnes) &^ v & wordHigh }
func hasBelow(v, n uint64) uint64     { return (v - n*wordOnes) &^ v & wordHigh }
func hasByte(v uint64, c byte) uint64 { return hasZero(v ^ uint64(c)*wordOnes) }

// hasQuoteOrControl reports whether a byte of w is '"', '\\' or below 0x20.
func hasQuoteOrControl(w uint64) bool {
	return hasByte(w, '"')|hasByte(w, '\\')|hasBelow(w, 0x20) != 0
}

// needsEscape reports whether a byte of w is one AppendString does not
// copy as it is: '"', '\\', a control character, a byte of 0x80 or above
// (UTF-8 to check), or with escapeHTML '<', '>' or '&'.
func needsEscape(w uint64, escapeHTML bool) bool {
	m := hasByte(w, '"') | hasByte(w, '\\') | hasBelow(w, 0x20) | w&wordHigh
	if escapeHTML {
		m |= hasByte(w, '<') | hasByte(w, '>') | hasByte(w, '&')
	}
	return m != 0
}

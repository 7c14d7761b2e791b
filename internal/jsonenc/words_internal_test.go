package jsonenc

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

func hasQuoteOrControlRef(w uint64) bool {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	for _, c := range b {
		if c == '"' || c == '\\' || c < 0x20 {
			return true
		}
	}
	return false
}

// checkWords compares test (named name) with ref on every byte at every
// position of a word of fillers, and on n random words (masked by mask).
func checkWords(t *testing.T, name string, fillers []byte, n int, mask uint64, test, ref func(uint64) bool) {
	t.Helper()
	for _, f := range fillers {
		for p := range 8 {
			for c := range 256 {
				var b [8]byte
				for i := range b {
					b[i] = f
				}
				b[p] = byte(c)
				if w := binary.LittleEndian.Uint64(b[:]); test(w) != ref(w) {
					t.Fatalf("%s(% x) = %v, want %v", name, b, test(w), ref(w))
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		if w := r.Uint64() & mask; test(w) != ref(w) {
			t.Fatalf("%s(%#016x) = %v, want %v", name, w, test(w), ref(w))
		}
	}
}

func TestHasQuoteOrControl(t *testing.T) {
	// Fillers next to the special values and with the high bit set (where
	// a borrow could mislead).
	fillers := []byte{'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	checkWords(t, "hasQuoteOrControl", fillers, 1<<20, ^uint64(0), hasQuoteOrControl, hasQuoteOrControlRef)
}

func TestPlainWords(t *testing.T) {
	for _, tc := range []struct {
		in       string
		from     int
		want     int
		wantHigh bool
	}{
		{"", 0, 0, false},
		{"1234567", 0, 0, false},
		{"12345678", 0, 8, false},
		{"12345678\"", 0, 8, false},
		{"1234567\"90123456", 0, 0, false},
		{"abcdefgh12345\\78abc", 0, 8, false},
		{"abcdefgh\x01bcdefgh", 0, 8, false},
		{"xabcdefgh12345678", 1, 17, false},
		{"abcd\xc3\xa9fgh", 0, 8, true},
		{"\xff\xff\xff\xff\xff\xff\xff\xff\"", 0, 8, true},
	} {
		got, high := PlainWords([]byte(tc.in), tc.from)
		if got != tc.want || high != tc.wantHigh {
			t.Errorf("PlainWords(%q, %d) = %d, %v; want %d, %v", tc.in, tc.from, got, high, tc.want, tc.wantHigh)
		}
	}
}

func needsEscapeRef(w uint64, escapeHTML bool) bool {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	for _, c := range b {
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 || escapeHTML && (c == '<' || c == '>' || c == '&') {
			return true
		}
	}
	return false
}

func TestNeedsEscape(t *testing.T) {
	fillers := []byte{'a', 0x20, 0x21, 0x23, 0x25, 0x27, 0x3b, 0x3d, 0x3f, 0x5b, 0x5d, 0x7f}
	for _, html := range []bool{true, false} {
		// Random words mostly ASCII, where the other tests matter.
		checkWords(t, fmt.Sprintf("needsEscape(html %t)", html), fillers, 1<<20, ^uint64(wordHigh),
			func(w uint64) bool { return needsEscape(w, html) },
			func(w uint64) bool { return needsEscapeRef(w, html) })
	}
}

func TestLoad64(t *testing.T) {
	s := "01234567890"
	for i := 0; i+8 <= len(s); i++ {
		if got, want := load64(s, i), binary.LittleEndian.Uint64([]byte(s[i:i+8])); got != want {
			t.Errorf("load64(%q, %d) = %#x, want %#x", s, i, got, want)
		}
	}
}

package jsonenc

import (
	"encoding/binary"
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

func TestHasQuoteOrControl(t *testing.T) {
	// Every byte at every position, among fillers next to the special
	// values and with the high bit set (where a borrow could mislead).
	fillers := []byte{'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	for _, f := range fillers {
		for p := range 8 {
			for c := range 256 {
				var b [8]byte
				for i := range b {
					b[i] = f
				}
				b[p] = byte(c)
				w := binary.LittleEndian.Uint64(b[:])
				if got, want := hasQuoteOrControl(w), hasQuoteOrControlRef(w); got != want {
					t.Fatalf("hasQuoteOrControl(% x) = %v, want %v", b, got, want)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		w := r.Uint64()
		if got, want := hasQuoteOrControl(w), hasQuoteOrControlRef(w); got != want {
			t.Fatalf("hasQuoteOrControl(%#016x) = %v, want %v", w, got, want)
		}
	}
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
		for _, f := range fillers {
			for p := range 8 {
				for c := range 256 {
					var b [8]byte
					for i := range b {
						b[i] = f
					}
					b[p] = byte(c)
					w := binary.LittleEndian.Uint64(b[:])
					if got, want := needsEscape(w, html), needsEscapeRef(w, html); got != want {
						t.Fatalf("needsEscape(% x, %t) = %v, want %v", b, html, got, want)
					}
				}
			}
		}
		r := rand.New(rand.NewPCG(3, 4))
		for range 1 << 20 {
			w := r.Uint64() &^ wordHigh // mostly ASCII, where the other tests matter
			if got, want := needsEscape(w, html), needsEscapeRef(w, html); got != want {
				t.Fatalf("needsEscape(%#016x, %t) = %v, want %v", w, html, got, want)
			}
		}
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

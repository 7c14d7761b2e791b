package clip_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/clip"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"fits", "abc", 3, "abc"},
		{"cut", "abcdef", 4, "abcd"},
		{"rune boundary", "aé", 2, "a"}, // é is two bytes
		{"zero", "abc", 0, ""},
		{"negative", "abc", -1, ""},
		{"invalid before the cut stays", "\xffabc", 3, "\xffab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clip.String(tc.in, tc.n); got != tc.want {
				t.Errorf("String(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}

func TestMarkedAndCounted(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	m := clip.Marked(long, 64)
	if len(m) > 64 || !strings.HasSuffix(m, "…") || !utf8.ValidString(m) {
		t.Errorf("Marked = %q (%d bytes)", m, len(m))
	}
	if got := clip.Marked("short", 64); got != "short" {
		t.Errorf("Marked(short) = %q", got)
	}
	c := clip.Counted(long, 64)
	if !strings.HasPrefix(c, strings.Repeat("é", 32)+"…(136 more bytes)") {
		t.Errorf("Counted = %q", c)
	}
}

func FuzzString(f *testing.F) {
	f.Add("héllo", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := clip.String(s, n)
		if len(got) > max(n, 0) || !strings.HasPrefix(s, got) {
			t.Fatalf("String(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("String(%q, %d) = %q splits a rune", s, n, got)
		}
	})
}

package contract

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// FuzzValidateLevel checks the hand-written, allocation-free level check
// against a regexp written straight from the contract's wording.

var levelRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func FuzzValidateLevel(f *testing.F) {
	for _, s := range []string{"", "a", "p1", "_", "-x_Y9", strings.Repeat("a", 128), strings.Repeat("a", 129),
		"a/b", "+", "#", "$SYS", "a\x00", "ü", "a b", "\xff", "a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateLevel(s)
		want := levelRE.MatchString(s)
		if (err == nil) != want {
			t.Fatalf("ValidateLevel(%q) = %v, regexp says valid=%v", s, err, want)
		}
		if err != nil && !errors.Is(err, ErrInvalidLevel) {
			t.Fatalf("ValidateLevel(%q) = %v, does not wrap ErrInvalidLevel", s, err)
		}
		if ValidLevel(s) != want {
			t.Fatalf("ValidLevel(%q) = %v, want %v", s, !want, want)
		}
		if want && (strings.ContainsAny(s, "/+#\x00$") || len(s) > MaxLevelLen) {
			t.Fatalf("ValidateLevel accepted %q", s)
		}
	})
}

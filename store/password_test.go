package store

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckNewPassword(t *testing.T) {
	for _, tc := range []struct {
		name     string
		password []byte
		ok       bool
	}{
		{"ordinary", []byte("a fine password"), true},
		{"max length", []byte(strings.Repeat("a", MaxPasswordLen)), true},
		{"empty", nil, false},
		{"too long", []byte(strings.Repeat("a", MaxPasswordLen+1)), false},
		{"NUL", []byte("abc\x00def"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNewPassword(tc.password)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidPassword)) {
				t.Fatalf("checkNewPassword = %v; want ok=%v", err, tc.ok)
			}
		})
	}
}

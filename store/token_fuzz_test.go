package store

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/contract"
	"golang.org/x/crypto/bcrypt"
)

// secretRefRE is the documented secret shape, the ID in lower-case
// Crockford base32 (no i, l, o, u).
var secretRefRE = regexp.MustCompile(`^tb_[0-9a-hjkmnp-tv-z]{8}_[A-Za-z0-9_-]{43}$`)

func FuzzParseSecret(f *testing.F) {
	for range 3 {
		_, s, err := newSecret()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s)
	}
	for _, s := range []string{"", "tb_", "tb_3kq9x2m1", "tb_3kq9x2m1_", "Bearer tb_3kq9x2m1_" + strings.Repeat("A", 43),
		"tb_3kq9x2m1_" + strings.Repeat("A", 42) + "=", "tb_3kq9x2mI_" + strings.Repeat("A", 43),
		"tb_3kq9x2m1-" + strings.Repeat("A", 43), "tb_3kq9x2m1_" + strings.Repeat("\xff", 43),
		"TB_3kq9x2m1_" + strings.Repeat("_", 43)} {
		f.Add(s)
	}

	// One real token: whatever the input, only its own secret authenticates.
	s, err := Open(f.Context(), f.TempDir(), StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	secret, tok, err := s.CreateToken(f.Context(), TokenSpec{UserID: "alice"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(secret)
	f.Add(otherSecretF(f, tok.ID))

	f.Fuzz(func(t *testing.T, in string) {
		id, ok := parseSecret(in)
		if want := secretRefRE.MatchString(in); ok != want {
			t.Fatalf("parseSecret(%q) ok=%v, reference regexp says %v", in, ok, want)
		}
		if ok {
			if id != in[:tokenIDLen] || !validTokenID(id) || !contract.ValidLevel(id) {
				t.Fatalf("parseSecret(%q) = %q: not the secret's valid-level prefix", in, id)
			}
		} else if id != "" {
			t.Fatalf("parseSecret(%q) = %q, false", in, id)
		}

		got, err := s.AuthenticateToken(t.Context(), in)
		switch {
		case in == secret:
			if err != nil || got.ID != tok.ID {
				t.Fatalf("own secret: %+v, %v", got, err)
			}
		case !errors.Is(err, ErrTokenInvalid):
			t.Fatalf("AuthenticateToken(%q) = %+v, %v; want ErrTokenInvalid", in, got, err)
		}
	})
}

func otherSecretF(f *testing.F, id string) string {
	f.Helper()
	_, s, err := newSecret()
	if err != nil {
		f.Fatal(err)
	}
	return id + s[tokenIDLen:]
}

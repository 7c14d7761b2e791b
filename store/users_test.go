package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
)

func TestUsers(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
	if _, err := s.AddUser(ctx, "alice", []byte("correct horse")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddUser(ctx, "alice", []byte("other")); !errors.Is(err, ErrExists) {
		t.Fatalf("second AddUser = %v, want ErrExists", err)
	}
	for _, bad := range []string{"", "a/b", "+", "#", "x y"} {
		if _, err := s.AddUser(ctx, bad, []byte("pw")); !errors.Is(err, contract.ErrInvalidLevel) {
			t.Errorf("AddUser(%q) = %v, want contract.ErrInvalidLevel", bad, err)
		}
	}
	if _, err := s.AddUser(ctx, "bob", nil); !errors.Is(err, ErrInvalidPassword) {
		t.Errorf("empty password: %v, want ErrInvalidPassword", err)
	}
	for _, tc := range []struct {
		name, user, password string
		want                 error
	}{
		{"right", "alice", "correct horse", nil},
		{"wrong password", "alice", "correct horse!", ErrBadCredentials},
		{"unknown user", "mallory", "correct horse", ErrBadCredentials},
		{"too long", "alice", strings.Repeat("x", MaxPasswordLen+1), ErrBadCredentials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.VerifyUser(ctx, tc.user, []byte(tc.password)); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("VerifyUser = %v, want %v", err, tc.want)
			}
		})
	}
	if err := s.SetUserPassword(ctx, "alice", []byte("new one")); err != nil {
		t.Fatal(err)
	}
	if err := s.VerifyUser(ctx, "alice", []byte("correct horse")); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("old password after passwd: %v", err)
	}
	if err := s.VerifyUser(ctx, "alice", []byte("new one")); err != nil {
		t.Fatalf("new password: %v", err)
	}
	if err := s.SetUserPassword(ctx, "nobody", []byte("x")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("passwd of unknown user: %v", err)
	}
	users, err := s.ListUsers(ctx)
	if err != nil || len(users) != 1 || users[0].ID != "alice" || users[0].Created.IsZero() {
		t.Fatalf("ListUsers = %+v, %v", users, err)
	}

	// Removing a user revokes every token of theirs.
	secret, _ := createTestToken(t, s, TokenSpec{UserID: "alice"})
	n, err := s.RemoveUser(ctx, "alice")
	if err != nil || n != 1 {
		t.Fatalf("RemoveUser = %d, %v; want 1 token revoked", n, err)
	}
	if _, err := s.AuthenticateToken(ctx, secret); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("token of a removed user: %v, want ErrTokenRevoked", err)
	}
	if err := s.VerifyUser(ctx, "alice", []byte("new one")); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("sign-in of a removed user: %v", err)
	}
	if _, err := s.RemoveUser(ctx, "alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second RemoveUser = %v, want ErrNotFound", err)
	}
}

func TestArgon2idHashes(t *testing.T) {
	h, err := hashArgon2id([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q: not the PHC form of the documented parameters", h)
	}
	if ok, err := verifyArgon2id(h, []byte("pw")); !ok || err != nil {
		t.Fatalf("verify right password = %t, %v", ok, err)
	}
	if ok, err := verifyArgon2id(h, []byte("pW")); ok || err != nil {
		t.Fatalf("verify wrong password = %t, %v", ok, err)
	}
	parts := strings.Split(h, "$")
	for name, bad := range map[string]string{
		"argon2i":      strings.Replace(h, "argon2id", "argon2i", 1),
		"version":      strings.Replace(h, "v=19", "v=16", 1),
		"huge memory":  strings.Join([]string{"", parts[1], parts[2], "m=99999999,t=2,p=1", parts[4], parts[5]}, "$"),
		"many passes":  strings.Join([]string{"", parts[1], parts[2], "m=19456,t=99,p=1", parts[4], parts[5]}, "$"),
		"salt":         strings.Join([]string{"", parts[1], parts[2], parts[3], "!!", parts[5]}, "$"),
		"missing part": strings.Join(parts[:5], "$"),
		"mosquitto":    "$7$101$AAAA$BBBB",
	} {
		if _, err := verifyArgon2id(bad, []byte("pw")); !errors.Is(err, acl.ErrInvalidHash) {
			t.Errorf("%s: %v, want acl.ErrInvalidHash", name, err)
		}
	}
}

func TestUserAdmin(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{})
	if _, err := s.AddUser(ctx, "alice", []byte("correct horse")); err != nil {
		t.Fatal(err)
	}
	st, err := s.UserState(ctx, "alice")
	if err != nil || st.Admin || st.PasswordStamp == "" {
		t.Fatalf("UserState of a new user = %+v, %v; want not admin, a stamp", st, err)
	}
	for _, tc := range []struct {
		name string
		on   bool
	}{{"grant", true}, {"grant again", true}, {"take back", false}, {"grant last", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.SetUserAdmin(ctx, "alice", tc.on); err != nil {
				t.Fatal(err)
			}
			users, err := s.ListUsers(ctx)
			if err != nil || len(users) != 1 || users[0].Admin != tc.on {
				t.Fatalf("ListUsers = %+v, %v; want admin %v", users, err, tc.on)
			}
			if st, err := s.UserState(ctx, "alice"); err != nil || st.Admin != tc.on {
				t.Fatalf("UserState = %+v, %v; want admin %v", st, err, tc.on)
			}
		})
	}
	// A new password, even the same one, is a new stamp: sessions end.
	if err := s.SetUserPassword(ctx, "alice", []byte("correct horse")); err != nil {
		t.Fatal(err)
	}
	if st2, err := s.UserState(ctx, "alice"); err != nil || st2.PasswordStamp == st.PasswordStamp {
		t.Fatalf("stamp after passwd = %+v, %v; want a new one (was %q)", st2, err, st.PasswordStamp)
	}
	if err := s.SetUserAdmin(ctx, "nobody", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetUserAdmin(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.UserState(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("UserState(unknown) = %v, want ErrNotFound", err)
	}
}

// TestUserAdminMigration opens a store that a toolbus before the console
// left (schema version 11): its users stay, none of them an admin.
func TestUserAdminMigration(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	s := openTestStoreIn(t, dir, StoreOptions{})
	if _, err := s.AddUser(ctx, "alice", []byte("correct horse")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE users DROP COLUMN admin`, `DELETE FROM schema_migrations WHERE version >= 12`} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStoreIn(t, dir, StoreOptions{})
	users, err := s2.ListUsers(ctx)
	if err != nil || len(users) != 1 || users[0].ID != "alice" || users[0].Admin {
		t.Fatalf("users after the migration = %+v, %v; want alice, not an admin", users, err)
	}
	if err := s2.SetUserAdmin(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if err := s2.VerifyUser(ctx, "alice", []byte("correct horse")); err != nil {
		t.Fatalf("sign-in after the migration: %v", err)
	}
}

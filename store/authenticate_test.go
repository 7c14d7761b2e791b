package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
)

// expectKDF runs f and checks how many password verifications it cost.
func expectKDF(t *testing.T, s *Store, want int64, f func()) {
	t.Helper()
	before := s.kdfRuns.Load()
	f()
	if got := s.kdfRuns.Load() - before; got != want {
		t.Fatalf("ran the KDF %d times, want %d", got, want)
	}
}

func TestAuthenticate(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	alice := addTestIdentity(t, s, "alice", acl.RolePlatform, "alice-password")
	addTestIdentity(t, s, "eve", acl.RoleClient, "eve-password")
	if err := s.SetDisabled(ctx, "eve", true); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, username, password string
		want                     error
	}{
		{"unknown user", "mallory", "alice-password", ErrBadCredentials},
		{"wrong password", "alice", "alice-passwore", ErrBadCredentials},
		{"empty password", "alice", "", ErrBadCredentials},
		{"username that cannot exist", "alice/#", "alice-password", ErrBadCredentials},
		{"empty username", "", "alice-password", ErrBadCredentials},
		{"disabled, wrong password", "eve", "nope", ErrBadCredentials},
		{"disabled, right password", "eve", "eve-password", ErrDisabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every failure costs one KDF run: an unknown user is not faster.
			expectKDF(t, s, 1, func() {
				id, err := s.Authenticate(ctx, tc.username, []byte(tc.password))
				if !errors.Is(err, tc.want) {
					t.Fatalf("Authenticate = %+v, %v; want %v", id, err, tc.want)
				}
				if id != (acl.Identity{}) {
					t.Fatalf("Authenticate returned identity %+v with an error", id)
				}
			})
		})
	}

	t.Run("right password", func(t *testing.T) {
		id, err := s.Authenticate(ctx, "alice", []byte("alice-password"))
		if err != nil {
			t.Fatal(err)
		}
		if id != alice {
			t.Fatalf("Authenticate = %+v, want %+v", id, alice)
		}
	})
}

func TestAuthenticateCache(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RolePlatform, "old-password")

	login := func(password string, want error) {
		t.Helper()
		if _, err := s.Authenticate(ctx, "alice", []byte(password)); !errors.Is(err, want) {
			t.Fatalf("Authenticate(%q) = %v, want %v", password, err, want)
		}
	}

	expectKDF(t, s, 1, func() { login("old-password", nil) })
	expectKDF(t, s, 0, func() { login("old-password", nil) }) // reconnect: cached
	expectKDF(t, s, 1, func() { login("not-the-password", ErrBadCredentials) })
	expectKDF(t, s, 0, func() { login("old-password", nil) }) // a failure does not evict

	t.Run("password change", func(t *testing.T) {
		if err := s.SetPassword(ctx, "alice", []byte("new-password")); err != nil {
			t.Fatal(err)
		}
		expectKDF(t, s, 1, func() { login("old-password", ErrBadCredentials) })
		expectKDF(t, s, 1, func() { login("new-password", nil) })
		expectKDF(t, s, 0, func() { login("new-password", nil) })
	})

	t.Run("password set to the same value", func(t *testing.T) {
		if err := s.SetPassword(ctx, "alice", []byte("new-password")); err != nil {
			t.Fatal(err)
		}
		expectKDF(t, s, 1, func() { login("new-password", nil) })
	})

	t.Run("hash changed behind the store's back", func(t *testing.T) {
		// Another process (the CLI) changes the password: the cache is keyed
		// on the stored hash, so it misses without being told.
		hash, err := acl.HashPassword([]byte("cli-password"), testIterations)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, qUpdatePassword, "alice", hash, ""); err != nil {
			t.Fatal(err)
		}
		expectKDF(t, s, 1, func() { login("new-password", ErrBadCredentials) })
		expectKDF(t, s, 1, func() { login("cli-password", nil) })
	})

	t.Run("disabled after caching", func(t *testing.T) {
		if err := s.SetDisabled(ctx, "alice", true); err != nil {
			t.Fatal(err)
		}
		login("cli-password", ErrDisabled)
		if err := s.SetDisabled(ctx, "alice", false); err != nil {
			t.Fatal(err)
		}
		expectKDF(t, s, 0, func() { login("cli-password", nil) })
	})

	t.Run("removal", func(t *testing.T) {
		if err := s.RemoveIdentity(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		expectKDF(t, s, 1, func() { login("cli-password", ErrBadCredentials) })
		// A new identity of the same name and password is a new hash.
		addTestIdentity(t, s, "alice", acl.RoleClient, "cli-password")
		expectKDF(t, s, 1, func() { login("cli-password", nil) })
	})
}

func TestAuthenticateCacheDisabled(t *testing.T) {
	s := openTestStore(t, StoreOptions{AuthCacheSize: -1})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RolePlatform, "alice-password")
	for range 2 {
		expectKDF(t, s, 1, func() {
			if _, err := s.Authenticate(ctx, "alice", []byte("alice-password")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAuthenticateCacheBounded(t *testing.T) {
	s := openTestStore(t, StoreOptions{AuthCacheSize: 1})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RoleClient, "alice-password")
	addTestIdentity(t, s, "bob", acl.RoleClient, "bob-password")
	auth := func(user string) {
		t.Helper()
		if _, err := s.Authenticate(ctx, user, []byte(user+"-password")); err != nil {
			t.Fatal(err)
		}
	}
	expectKDF(t, s, 1, func() { auth("alice") })
	expectKDF(t, s, 1, func() { auth("bob") }) // evicts alice
	expectKDF(t, s, 1, func() { auth("alice") })
}

func TestAuthenticateContext(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	addTestIdentity(t, s, "alice", acl.RolePlatform, "alice-password")

	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testContext(t))
		cancel()
		if _, err := s.Authenticate(ctx, "alice", []byte("alice-password")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Authenticate = %v, want context.Canceled", err)
		}
	})

	t.Run("deadline while every KDF slot is busy", func(t *testing.T) {
		for range cap(s.kdf) {
			s.kdf <- struct{}{}
		}
		t.Cleanup(func() {
			for range cap(s.kdf) {
				<-s.kdf
			}
		})
		ctx, cancel := context.WithTimeout(testContext(t), 50*time.Millisecond)
		defer cancel()
		if _, err := s.Authenticate(ctx, "alice", []byte("alice-password")); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Authenticate = %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestAuthenticateCorruptHash(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RolePlatform, "alice-password")
	if _, err := s.db.ExecContext(ctx, qUpdatePassword, "alice", "alice-password", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, "alice", []byte("alice-password")); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("Authenticate against a plain-text 'hash' = %v, want ErrBadCredentials", err)
	}
}

func TestDummyHashUsesStoreIterations(t *testing.T) {
	// The dummy hash of unknown users carries the store's iteration count.
	s := openTestStore(t, StoreOptions{HashIterations: 4321})
	if ok, err := acl.VerifyPassword(s.dummyHash, []byte("x")); ok || err != nil {
		t.Fatalf("VerifyPassword(dummy hash) = %v, %v; want false, nil", ok, err)
	}
	if !strings.HasPrefix(s.dummyHash, "$7$4321$") {
		t.Fatalf("dummy hash %q: want iterations 4321", s.dummyHash)
	}
}

func TestAuthenticateConcurrent(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	addTestIdentity(t, s, "alice", acl.RolePlatform, "password-0")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				_, err := s.Authenticate(ctx, "alice", []byte("password-0"))
				if err != nil && !errors.Is(err, ErrBadCredentials) {
					t.Errorf("Authenticate: %v", err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if err := s.SetPassword(ctx, "alice", []byte("password-1")); err != nil {
				t.Errorf("SetPassword: %v", err)
				return
			}
		}
	})
	wg.Wait()
	if _, err := s.Authenticate(ctx, "alice", []byte("password-0")); !errors.Is(err, ErrBadCredentials) {
		t.Fatalf("old password after the change: %v, want ErrBadCredentials", err)
	}
	if _, err := s.Authenticate(ctx, "alice", []byte("password-1")); err != nil {
		t.Fatalf("new password: %v", err)
	}
}

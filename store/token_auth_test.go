package store

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"
)

// expectLoads runs f and checks how many token rows it read from the database.
func expectLoads(t *testing.T, s *Store, want int64, f func()) {
	t.Helper()
	before := s.tokens.loads.Load()
	f()
	if got := s.tokens.loads.Load() - before; got != want {
		t.Fatalf("read %d token rows from the database, want %d", got, want)
	}
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// otherSecret is a well-formed secret for id that is not id's secret.
func otherSecret(t *testing.T, id string) string {
	t.Helper()
	_, s, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	return id + s[tokenIDLen:]
}

func TestAuthenticateToken(t *testing.T) {
	// Rows stay cached for the whole test, so the loads counted are exact.
	s := openTestStore(t, StoreOptions{TokenCacheTTL: time.Hour})
	ctx := testContext(t)
	good, goodTok := createTestToken(t, s, TokenSpec{UserID: "alice", Scopes: []string{ScopeToolsList}})
	revoked, revokedTok := createTestToken(t, s, TokenSpec{UserID: "bob"})
	if err := s.RevokeToken(ctx, revokedTok.ID); err != nil {
		t.Fatal(err)
	}
	expired, expiredTok := createTestToken(t, s, TokenSpec{UserID: "carol", TTL: time.Hour})
	if _, err := s.db.ExecContext(ctx, `UPDATE tokens SET expires_ms = $2 WHERE id = $1`,
		expiredTok.ID, time.Now().Add(-time.Minute).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	_, unknownSecret, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		secret string
		want   error
		loads  int64 // rows read from the database (the cache is cold for each token)
	}{
		{"empty", "", ErrTokenInvalid, 0},
		{"with Bearer", "Bearer " + good, ErrTokenInvalid, 0},
		{"trailing space", good + " ", ErrTokenInvalid, 0},
		{"truncated", good[:len(good)-1], ErrTokenInvalid, 0},
		{"one more character", good + "A", ErrTokenInvalid, 0},
		{"upper-case ID", strings.ToUpper(good[:tokenIDLen]) + good[tokenIDLen:], ErrTokenInvalid, 0},
		{"bad character in random part", good[:len(good)-1] + "=", ErrTokenInvalid, 0},
		{"ID only", goodTok.ID, ErrTokenInvalid, 0},
		{"unknown ID", unknownSecret, ErrTokenInvalid, 1},
		{"wrong secret for a known ID", otherSecret(t, goodTok.ID), ErrTokenInvalid, 1},
		{"right secret", good, nil, 0}, // cached by the previous case
		{"wrong secret for a revoked ID", otherSecret(t, revokedTok.ID), ErrTokenInvalid, 1},
		{"revoked", revoked, ErrTokenRevoked, 0},
		{"wrong secret for an expired ID", otherSecret(t, expiredTok.ID), ErrTokenInvalid, 1},
		{"expired", expired, ErrTokenExpired, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectLoads(t, s, tc.loads, func() {
				tok, err := s.AuthenticateToken(ctx, tc.secret)
				if !errors.Is(err, tc.want) {
					t.Fatalf("AuthenticateToken = %+v, %v; want %v", tok, err, tc.want)
				}
				if tc.want == nil {
					if tok.ID != goodTok.ID || tok.UserID != "alice" || !tok.HasScope(ScopeToolsList) {
						t.Fatalf("AuthenticateToken = %+v, want %+v", tok, goodTok)
					}
					return
				}
				if !errors.Is(err, ErrUnauthenticated) {
					t.Fatalf("error %v does not wrap ErrUnauthenticated", err)
				}
				if tok.ID != "" {
					t.Fatalf("AuthenticateToken returned token %+v with an error", tok)
				}
				if len(tc.secret) > tokenIDLen+1 && strings.Contains(err.Error(), tc.secret[tokenIDLen+1:]) {
					t.Fatalf("error %q quotes the secret", err)
				}
			})
		})
	}
}

func TestAuthenticateTokenCache(t *testing.T) {
	s := openTestStore(t, StoreOptions{TokenCacheTTL: time.Hour})
	ctx := testContext(t)
	secret, _ := createTestToken(t, s, TokenSpec{UserID: "alice"})
	expectLoads(t, s, 1, func() {
		for range 20 {
			if _, err := s.AuthenticateToken(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestAuthenticateTokenCacheDisabled(t *testing.T) {
	s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
	ctx := testContext(t)
	secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
	expectLoads(t, s, 3, func() {
		for range 3 {
			if _, err := s.AuthenticateToken(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateToken(ctx, secret); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("after revoke: %v, want ErrTokenRevoked", err)
	}
}

func TestRevokeTokenInProcessIsImmediate(t *testing.T) {
	// A cache TTL far beyond the test: only the invalidation can explain a refusal.
	s := openTestStore(t, StoreOptions{TokenCacheTTL: time.Hour})
	ctx := testContext(t)
	secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
	other, _ := createTestToken(t, s, TokenSpec{UserID: "alice"})
	for _, sec := range []string{secret, other} {
		if _, err := s.AuthenticateToken(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateToken(ctx, secret); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("right after RevokeToken: %v, want ErrTokenRevoked", err)
	}
	expectLoads(t, s, 0, func() { // the other token stays cached
		if _, err := s.AuthenticateToken(ctx, other); err != nil {
			t.Fatalf("another token after RevokeToken: %v", err)
		}
	})
}

func TestRevokeTokenByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	server := openTestStoreIn(t, dir, StoreOptions{TokenCacheTTL: 300 * time.Millisecond})
	cli := openTestStoreIn(t, dir, StoreOptions{})
	secret, tok := createTestToken(t, cli, TokenSpec{UserID: "alice"})

	// The server reads the row once, then serves it from its cache.
	expectLoads(t, server, 1, func() {
		for range 5 {
			if _, err := server.AuthenticateToken(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}
	})
	if err := cli.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to see the revocation", func() bool {
		_, err := server.AuthenticateToken(ctx, secret)
		return errors.Is(err, ErrTokenRevoked)
	})
}

func TestAuthenticateTokenExpiresWhileCached(t *testing.T) {
	s := openTestStore(t, StoreOptions{TokenCacheTTL: time.Hour})
	ctx := testContext(t)
	secret, _ := createTestToken(t, s, TokenSpec{UserID: "alice", TTL: 300 * time.Millisecond})
	// The row is read once and never again (the cache TTL is an hour), so
	// expiry must be checked against the cached row on every request.
	expectLoads(t, s, 1, func() {
		waitFor(t, "the token to expire", func() bool {
			_, err := s.AuthenticateToken(ctx, secret)
			if err != nil && !errors.Is(err, ErrTokenExpired) {
				t.Fatalf("AuthenticateToken: %v", err)
			}
			return err != nil
		})
	})
}

func TestAuthenticateTokenDatabaseError(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	secret, _ := createTestToken(t, s, TokenSpec{UserID: "alice"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.AuthenticateToken(testContext(t), secret)
	if err == nil || errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("AuthenticateToken on a closed store = %v; want an error that is not ErrUnauthenticated (not the caller's fault)", err)
	}
}

func TestAuthenticateTokenCorruptRow(t *testing.T) {
	logger, hook := test.NewNullLogger()
	s := openTestStore(t, StoreOptions{Logger: logrus.NewEntry(logger)})
	ctx := testContext(t)
	secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
	if _, err := s.db.ExecContext(ctx, `UPDATE tokens SET secret_hash = 'zz' WHERE id = $1`, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateToken(ctx, secret); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("AuthenticateToken of a corrupt row = %v, want ErrTokenInvalid", err)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.ErrorLevel || e.Data["token"] != tok.ID {
		t.Fatalf("no error log naming the corrupt token: %+v", e)
	}
}

func TestTokenLastUsed(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
	before := time.Now().Add(-time.Second)

	got, err := s.AuthenticateToken(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got.LastUsed.Before(before) {
		t.Fatalf("AuthenticateToken reports LastUsed %v, want this use", got.LastUsed)
	}
	waitFor(t, "LastUsed to be written", func() bool { return !listOne(t, s, tok.ID).LastUsed.IsZero() })
	if stored := listOne(t, s, tok.ID).LastUsed; !stored.Equal(got.LastUsed) {
		t.Fatalf("stored LastUsed %v, reported %v", stored, got.LastUsed)
	}
	for range 50 {
		if _, err := s.AuthenticateToken(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // flushes whatever is queued
		t.Fatal(err)
	}
	if n := s.tokens.usage.writes.Load(); n != 1 {
		t.Fatalf("wrote LastUsed %d times in well under a minute, want 1", n)
	}
}

func TestTokenLastUsedOnceAcrossReloads(t *testing.T) {
	// With the cache off every request reads the row again, usually before
	// the first write has landed: that must not queue more writes.
	s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
	ctx := testContext(t)
	secret, _ := createTestToken(t, s, TokenSpec{UserID: "alice"})
	secret2, _ := createTestToken(t, s, TokenSpec{UserID: "bob"})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				for _, sec := range []string{secret, secret2} {
					if _, err := s.AuthenticateToken(ctx, sec); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.tokens.usage.writes.Load(); n != 2 {
		t.Fatalf("wrote LastUsed %d times for two tokens, want 2", n)
	}
}

func TestTokenLastUsedWrittenOnClose(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	s, err := openAny(ctx, t, dir, StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	secret, tok, err := s.CreateToken(ctx, TokenSpec{UserID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateToken(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStoreIn(t, dir, StoreOptions{})
	if listOne(t, s2, tok.ID).LastUsed.IsZero() {
		t.Fatal("a use just before Close was not written")
	}
}

func TestStoreCloseStopsTokenWriter(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := testContext(t)
	s, err := openAny(ctx, t, t.TempDir(), StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := s.CreateToken(ctx, TokenSpec{UserID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuthenticateToken(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestRevokeTokenRacesAuthenticate checks that a row read just before a
// revocation commits is not cached after it: once RevokeToken returns, no
// request of this process accepts the token.
func TestRevokeTokenRacesAuthenticate(t *testing.T) {
	s := openTestStore(t, StoreOptions{TokenCacheTTL: time.Hour})
	ctx := testContext(t)
	for range 20 {
		secret, tok := createTestToken(t, s, TokenSpec{UserID: "alice"})
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-start
				for range 10 {
					_, _ = s.AuthenticateToken(ctx, secret)
				}
			})
		}
		close(start)
		if err := s.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if _, err := s.AuthenticateToken(ctx, secret); !errors.Is(err, ErrTokenRevoked) {
			t.Fatalf("after RevokeToken returned and every request ended: %v, want ErrTokenRevoked", err)
		}
	}
}

func TestAuthenticateTokenConcurrent(t *testing.T) {
	s := openTestStore(t, StoreOptions{TokenCacheTTL: 5 * time.Millisecond})
	ctx := testContext(t)
	secrets := make([]string, 8)
	for i := range secrets {
		secrets[i], _ = createTestToken(t, s, TokenSpec{UserID: "user" + string(rune('a'+i))})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				sec := secrets[(g+i)%len(secrets)]
				tok, err := s.AuthenticateToken(ctx, sec)
				if err != nil {
					t.Error(err)
					return
				}
				if !strings.HasPrefix(sec, tok.ID+"_") {
					t.Errorf("secret %s authenticated as %s", sec[:tokenIDLen], tok.ID)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkAuthenticateToken measures the per-request cost of token
// authentication: served from the cache (serially and from every core), and
// with the cache off (one SQLite read per request) for comparison.
func BenchmarkAuthenticateToken(b *testing.B) {
	for _, bc := range []struct {
		name     string
		ttl      time.Duration
		parallel bool
	}{
		{"cache-hit", time.Hour, false},
		{"cache-hit-parallel", time.Hour, true},
		{"no-cache", -1, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := b.Context()
			s, err := Open(ctx, b.TempDir(), StoreOptions{HashIterations: testIterations, BcryptCost: bcrypt.MinCost, TokenCacheTTL: bc.ttl})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			secret, _, err := s.CreateToken(ctx, TokenSpec{UserID: "alice", Entities: []Entity{{"repo", "r1"}}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.AuthenticateToken(ctx, secret); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if !bc.parallel {
				for b.Loop() {
					if _, err := s.AuthenticateToken(ctx, secret); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.AuthenticateToken(ctx, secret); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

package store

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// grantForTest registers a client and runs one code through to a grant.
func grantForTest(t *testing.T, s *Store) (OAuthClient, OAuthTokens, string) {
	t.Helper()
	ctx := testContext(t)
	c, secret, err := s.RegisterOAuthClient(ctx, "Test client", []string{"http://127.0.0.1/cb"}, false)
	if err != nil || secret != "" {
		t.Fatalf("RegisterOAuthClient = %q, %v; want a public client", secret, err)
	}
	spec := TokenSpec{UserID: "alice", Scopes: []string{ScopeToolsList}, TTL: time.Hour, Audience: "https://gw.example/api/v1/mcp", ClientID: c.ID, Name: "oauth: Test client"}
	code, err := s.SaveOAuthCode(ctx, OAuthCode{ClientID: c.ID, RedirectURI: "http://127.0.0.1:9/cb", Challenge: "ch", Spec: spec, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.RedeemOAuthCode(ctx, code)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClientID != c.ID || got.RedirectURI != "http://127.0.0.1:9/cb" || got.Challenge != "ch" || got.Spec.Audience != spec.Audience || got.Spec.TTL != time.Hour {
		t.Fatalf("redeemed %+v", got)
	}
	toks, err := s.GrantOAuth(ctx, got, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if toks.Token.Audience != spec.Audience || toks.Token.ClientID != c.ID {
		t.Fatalf("access token %+v lacks its audience or client", toks.Token)
	}
	return c, toks, code
}

func TestOAuthClients(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{})
	c, secret, err := s.RegisterOAuthClient(ctx, "Conf", []string{"https://a.example/cb", "https://b.example/cb"}, true)
	if err != nil || secret == "" || !c.Confidential {
		t.Fatalf("confidential client: %+v %q %v", c, secret, err)
	}
	got, err := s.OAuthClient(ctx, c.ID)
	if err != nil || got.Name != "Conf" || len(got.RedirectURIs) != 2 || !got.Confidential {
		t.Fatalf("OAuthClient = %+v, %v", got, err)
	}
	if !got.CheckSecret(secret) || got.CheckSecret(secret+"x") || got.CheckSecret("") {
		t.Fatal("CheckSecret does not tell the secret from others")
	}
	if _, err := s.OAuthClient(ctx, "tbc_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown client: %v", err)
	}

	// Clients no user consented to go; the ones consented to once stay.
	used, _, _ := grantForTest(t, s)
	if got, err := s.OAuthClient(ctx, used.ID); err != nil || got.Used.IsZero() || got.Used.Before(got.Created) {
		t.Fatalf("consented client = %+v, %v; want it marked used", got, err)
	}
	if got, err := s.OAuthClient(ctx, c.ID); err != nil || !got.Used.IsZero() {
		t.Fatalf("client never consented to = %+v, %v; want it unused", got, err)
	}
	if n, err := s.PurgeUnusedOAuthClients(ctx, c.Created); err != nil || n != 0 {
		t.Fatalf("purge of clients registered before the first = %d, %v; want 0", n, err)
	}
	if n, err := s.PurgeUnusedOAuthClients(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want the unused client purged", n, err)
	}
	if _, err := s.OAuthClient(ctx, c.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("purged client: %v, want ErrNotFound", err)
	}
	// A consent that ends after its client was purged gets no code.
	if _, err := s.SaveOAuthCode(ctx, OAuthCode{ClientID: c.ID, Spec: TokenSpec{UserID: "alice", ClientID: c.ID}, Expires: time.Now().Add(time.Minute)}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("code for a purged client: %v, want ErrNotFound", err)
	}
	if _, err := s.OAuthClient(ctx, used.ID); err != nil {
		t.Fatalf("used client purged: %v", err)
	}
}

func TestOAuthCodeSingleUse(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
	_, toks, code := grantForTest(t, s)
	if _, err := s.AuthenticateToken(ctx, toks.Access); err != nil {
		t.Fatalf("access token: %v", err)
	}
	// The second redemption fails and revokes what the first gave.
	if _, err := s.RedeemOAuthCode(ctx, code); !errors.Is(err, ErrCodeReused) || !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("second redemption: %v, want ErrCodeReused", err)
	}
	if _, err := s.AuthenticateToken(ctx, toks.Access); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("access token after the code came again: %v, want revoked", err)
	}
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: toks.Refresh, ClientID: toks.Token.ClientID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("refresh after the code came again: %v", err)
	}
	// A code that comes again before its first redemption has made its
	// grant: the grant, when it comes, is refused.
	c, _, _ := grantForTest(t, s)
	code2, err := s.SaveOAuthCode(ctx, OAuthCode{ClientID: c.ID, Spec: TokenSpec{UserID: "alice", ClientID: c.ID}, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.RedeemOAuthCode(ctx, code2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeemOAuthCode(ctx, code2); !errors.Is(err, ErrCodeReused) {
		t.Fatalf("second redemption: %v", err)
	}
	if _, err := s.GrantOAuth(ctx, first, time.Hour); !errors.Is(err, ErrCodeReused) {
		t.Fatalf("grant of a code redeemed twice: %v, want ErrCodeReused", err)
	}
	if toks, _ := s.ListTokens(ctx, "alice"); len(toks) != 2 { // grantForTest's two, revoked or live; none new
		t.Fatalf("tokens after the refused grant: %+v", toks)
	}
	if _, err := s.RedeemOAuthCode(ctx, "no-such-code"); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("unknown code: %v", err)
	}
	expired, err := s.SaveOAuthCode(ctx, OAuthCode{ClientID: "c", Spec: TokenSpec{UserID: "alice"}, Expires: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeemOAuthCode(ctx, expired); !errors.Is(err, ErrInvalidGrant) || errors.Is(err, ErrCodeReused) {
		t.Fatalf("expired code: %v", err)
	}
}

func TestOAuthRefreshRotation(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
	c, first, _ := grantForTest(t, s)
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: first.Refresh, ClientID: "tbc_other", AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("refresh by another client: %v", err)
	}
	second, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: first.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if second.Refresh == first.Refresh || second.Access == first.Access {
		t.Fatal("refresh did not rotate both tokens")
	}
	if second.Token.Audience != first.Token.Audience || !second.Token.HasScope(ScopeToolsList) || second.Token.HasScope(ScopeToolsCall) {
		t.Fatalf("refreshed token %+v differs from the consented one", second.Token)
	}
	// The replaced access token is gone, row and all.
	if _, err := s.AuthenticateToken(ctx, first.Access); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("old access token: %v, want invalid", err)
	}
	if _, err := s.AuthenticateToken(ctx, second.Access); err != nil {
		t.Fatalf("new access token: %v", err)
	}
	third, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: second.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if toks, _ := s.ListTokens(ctx, "alice"); len(toks) != 1 || toks[0].ID != third.Token.ID {
		t.Fatalf("token list after two refreshes: %+v, want the live token alone", toks)
	}
	// A refresh token two rotations old again: a replay, so the grant ends.
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: first.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("replayed refresh token: %v", err)
	}
	if _, err := s.AuthenticateToken(ctx, third.Access); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("access token after a replay: %v, want revoked", err)
	}
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: third.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("refresh of a revoked grant: %v", err)
	}
	// A forged token of an unknown grant is refused, and ends nothing.
	// (The grant above is revoked; this one is of no grant at all.)
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: "tbr_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("unknown grant: %v", err)
	}
}

func TestOAuthRevocation(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name   string
		revoke func(t *testing.T, s *Store, c OAuthClient, toks OAuthTokens)
	}{
		{"operator revokes the access token", func(t *testing.T, s *Store, c OAuthClient, toks OAuthTokens) {
			if err := s.RevokeToken(ctx, toks.Token.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{"client revokes the access token", func(t *testing.T, s *Store, c OAuthClient, toks OAuthTokens) {
			if err := s.RevokeOAuth(ctx, toks.Access, c.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{"client revokes the refresh token", func(t *testing.T, s *Store, c OAuthClient, toks OAuthTokens) {
			if err := s.RevokeOAuth(ctx, toks.Refresh, c.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{"the user is removed", func(t *testing.T, s *Store, c OAuthClient, toks OAuthTokens) {
			if _, err := s.AddUser(ctx, "alice", []byte("pw")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RemoveUser(ctx, "alice"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
			c, toks, _ := grantForTest(t, s)
			tc.revoke(t, s, c, toks)
			if _, err := s.AuthenticateToken(ctx, toks.Access); !errors.Is(err, ErrTokenRevoked) {
				t.Fatalf("access token: %v, want revoked", err)
			}
			if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: toks.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
				t.Fatalf("refresh: %v, want ErrInvalidGrant", err)
			}
		})
	}
	t.Run("another client's token is left alone", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
		_, toks, _ := grantForTest(t, s)
		for _, tc := range []struct {
			tok  string
			want error
		}{{toks.Access, ErrOtherClient}, {toks.Refresh, ErrOtherClient}, {"garbage", nil}} {
			if err := s.RevokeOAuth(ctx, tc.tok, "tbc_other"); !errors.Is(err, tc.want) {
				t.Fatalf("RevokeOAuth = %v, want %v", err, tc.want)
			}
		}
		if _, err := s.AuthenticateToken(ctx, toks.Access); err != nil {
			t.Fatalf("access token revoked by another client: %v", err)
		}
	})
}

// TestTokenHolder: the tokens of one OAuth grant (each refresh mints a
// new one) share a holder, so that an MCP session outlives a refresh;
// every other token is its own holder.
func TestTokenHolder(t *testing.T) {
	a := Token{ID: "tb_aaaaaaaa", ClientID: "tbc_x", Audience: "https://gw/api/v1/mcp"}
	for _, tc := range []struct {
		name string
		b    Token
		same bool
	}{
		{"refreshed token", Token{ID: "tb_bbbbbbbb", ClientID: "tbc_x", Audience: "https://gw/api/v1/mcp"}, true},
		{"another client", Token{ID: "tb_bbbbbbbb", ClientID: "tbc_y", Audience: "https://gw/api/v1/mcp"}, false},
		{"another resource", Token{ID: "tb_bbbbbbbb", ClientID: "tbc_x", Audience: "https://gw/api/v1/mcp/t/1"}, false},
		{"a personal token", Token{ID: "tb_aaaaaaaa"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if same := a.Holder() == tc.b.Holder(); same != tc.same {
				t.Fatalf("Holder %q vs %q: same = %t, want %t", a.Holder(), tc.b.Holder(), same, tc.same)
			}
		})
	}
	if p := (Token{ID: "tb_cccccccc"}); p.Holder() != p.ID {
		t.Fatalf("a personal token's holder is %q, want its ID", p.Holder())
	}
}

func TestPendingLogin(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{})
	state, err := s.SavePendingLogin(ctx, []byte(`{"a":1}`), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.TakePendingLogin(ctx, state); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("TakePendingLogin = %q, %v", got, err)
	}
	if _, err := s.TakePendingLogin(ctx, state); !errors.Is(err, ErrPendingLogin) {
		t.Fatalf("second take: %v, want ErrPendingLogin", err)
	}
	old, err := s.SavePendingLogin(ctx, []byte(`{}`), time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakePendingLogin(ctx, old); !errors.Is(err, ErrPendingLogin) {
		t.Fatalf("expired: %v, want ErrPendingLogin", err)
	}
	if _, err := s.TakePendingLogin(ctx, "unknown"); !errors.Is(err, ErrPendingLogin) {
		t.Fatalf("unknown: %v, want ErrPendingLogin", err)
	}
}

// TestOAuthRefreshLimits: a refresh for another resource is refused and
// leaves the grant as it was; a grant older than MaxAge refreshes no more.
func TestOAuthRefreshLimits(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{TokenCacheTTL: -1})
	c, toks, _ := grantForTest(t, s)
	req := OAuthRefresh{Token: toks.Refresh, ClientID: c.ID, Resource: "https://elsewhere/api/v1/mcp", AccessTTL: time.Hour, RefreshTTL: time.Hour}
	if _, err := s.RefreshOAuth(ctx, req); !errors.Is(err, ErrInvalidTarget) {
		t.Fatalf("refresh for another resource: %v, want ErrInvalidTarget", err)
	}
	req.Resource = toks.Token.Audience + "/" // the same, with a trailing slash
	next, err := s.RefreshOAuth(ctx, req)
	if err != nil {
		t.Fatalf("the refresh token after a refused target: %v", err)
	}
	if !next.RefreshExpires.After(time.Now().Add(59 * time.Minute)) {
		t.Fatalf("refresh expiry %v, want an hour from now", next.RefreshExpires)
	}
	req = OAuthRefresh{Token: next.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour, MaxAge: time.Minute}
	capped, err := s.RefreshOAuth(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if capped.RefreshExpires.After(time.Now().Add(time.Minute)) {
		t.Fatalf("refresh expiry %v beyond the grant's max age", capped.RefreshExpires)
	}
	// Past the grant's max age: the store's clock counts milliseconds, so
	// let a few pass since the grant began.
	for time.Since(toks.Token.Created) < 5*time.Millisecond {
		runtime.Gosched()
	}
	req.Token, req.MaxAge = capped.Refresh, 2*time.Millisecond
	if _, err := s.RefreshOAuth(ctx, req); !errors.Is(err, ErrInvalidGrant) || !strings.Contains(err.Error(), "sign in again") {
		t.Fatalf("refresh of a grant past its max age: %v", err)
	}
}

package store

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// findClient is the summary of client id in list.
func findClient(t *testing.T, list []OAuthClientSummary, id string) OAuthClientSummary {
	t.Helper()
	i := slices.IndexFunc(list, func(c OAuthClientSummary) bool { return c.ID == id })
	if i < 0 {
		t.Fatalf("client %s not listed in %+v", id, list)
	}
	return list[i]
}

// TestOAuthClientList: every registered client is listed, oldest first,
// with its redirect URIs, kind, first and last use, and its live grants
// and tokens; a revoked grant no longer counts.
func TestOAuthClientList(t *testing.T) {
	ctx := testContext(t)
	if list, err := openTestStore(t, StoreOptions{}).ListOAuthClients(ctx); err != nil || len(list) != 0 {
		t.Fatalf("empty store: %+v, %v", list, err)
	}
	s, conf, used, toks := listFixture(t)

	list, err := s.ListOAuthClients(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListOAuthClients = %+v, %v; want both clients", list, err)
	}
	if list[0].ID != conf.ID || list[1].ID != used.ID {
		t.Errorf("order %s, %s; want oldest first (%s, %s)", list[0].ID, list[1].ID, conf.ID, used.ID)
	}
	c := findClient(t, list, conf.ID)
	if c.Name != "Conf" || !c.Confidential || !slices.Equal(c.RedirectURIs, []string{"https://a.example/cb", "https://b.example/cb"}) ||
		!c.Used.IsZero() || !c.LastUsed.IsZero() || c.Grants != 0 || c.Tokens != 0 || c.Created.IsZero() {
		t.Errorf("unused confidential client: %+v", c)
	}
	u := findClient(t, list, used.ID)
	if u.Name != "Test client" || u.Confidential || u.Used.IsZero() || u.Grants != 1 || u.Tokens != 1 {
		t.Errorf("consented client: %+v; want used, one grant, one token", u)
	}
	if u.LastUsed.IsZero() {
		t.Errorf("consented client: no last use after its token was used")
	}

	// A revoked grant and its token no longer count.
	if err := s.RevokeOAuth(ctx, toks.Refresh, used.ID); err != nil {
		t.Fatal(err)
	}
	list, err = s.ListOAuthClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u := findClient(t, list, used.ID); u.Grants != 0 || u.Tokens != 0 {
		t.Errorf("after revocation: %+v; want no live grant or token", u)
	}
}

// listFixture is a store (in a directory it reopens once, so that the
// token's last use is written) with an unused confidential client and a
// used public one whose access token was used.
func listFixture(t *testing.T) (*Store, OAuthClient, OAuthClient, OAuthTokens) {
	t.Helper()
	ctx := testContext(t)
	dir := t.TempDir()
	s := openTestStoreIn(t, dir, StoreOptions{})
	conf, _, err := s.RegisterOAuthClient(ctx, "Conf", []string{"https://a.example/cb", "https://b.example/cb"}, true)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // created_ms orders the list
	used, toks, _ := grantForTest(t, s)
	if _, err := s.AuthenticateToken(ctx, toks.Access); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // writes the last use
		t.Fatal(err)
	}
	return openTestStoreIn(t, dir, StoreOptions{}), conf, used, toks
}

// TestOAuthClientDelete: deleting a client removes its grants, codes and
// tokens at once: its access token, cached, is refused right away, its
// refresh token and a code not yet redeemed are invalid, and it is gone
// from the list. Another client's grant is untouched. A second deletion,
// or one of an unknown client, gives ErrNotFound.
func TestOAuthClientDelete(t *testing.T) {
	ctx := testContext(t)
	// A cache TTL far beyond the test: only the invalidation can explain a refusal.
	s := openTestStore(t, StoreOptions{TokenCacheTTL: time.Hour})
	c, toks, _ := grantForTest(t, s)
	other, otherToks, _ := grantForTest(t, s)
	for _, sec := range []string{toks.Access, otherToks.Access} {
		if _, err := s.AuthenticateToken(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	spec := TokenSpec{UserID: "alice", ClientID: c.ID, TTL: time.Hour, Audience: "https://gw.example/api/v1/mcp"}
	pending, err := s.SaveOAuthCode(ctx, OAuthCode{ClientID: c.ID, RedirectURI: "http://127.0.0.1:9/cb", Challenge: "ch", Spec: spec, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}

	got, err := s.DeleteOAuthClient(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != c.ID || got.Grants != 1 || got.Codes != 2 || got.Tokens != 1 {
		t.Errorf("DeleteOAuthClient = %+v; want 1 grant, 2 codes (the redeemed one and the pending one), 1 token", got)
	}
	if _, err := s.AuthenticateToken(ctx, toks.Access); err == nil {
		t.Fatal("the deleted client's access token still authenticates")
	}
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: toks.Refresh, ClientID: c.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); !errors.Is(err, ErrInvalidGrant) {
		t.Errorf("refresh of the deleted client: %v, want ErrInvalidGrant", err)
	}
	if _, err := s.RedeemOAuthCode(ctx, pending); !errors.Is(err, ErrInvalidGrant) {
		t.Errorf("its pending code: %v, want ErrInvalidGrant", err)
	}
	if _, err := s.OAuthClient(ctx, c.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("OAuthClient after deletion: %v, want ErrNotFound", err)
	}
	list, err := s.ListOAuthClients(ctx)
	if err != nil || len(list) != 1 || list[0].ID != other.ID || list[0].Grants != 1 || list[0].Tokens != 1 {
		t.Errorf("list after deletion: %+v, %v; want the other client alone, with its grant", list, err)
	}
	all, err := s.ListTokens(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(all, func(tk Token) bool { return tk.ClientID == c.ID }) {
		t.Errorf("a token of the deleted client is left: %+v", all)
	}
	// The other client's token and refresh token still work.
	if _, err := s.AuthenticateToken(ctx, otherToks.Access); err != nil {
		t.Errorf("the other client's token: %v", err)
	}
	if _, err := s.RefreshOAuth(ctx, OAuthRefresh{Token: otherToks.Refresh, ClientID: other.ID, AccessTTL: time.Hour, RefreshTTL: time.Hour}); err != nil {
		t.Errorf("the other client's refresh: %v", err)
	}
	for _, id := range []string{c.ID, "tbc_nope", ""} {
		if _, err := s.DeleteOAuthClient(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("DeleteOAuthClient(%q): %v, want ErrNotFound", id, err)
		}
	}
}

// TestOAuthClientDeleteRacesGrant: a code redeemed before its client was
// deleted mints nothing after: GrantOAuth refuses, and leaves no token.
func TestOAuthClientDeleteRacesGrant(t *testing.T) {
	ctx := testContext(t)
	s := openTestStore(t, StoreOptions{})
	c, _, err := s.RegisterOAuthClient(ctx, "Racer", []string{"http://127.0.0.1/cb"}, false)
	if err != nil {
		t.Fatal(err)
	}
	spec := TokenSpec{UserID: "alice", ClientID: c.ID, TTL: time.Hour, Audience: "https://gw.example/api/v1/mcp"}
	code, err := s.SaveOAuthCode(ctx, OAuthCode{ClientID: c.ID, RedirectURI: "http://127.0.0.1:9/cb", Challenge: "ch", Spec: spec, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	redeemed, err := s.RedeemOAuthCode(ctx, code)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteOAuthClient(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if toks, err := s.GrantOAuth(ctx, redeemed, time.Hour); !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("grant after the client's deletion: %+v, %v; want ErrInvalidGrant", toks, err)
	}
	all, err := s.ListTokens(ctx, "alice")
	if err != nil || len(all) != 0 {
		t.Fatalf("tokens left: %+v, %v; want none", all, err)
	}
}

package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/store"
)

// TestRevocationRefusals: RFC 7009 section 2.1 at the revocation endpoint:
// a request without a token is invalid_request, a token issued to
// another client (or to no client: a personal one) is refused with
// unauthorized_client and lives on, an unknown one is 200 as the RFC wants.
func TestRevocationRefusals(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "http://127.0.0.1/cb"
	conf := e.config(e.register(redirect), redirect)
	code, v := e.grantCode(t, conf, "")
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	personal, _, err := e.store.CreateToken(ctx, store.TokenSpec{UserID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	other := e.register(redirect)
	revoke := func(t *testing.T, form url.Values) (int, string) {
		t.Helper()
		resp, err := http.PostForm(e.srv.URL+oauth.RevokePath, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Error
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		code   string
	}{
		{"no token", url.Values{"client_id": {conf.ClientID}}, http.StatusBadRequest, "invalid_request"},
		{"another client's refresh token", url.Values{"client_id": {other}, "token": {tok.RefreshToken}}, http.StatusBadRequest, "unauthorized_client"},
		{"another client's access token", url.Values{"client_id": {other}, "token": {tok.AccessToken}}, http.StatusBadRequest, "unauthorized_client"},
		{"a personal token", url.Values{"client_id": {conf.ClientID}, "token": {personal}}, http.StatusBadRequest, "unauthorized_client"},
		{"an unknown token", url.Values{"client_id": {conf.ClientID}, "token": {"tbr_0000000000000000_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}, http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, code := revoke(t, tc.form); status != tc.status || code != tc.code {
				t.Fatalf("revoke = %d %q, want %d %q", status, code, tc.status, tc.code)
			}
		})
	}
	// Nothing refused was revoked.
	for _, secret := range []string{tok.AccessToken, personal} {
		if _, err := e.store.AuthenticateToken(ctx, secret); err != nil {
			t.Fatalf("a token after refused revocations: %v", err)
		}
	}
	if !e.audited("revoke", "refused") {
		t.Error("no audit record of a refused revocation")
	}
	// Its own client revokes it.
	if status, code := revoke(t, url.Values{"client_id": {conf.ClientID}, "token": {tok.RefreshToken}}); status != http.StatusOK {
		t.Fatalf("revoke by its client = %d %q", status, code)
	}
	if _, err := e.store.AuthenticateToken(ctx, tok.AccessToken); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("access token after its client revoked the grant: %v", err)
	}
}

// TestRefreshScope: a refresh's scope (RFC 6749 section 6) beyond the
// grant's is invalid_scope and leaves the grant as it was; a narrower one
// narrows the new tokens, and later refreshes keep to it.
func TestRefreshScope(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "http://127.0.0.1/cb"
	conf := e.config(e.register(redirect), redirect)
	code, v := e.grantCode(t, conf, "")
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	refresh := func(scope string) (*oauth2.Token, error) {
		opts := []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("grant_type", "refresh_token"), oauth2.SetAuthURLParam("refresh_token", tok.RefreshToken)}
		if scope != "" {
			opts = append(opts, oauth2.SetAuthURLParam("scope", scope))
		}
		return conf.Exchange(ctx, "", opts...)
	}
	scopesOf := func(t *testing.T, tok *oauth2.Token) []string {
		t.Helper()
		at, err := e.store.AuthenticateToken(ctx, tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		return at.Scopes
	}
	for _, tc := range []struct{ name, scope string }{
		{"a scope offered but not granted", "tools:list admin:extra"},
		{"a scope not offered", "tools:list admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := refresh(tc.scope); !isOAuthError(err, "invalid_scope") {
				t.Fatalf("refresh with scope %q: %v, want invalid_scope", tc.scope, err)
			}
		})
	}
	narrowed, err := refresh(store.ScopeToolsList)
	if err != nil {
		t.Fatalf("refresh with a narrower scope (the refused ones must leave the grant alone): %v", err)
	}
	if got := scopesOf(t, narrowed); !slices.Equal(got, []string{store.ScopeToolsList}) || narrowed.Extra("scope") != store.ScopeToolsList {
		t.Fatalf("narrowed token scopes %v, response scope %v", got, narrowed.Extra("scope"))
	}
	tok = narrowed
	if _, err := refresh("tools:list tools:call"); !isOAuthError(err, "invalid_scope") {
		t.Fatalf("widening a narrowed grant again: %v, want invalid_scope", err)
	}
	again, err := refresh("")
	if err != nil {
		t.Fatal(err)
	}
	if got := scopesOf(t, again); !slices.Equal(got, []string{store.ScopeToolsList}) {
		t.Fatalf("a later refresh widened the grant again: %v", got)
	}
}

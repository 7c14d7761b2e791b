package oauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/oauth"
)

// grantCode runs the authorization request of conf (with resource, if not
// empty) and the user's consent, and returns the code and its verifier.
func (e *env) grantCode(t *testing.T, conf *oauth2.Config, resource string) (code, verifier string) {
	t.Helper()
	verifier = oauth2.GenerateVerifier()
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", resource))
	}
	return codeFrom(t, e.consent(conf.AuthCodeURL("s", opts...), allow()), "s"), verifier
}

// TestRedirectURIAtTokenEndpoint: a token request must name the
// redirect URI its authorization request named (RFC 6749 section 4.1.3);
// one whose authorization request named none (the client's only one
// implied) need not.
func TestRedirectURIAtTokenEndpoint(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "http://127.0.0.1/cb"
	id := e.register(redirect)
	for _, tc := range []struct {
		name            string
		atAuth, atToken string // "" leaves redirect_uri out
		wantErr         string // "" for success
	}{
		{"named at both", redirect, redirect, ""},
		{"named at authorization only", redirect, "", "invalid_request"},
		{"another at the token endpoint", redirect, "http://127.0.0.1:8/cb", "invalid_grant"},
		{"named at neither", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := e.config(id, tc.atAuth)
			code, v := e.grantCode(t, conf, "")
			conf.RedirectURL = tc.atToken
			_, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("exchange: %v", err)
			case tc.wantErr != "" && !isOAuthError(err, tc.wantErr):
				t.Fatalf("exchange: %v, want %s", err, tc.wantErr)
			}
		})
	}
}

// TestResourceForms: the scheme and host of a resource indicator are
// compared without case (the audience keeps them lower-cased), its path
// exactly: a trailing "/" names no endpoint, and the token endpoint
// refuses it, for a code and for a refresh.
func TestResourceForms(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "http://127.0.0.1/cb"
	conf := e.config(e.register(redirect), redirect)
	upper := strings.Replace(e.resource(), "http://", "HTTP://", 1)

	code, v := e.grantCode(t, conf, upper)
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v), oauth2.SetAuthURLParam("resource", e.resource()+"/")); !isOAuthError(err, "invalid_target") {
		t.Fatalf("exchange for %s/: %v, want invalid_target", e.resource(), err)
	}

	code, v = e.grantCode(t, conf, upper)
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v), oauth2.SetAuthURLParam("resource", upper))
	if err != nil {
		t.Fatalf("exchange for %s: %v", upper, err)
	}
	at, err := e.store.AuthenticateToken(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if at.Audience != e.resource() {
		t.Fatalf("audience %q, want %q", at.Audience, e.resource())
	}
	refresh := func(resource string) (*oauth2.Token, error) {
		return conf.Exchange(ctx, "", oauth2.SetAuthURLParam("grant_type", "refresh_token"),
			oauth2.SetAuthURLParam("refresh_token", tok.RefreshToken), oauth2.SetAuthURLParam("resource", resource))
	}
	if _, err := refresh(e.resource() + "/"); !isOAuthError(err, "invalid_target") {
		t.Fatalf("refresh for %s/: %v, want invalid_target", e.resource(), err)
	}
	if tok, err = refresh(upper); err != nil {
		t.Fatalf("refresh for %s: %v (the refused one must leave the grant alone)", upper, err)
	}
	if at, err = e.store.AuthenticateToken(ctx, tok.AccessToken); err != nil || at.Audience != e.resource() {
		t.Fatalf("refreshed token %+v, %v", at, err)
	}
}

// TestRevokeWithoutToken: RFC 7009 section 2.1 requires token; a request
// without one is invalid_request, not a 200 that revoked nothing.
func TestRevokeWithoutToken(t *testing.T) {
	e := newEnv(t, nil)
	id := e.register("http://127.0.0.1/cb")
	resp, err := http.PostForm(e.srv.URL+oauth.RevokePath, url.Values{"client_id": {id}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest || body.Error != "invalid_request" {
		t.Fatalf("revoke without a token = %d %q, want 400 invalid_request", resp.StatusCode, body.Error)
	}
	if !e.audited("revoke", "refused") {
		t.Error("the refusal is not audited")
	}
}

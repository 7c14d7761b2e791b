package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/store"
)

// env is an authorization server on a real listener over a real store,
// with one user (alice, password "alice-pw").
type env struct {
	t      *testing.T
	as     *oauth.Server
	srv    *httptest.Server
	store  *store.Store
	mu     sync.Mutex
	events []store.AuditEvent
}

func newEnv(t *testing.T, mod func(*oauth.Options)) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.StoreOptions{TokenCacheTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.AddUser(ctx, "alice", []byte("alice-pw")); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: st}
	opts := oauth.Options{
		Store:           st,
		Issuer:          func(r *http.Request) string { return "http://" + r.Host },
		Resource:        func(r *http.Request, res string) bool { return res == "http://"+r.Host+"/mcp" },
		DefaultResource: func(r *http.Request) string { return "http://" + r.Host + "/mcp" },
		Scopes:          []string{store.ScopeToolsList, store.ScopeToolsCall, "admin:extra"},
		Audit: func(ev store.AuditEvent) {
			e.mu.Lock()
			e.events = append(e.events, ev)
			e.mu.Unlock()
		},
	}
	if mod != nil {
		mod(&opts)
	}
	as, err := oauth.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.as = as
	e.srv = httptest.NewServer(as)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) resource() string { return e.srv.URL + "/mcp" }

// audited reports whether an event of action with outcome was recorded.
func (e *env) audited(action, outcome string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.events, func(ev store.AuditEvent) bool {
		return ev.Kind == store.AuditOAuth && ev.Action == action && ev.Outcome == outcome
	})
}

func (e *env) metadata() map[string]any {
	e.t.Helper()
	resp, err := http.Get(e.srv.URL + oauth.MetadataPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// register registers a public client with the go-sdk's DCR client.
func (e *env) register(redirect string) string {
	e.t.Helper()
	res, err := oauthex.RegisterClient(context.Background(), e.srv.URL+oauth.RegisterPath, &oauthex.ClientRegistrationMetadata{
		RedirectURIs: []string{redirect}, ClientName: "Test Client", TokenEndpointAuthMethod: "none",
	}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.ClientID
}

func (e *env) config(clientID, redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:    clientID,
		RedirectURL: redirect,
		Scopes:      []string{store.ScopeToolsList, store.ScopeToolsCall},
		Endpoint: oauth2.Endpoint{AuthURL: e.srv.URL + oauth.AuthorizePath, TokenURL: e.srv.URL + oauth.TokenPath,
			AuthStyle: oauth2.AuthStyleInParams},
	}
}

// noRedirects is a browser that stops at the redirect to the client.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// consent loads the page at authURL and posts its form as a browser of the
// same origin would, with the fields in form added; it returns the answer.
func (e *env) consent(authURL string, form url.Values) *http.Response {
	e.t.Helper()
	resp, err := noRedirects.Get(authURL)
	if err != nil {
		e.t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("authorization page: %s\n%s", resp.Status, page)
	}
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") {
		e.t.Fatalf("page CSP %q does not forbid framing", got)
	}
	q, _ := url.Parse(authURL)
	post := url.Values{}
	for k, v := range q.Query() {
		post[k] = v
	}
	for k, v := range form {
		post[k] = v
	}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+oauth.AuthorizePath, strings.NewReader(post.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if v := form.Get("_sec_fetch_site"); v != "" {
		req.Header.Set("Sec-Fetch-Site", v)
	}
	resp, err = noRedirects.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func allow() url.Values {
	return url.Values{"username": {"alice"}, "password": {"alice-pw"}, "action": {"allow"},
		"grant_scope": {store.ScopeToolsList, store.ScopeToolsCall}}
}

// codeFrom returns the code of a redirect to the client, failing on
// anything else.
func codeFrom(t *testing.T, resp *http.Response, state string) string {
	t.Helper()
	if resp.StatusCode != http.StatusSeeOther {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("consent answered %s, want 303\n%s", resp.Status, body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := loc.Query()
	if q.Get("state") != state || q.Get("iss") == "" || q.Get("code") == "" {
		t.Fatalf("redirect %s: want code, state %q and iss", loc, state)
	}
	return q.Get("code")
}

func TestMetadata(t *testing.T) {
	e := newEnv(t, nil)
	for _, path := range []string{oauth.MetadataPath} {
		t.Run(path, func(t *testing.T) {
			resp, err := noRedirects.Get(e.srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%s: %s %s", path, resp.Status, resp.Header.Get("Content-Type"))
			}
			var m struct {
				Issuer, AuthorizationEndpoint, TokenEndpoint, RegistrationEndpoint string
				CodeChallengeMethods                                               []string `json:"code_challenge_methods_supported"`
				CIMD                                                               bool     `json:"client_id_metadata_document_supported"`
				JWKS                                                               *string  `json:"jwks_uri"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
			if m.Issuer != e.srv.URL || !slices.Equal(m.CodeChallengeMethods, []string{"S256"}) || !m.CIMD || m.JWKS != nil {
				t.Fatalf("metadata %+v", m)
			}
		})
	}
	// No OpenID discovery document: the server issues no ID tokens, so
	// RFC 8414's document there would be an invalid one (no jwks_uri,
	// subject_types_supported, id_token_signing_alg_values_supported).
	for _, path := range []string{"/.well-known/oauth-authorization-server/extra", "/.well-known/openid-configuration"} {
		resp, err := noRedirects.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %s %s, want a JSON 404", path, resp.Status, resp.Header.Get("Content-Type"))
		}
	}
	// The go-sdk client's discovery, which tries RFC 8414's path first and
	// OpenID's only after it, finds the server.
	meta, err := auth.GetAuthServerMetadata(context.Background(), e.srv.URL, noRedirects)
	if err != nil || meta == nil || meta.TokenEndpoint != e.srv.URL+oauth.TokenPath {
		t.Fatalf("the go-sdk's discovery: %+v, %v", meta, err)
	}
}

// TestFlow runs the whole flow with golang.org/x/oauth2 as the client:
// registration, consent, code exchange, refresh, revocation.
func TestFlow(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "http://127.0.0.1/callback"
	conf := e.config(e.register(redirect), "http://127.0.0.1:49152/callback") // any port on loopback
	verifier := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", e.resource()))
	code := codeFrom(t, e.consent(authURL, allow()), "st4te")

	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", e.resource()))
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" || tok.Expiry.IsZero() || tok.Extra("scope") != "tools:list tools:call" {
		t.Fatalf("token response %+v scope %v", tok, tok.Extra("scope"))
	}
	at, err := e.store.AuthenticateToken(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if at.UserID != "alice" || at.Audience != e.resource() || at.ClientID != conf.ClientID || at.Name != "oauth: Test Client" {
		t.Fatalf("minted token %+v", at)
	}
	if toks, _ := e.store.ListTokens(ctx, "alice"); len(toks) != 1 || toks[0].ID != at.ID {
		t.Fatalf("token list %+v, want the consented token", toks)
	}

	// Refresh: the client's token source does it once the token expired.
	tok.Expiry = time.Now().Add(-time.Minute)
	fresh, err := conf.TokenSource(ctx, tok).Token()
	if err != nil {
		t.Fatal(err)
	}
	if fresh.AccessToken == tok.AccessToken || fresh.RefreshToken == tok.RefreshToken {
		t.Fatal("refresh did not rotate the tokens")
	}
	if _, err := e.store.AuthenticateToken(ctx, tok.AccessToken); !errors.Is(err, store.ErrUnauthenticated) {
		t.Fatalf("old access token after refresh: %v", err)
	}

	// Revocation (RFC 7009) of the refresh token ends the access token.
	resp, err := http.PostForm(e.srv.URL+oauth.RevokePath, url.Values{"token": {fresh.RefreshToken}, "client_id": {conf.ClientID}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("revoke: %s", resp.Status)
	}
	if _, err := e.store.AuthenticateToken(ctx, fresh.AccessToken); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("access token after revocation: %v", err)
	}
	for _, a := range []string{"register", "sign_in", "consent", "token", "refresh", "revoke"} {
		if !e.audited(a, "ok") {
			t.Errorf("no audit record of %s", a)
		}
	}
}

// TestUnusedClientsPurged: a registration nobody signed in with is gone
// once UnusedClientTTL has passed and another client registers; a client
// that got tokens stays.
func TestUnusedClientsPurged(t *testing.T) {
	e := newEnv(t, func(o *oauth.Options) { o.UnusedClientTTL = time.Millisecond })
	ctx := context.Background()
	const redirect = "http://127.0.0.1/callback"
	used := e.config(e.register(redirect), redirect)
	verifier := oauth2.GenerateVerifier()
	code := codeFrom(t, e.consent(used.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier)), allow()), "s")
	if _, err := used.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err != nil {
		t.Fatal(err)
	}
	unused := e.register(redirect)
	c, err := e.store.OAuthClient(ctx, unused)
	if err != nil {
		t.Fatal(err)
	}
	// The store's clock counts milliseconds: wait until the TTL is past.
	for time.Since(c.Created) < 3*time.Millisecond {
		runtime.Gosched()
	}
	e.register(redirect)
	if _, err := e.store.OAuthClient(ctx, unused); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unused client after a later registration: %v, want ErrNotFound", err)
	}
	if _, err := e.store.OAuthClient(ctx, used.ClientID); err != nil {
		t.Fatalf("used client purged: %v", err)
	}
}

// TestConsentNarrows: what the user unticks or narrows is what the token
// gets.
func TestConsentNarrows(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	conf := e.config(e.register("http://127.0.0.1/cb"), "http://127.0.0.1/cb")
	v := oauth2.GenerateVerifier()
	form := allow()
	form["grant_scope"] = []string{store.ScopeToolsList}
	form.Set("read_only", "on")
	form.Set("entities", "project/p1, project/p2")
	form.Set("agents", "weather")
	code := codeFrom(t, e.consent(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v)), form), "s")
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	at, err := e.store.AuthenticateToken(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(at.Scopes, []string{store.ScopeToolsList}) || !at.ReadOnly || len(at.Entities) != 2 || !slices.Equal(at.Agents, []string{"weather"}) {
		t.Fatalf("token %+v does not hold the narrowing", at)
	}
	if at.Audience != e.resource() {
		t.Fatalf("audience %q, want the default resource %q", at.Audience, e.resource())
	}
}

// TestRefusals: each way to get a token without the right is refused and
// audited.
func TestRefusals(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "http://127.0.0.1/cb"
	conf := e.config(e.register(redirect), redirect)
	page := func(t *testing.T, resp *http.Response, status int, text string) {
		t.Helper()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != status || !strings.Contains(string(body), text) {
			t.Fatalf("got %s, want %d with %q\n%s", resp.Status, status, text, body)
		}
	}
	redirectError := func(t *testing.T, resp *http.Response, code string) {
		t.Helper()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("error") != code || !strings.HasPrefix(loc.String(), redirect) {
			t.Fatalf("got %s to %q, want a redirect with error=%s", resp.Status, loc, code)
		}
	}
	get := func(t *testing.T, u string) *http.Response {
		t.Helper()
		resp, err := noRedirects.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	v := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v))

	// Consent forms refused on the page: field set to value ("" deletes
	// it), and the refusal's audit action ("" none checked).
	for _, tc := range []struct {
		name, field, value string
		status             int
		text, audit        string
	}{
		{"wrong password", "password", "guess", http.StatusUnauthorized, "Wrong user name or password", "sign_in"},
		{"unknown user", "username", "mallory", http.StatusUnauthorized, "Wrong user name or password", ""},
		{"cross-site form post", "_sec_fetch_site", "cross-site", http.StatusForbidden, "sent from another site", "authorize"},
		{"no scope ticked", "grant_scope", "", http.StatusBadRequest, "Choose at least one", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := allow()
			if tc.value == "" {
				delete(form, tc.field)
			} else {
				form.Set(tc.field, tc.value)
			}
			page(t, e.consent(authURL, form), tc.status, tc.text)
			if tc.audit != "" && !e.audited(tc.audit, "refused") {
				t.Fatal("not audited")
			}
		})
	}
	t.Run("changed redirect URI", func(t *testing.T) {
		c := *conf
		c.RedirectURL = "https://attacker.example/cb"
		page(t, get(t, c.AuthCodeURL("s", oauth2.S256ChallengeOption(v))), http.StatusBadRequest, "is not one the client registered")
		c.RedirectURL = "http://localhost:8000/cb" // another loopback host than the one registered
		page(t, get(t, c.AuthCodeURL("s", oauth2.S256ChallengeOption(v))), http.StatusBadRequest, "is not one the client registered")
		if !e.audited("authorize", "refused") {
			t.Fatal("not audited")
		}
	})
	t.Run("unknown client", func(t *testing.T) {
		c := *conf
		c.ClientID = "tbc_nosuchclient"
		page(t, get(t, c.AuthCodeURL("s", oauth2.S256ChallengeOption(v))), http.StatusBadRequest, "unknown client")
	})
	t.Run("no PKCE", func(t *testing.T) {
		page(t, get(t, conf.AuthCodeURL("s")), http.StatusBadRequest, "(invalid_request)")
	})
	t.Run("plain PKCE", func(t *testing.T) {
		page(t, get(t, conf.AuthCodeURL("s", oauth2.SetAuthURLParam("code_challenge", v), oauth2.SetAuthURLParam("code_challenge_method", "plain"))), http.StatusBadRequest, "(invalid_request)")
	})
	t.Run("scope not offered", func(t *testing.T) {
		c := *conf
		c.Scopes = []string{"admin"}
		page(t, get(t, c.AuthCodeURL("s", oauth2.S256ChallengeOption(v))), http.StatusBadRequest, "(invalid_scope)")
	})
	t.Run("resource not served", func(t *testing.T) {
		page(t, get(t, conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v), oauth2.SetAuthURLParam("resource", "https://other.example/mcp"))), http.StatusBadRequest, "(invalid_target)")
	})
	t.Run("deny", func(t *testing.T) {
		form := allow()
		form.Set("action", "deny")
		redirectError(t, e.consent(authURL, form), "access_denied")
		if !e.audited("deny", "ok") {
			t.Fatal("not audited")
		}
	})
	t.Run("code without its verifier", func(t *testing.T) {
		code := codeFrom(t, e.consent(authURL, allow()), "s")
		if _, err := conf.Exchange(ctx, code); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("exchange without verifier: %v", err)
		}
		// The code is spent even so.
		if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("exchange after a failed one: %v", err)
		}
		if !e.audited("token", "refused") {
			t.Fatal("not audited")
		}
	})
	t.Run("wrong verifier", func(t *testing.T) {
		code := codeFrom(t, e.consent(authURL, allow()), "s")
		if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier())); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("exchange with another verifier: %v", err)
		}
	})
	t.Run("reused code", func(t *testing.T) {
		code := codeFrom(t, e.consent(authURL, allow()), "s")
		tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("second exchange: %v", err)
		}
		if _, err := e.store.AuthenticateToken(ctx, tok.AccessToken); !errors.Is(err, store.ErrTokenRevoked) {
			t.Fatalf("token of a reused code: %v, want revoked", err)
		}
	})
	t.Run("code for another resource", func(t *testing.T) {
		code := codeFrom(t, e.consent(authURL, allow()), "s")
		if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v), oauth2.SetAuthURLParam("resource", "https://other.example/mcp")); !isOAuthError(err, "invalid_target") {
			t.Fatalf("exchange for another resource: %v", err)
		}
	})
	t.Run("code of another client", func(t *testing.T) {
		code := codeFrom(t, e.consent(authURL, allow()), "s")
		other := e.config(e.register(redirect), redirect)
		if _, err := other.Exchange(ctx, code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("exchange by another client: %v", err)
		}
	})
}

func isOAuthError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

func TestRegistrationRefusals(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		name string
		meta string
		code string
	}{
		{"no redirect URIs", `{"client_name":"x"}`, "invalid_redirect_uri"},
		{"http off loopback", `{"redirect_uris":["http://example.com/cb"]}`, "invalid_redirect_uri"},
		{"javascript", `{"redirect_uris":["javascript:alert(1)"]}`, "invalid_redirect_uri"},
		{"fragment", `{"redirect_uris":["https://a.example/cb#x"]}`, "invalid_redirect_uri"},
		{"implicit grant", `{"redirect_uris":["https://a.example/cb"],"grant_types":["implicit"]}`, "invalid_client_metadata"},
		{"unknown auth method", `{"redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"private_key_jwt"}`, "invalid_client_metadata"},
		{"not JSON", `redirect_uris=x`, "invalid_client_metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(e.srv.URL+oauth.RegisterPath, "application/json", strings.NewReader(tc.meta))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var oe struct{ Error string }
			_ = json.NewDecoder(resp.Body).Decode(&oe)
			if resp.StatusCode != 400 || oe.Error != tc.code {
				t.Fatalf("%s: %s %q, want 400 %s", tc.meta, resp.Status, oe.Error, tc.code)
			}
		})
	}
	// A custom scheme (a native app) and a confidential client are fine.
	res, err := oauthex.RegisterClient(context.Background(), e.srv.URL+oauth.RegisterPath, &oauthex.ClientRegistrationMetadata{
		RedirectURIs: []string{"com.example.app:/cb"}, TokenEndpointAuthMethod: "client_secret_post",
	}, nil)
	if err != nil || res.ClientSecret == "" {
		t.Fatalf("confidential native client: %+v %v", res, err)
	}
}

// TestConfidentialClient: a client with a secret must present it.
func TestConfidentialClient(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const redirect = "https://app.example/cb"
	res, err := oauthex.RegisterClient(ctx, e.srv.URL+oauth.RegisterPath, &oauthex.ClientRegistrationMetadata{RedirectURIs: []string{redirect}}, nil)
	if err != nil || res.ClientSecret == "" || res.TokenEndpointAuthMethod != "client_secret_basic" {
		t.Fatalf("default registration: %+v %v", res, err)
	}
	raw, err := http.Post(e.srv.URL+oauth.RegisterPath, "application/json", strings.NewReader(`{"redirect_uris":["`+redirect+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer map[string]any
	err = json.NewDecoder(raw.Body).Decode(&answer)
	raw.Body.Close()
	if exp, ok := answer["client_secret_expires_at"]; err != nil || !ok || exp != float64(0) {
		t.Fatalf("registration answer %v: want client_secret_expires_at 0 beside the secret (RFC 7591)", answer)
	}
	conf := e.config(res.ClientID, redirect)
	conf.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
	v := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v))
	code := codeFrom(t, e.consent(authURL, allow()), "s")
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v)); !isOAuthError(err, "invalid_client") {
		t.Fatalf("exchange without the secret: %v", err)
	}
	conf.ClientSecret = res.ClientSecret
	code = codeFrom(t, e.consent(authURL, allow()), "s")
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(v)); err != nil {
		t.Fatalf("exchange with the secret: %v", err)
	}
}

// TestClientMetadataDocument: a client_id that is a URL is fetched, with
// the limits a server reaching out on a stranger's word needs.
func TestClientMetadataDocument(t *testing.T) {
	docs := map[string]string{}
	var docsMu sync.Mutex
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/client.json", http.StatusFound)
			return
		}
		docsMu.Lock()
		d, ok := docs[r.URL.Path]
		docsMu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, d)
	}))
	t.Cleanup(host.Close)
	put := func(path, doc string) string {
		docsMu.Lock()
		docs[path] = strings.ReplaceAll(doc, "SELF", host.URL+path)
		docsMu.Unlock()
		return host.URL + path
	}
	const redirect = "http://127.0.0.1/cb"
	good := put("/client.json", `{"client_id":"SELF","client_name":"CIMD Client","redirect_uris":["`+redirect+`"]}`)

	t.Run("private address refused by default", func(t *testing.T) {
		e := newEnv(t, nil)
		resp, err := noRedirects.Get(e.config(good, redirect).AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), "https") {
			t.Fatalf("http metadata URL on loopback: %s\n%s", resp.Status, body)
		}
		// https, but on loopback: refused on the address dialled.
		resp, err = noRedirects.Get(e.config("https://127.0.0.1:1/client.json", redirect).AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), "is not on a public address") {
			t.Fatalf("https metadata URL on loopback: %s\n%s", resp.Status, body)
		}
	})

	e := newEnv(t, func(o *oauth.Options) { o.ClientMetadata.AllowPrivate = true })
	t.Run("flow", func(t *testing.T) {
		ctx := context.Background()
		conf := e.config(good, redirect)
		v := oauth2.GenerateVerifier()
		resp := e.consent(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v)), allow())
		tok, err := conf.Exchange(ctx, codeFrom(t, resp, "s"), oauth2.VerifierOption(v))
		if err != nil {
			t.Fatal(err)
		}
		at, err := e.store.AuthenticateToken(ctx, tok.AccessToken)
		if err != nil || at.ClientID != good || at.Name != "oauth: CIMD Client" {
			t.Fatalf("token %+v, %v", at, err)
		}
	})
	big := put("/big.json", `{"client_id":"SELF","client_name":"`+strings.Repeat("x", 6000)+`","redirect_uris":["`+redirect+`"]}`)
	for _, tc := range []struct{ name, id, want string }{
		{"client_id differs", put("/other.json", `{"client_id":"https://elsewhere.example/c.json","redirect_uris":["`+redirect+`"]}`), "not its own URL"},
		{"too big", big, "over 5120 bytes"},
		{"redirect not followed", host.URL + "/moved", "redirects are not followed"},
		{"not found", host.URL + "/missing.json", "HTTP 404"},
		{"secret in a public document", put("/secret.json", `{"client_id":"SELF","client_secret":"s","redirect_uris":["`+redirect+`"]}`), "client_secret"},
		{"bad redirect", put("/badredirect.json", `{"client_id":"SELF","redirect_uris":["http://example.com/cb"]}`), "loopback"},
		{"no path", host.URL, "want https://host/path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := noRedirects.Get(e.config(tc.id, redirect).AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(body), tc.want) {
				t.Fatalf("got %s, want 400 with %q\n%s", resp.Status, tc.want, body)
			}
		})
	}
}

// TestRateLimit: sign-in attempts beyond the limit get 429 before the
// password is checked.
func TestRateLimit(t *testing.T) {
	// Three a minute from one address: the registration takes one.
	e := newEnv(t, func(o *oauth.Options) { o.RateLimit = 3 })
	conf := e.config(e.register("http://127.0.0.1/cb"), "http://127.0.0.1/cb")
	authURL := conf.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	form := allow()
	form.Set("password", "guess")
	var statuses []int
	for range 3 {
		statuses = append(statuses, e.consent(authURL, form).StatusCode)
	}
	if !slices.Equal(statuses, []int{401, 401, 429}) {
		t.Fatalf("statuses %v, want 401 401 429", statuses)
	}
}

// TestOIDCCallbackRefusals: a callback whose state no sign-in holds is
// refused on a page and audited; without a provider there is no callback.
func TestOIDCCallbackRefusals(t *testing.T) {
	e := newEnv(t, func(o *oauth.Options) {
		o.OIDC = oauth.OIDCOptions{Issuer: "http://127.0.0.1:1/", ClientID: "toolbus"}
	})
	resp, err := noRedirects.Get(e.srv.URL + oauth.CallbackPath + "?state=forged&code=x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "unknown or expired") || !e.audited("sign_in", "refused") {
		t.Fatalf("forged callback: %s\n%s", resp.Status, body)
	}
	plain := newEnv(t, nil)
	resp, err = noRedirects.Get(plain.srv.URL + oauth.CallbackPath + "?state=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("callback without a provider: %s, want 404", resp.Status)
	}
	if _, err := oauth.New(oauth.Options{Store: e.store, Issuer: func(*http.Request) string { return "" },
		Resource: func(*http.Request, string) bool { return false }, DefaultResource: func(*http.Request) string { return "" },
		OIDC: oauth.OIDCOptions{Issuer: "https://idp.example"}}); err == nil {
		t.Fatal("New accepted an OpenID issuer without a client ID")
	}
}

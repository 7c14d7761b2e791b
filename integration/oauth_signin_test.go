package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// signIn plays the user at the authorization page the client opened: it
// loads the page, then posts its form as a browser on that page would
// (same origin), signed in as user, allowing every scope asked for. It
// returns what the redirect to the client carries.
func signIn(t *testing.T, authURL, user, password string) (*auth.AuthorizationResult, error) {
	t.Helper()
	resp, err := noRedirects.Get(authURL)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), `name="password"`) {
		return nil, fmt.Errorf("authorization page: %s\n%s", resp.Status, page)
	}
	u, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	form := u.Query()
	form.Set("username", user)
	form.Set("password", password)
	form.Set("action", "allow")
	form["grant_scope"] = strings.Fields(form.Get("scope"))
	req, _ := http.NewRequest(http.MethodPost, u.Scheme+"://"+u.Host+u.Path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", u.Scheme+"://"+u.Host)
	resp, err = (&http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("consent: %s\n%s", resp.Status, body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return nil, err
	}
	q := loc.Query()
	if q.Get("error") != "" {
		return nil, fmt.Errorf("consent redirected with error %s: %s", q.Get("error"), q.Get("error_description"))
	}
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// oauthClient connects the go-sdk client to endpoint with nothing but the
// URL and an OAuth handler configured by cfg; signing in counts the times
// the user was asked.
func oauthClient(t *testing.T, endpoint string, cfg *auth.AuthorizationCodeHandlerConfig, asked *atomic.Int32) (*mcp.ClientSession, *auth.AuthorizationCodeHandler) {
	t.Helper()
	cfg.AuthorizationCodeFetcher = func(_ context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		asked.Add(1)
		return signIn(t, args.URL, "alice", "alice-password")
	}
	h, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-it-oauth", Version: "1"}, nil)
	cs, err := c.Connect(testCtx(t, 30*time.Second), &mcp.StreamableClientTransport{Endpoint: endpoint, OAuthHandler: h}, nil)
	if err != nil {
		t.Fatalf("connect with OAuth: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, h
}

// status is the HTTP status of a ping to endpoint with token.
func status(t *testing.T, endpoint, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestOAuthSignIn: the go-sdk client, given only the endpoint's URL,
// finds the authorization server through the 401 and the metadata,
// registers (RFC 7591), has alice sign in and consent, and lists and
// calls tools with the token it got, as alice. The token is bound to the
// endpoint: another resource refuses it. Revoking it (the operator's
// `token revoke`) gives 401 on the next request; personal tokens work
// beside it all along.
func TestOAuthSignIn(t *testing.T) {
	e := startGateway(t, server.Config{})
	ctx := testCtx(t, 60*time.Second)
	if _, err := e.srv.Store().AddUser(ctx, "alice", []byte("alice-password")); err != nil {
		t.Fatal(err)
	}
	const redirect = "http://127.0.0.1:53682/callback"
	var asked atomic.Int32
	cs, h := oauthClient(t, e.mcpURL(), &auth.AuthorizationCodeHandlerConfig{
		RedirectURL: redirect,
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "go-sdk test client", RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"},
		}},
	}, &asked)
	if asked.Load() != 1 {
		t.Fatalf("the user was asked %d times, want 1", asked.Load())
	}
	if got := toolNames(t, cs); !slices.Contains(got, "echo") || !slices.Contains(got, "platform_whoami") {
		t.Fatalf("tools = %v", got)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "signed in"}})
	if err != nil || res.IsError || textOf(t, res) != "signed in" {
		t.Fatalf("echo: %+v %v", res, err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami_agent"})
	if err != nil || !strings.HasPrefix(textOf(t, res), "alice/") {
		t.Fatalf("the agent sees the caller as %q (%v), want alice", textOf(t, res), err)
	}

	ts, err := h.TokenSource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.srv.Store().AuthenticateToken(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if stored.UserID != "alice" || stored.Audience != e.mcpURL() || stored.Name != "oauth: go-sdk test client" || tok.RefreshToken == "" {
		t.Fatalf("the consented token: %+v (refresh %t)", stored, tok.RefreshToken != "")
	}

	// Bound to the endpoint it was issued for (RFC 8707).
	if got := status(t, e.base+"/api/v1/mcp/ticket/42", tok.AccessToken); got != http.StatusUnauthorized {
		t.Errorf("the token on another resource: %d, want 401", got)
	}
	if got := status(t, e.base+"/api/v1/admin/tokens", tok.AccessToken); got != http.StatusUnauthorized {
		t.Errorf("the token on the admin API: %d, want 401", got)
	}
	other := e.token(t, store.TokenSpec{UserID: "alice", Audience: "https://elsewhere.example/api/v1/mcp"})
	if got := status(t, e.mcpURL(), other); got != http.StatusUnauthorized {
		t.Errorf("a token issued for another resource: %d, want 401", got)
	}
	waitAudit(t, e.srv.Store(), "the three refusals", store.AuditQuery{Kind: store.AuditRefused}, 3)

	// Personal tokens still work, unchanged.
	personal := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "bob"}), "2025-11-25", nil)
	if got := toolNames(t, personal); !slices.Contains(got, "echo") {
		t.Fatalf("personal token's tools: %v", got)
	}

	// Revoking the consented token ends the client's access at once.
	if err := e.srv.Store().RevokeToken(ctx, stored.ID); err != nil {
		t.Fatal(err)
	}
	if got := status(t, e.mcpURL(), tok.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("the revoked token: %d, want 401", got)
	}

	// Every step of the sign-in is in the audit log.
	waitAudit(t, e.srv.Store(), "the oauth records", store.AuditQuery{Kind: store.AuditOAuth}, 4)
	records := auditAll(t, e.srv.Store(), store.AuditQuery{Kind: store.AuditOAuth})
	for _, action := range []string{"register", "sign_in", "consent", "token"} {
		found := slices.ContainsFunc(records, func(ev store.AuditEvent) bool {
			return ev.Action == action && ev.Outcome == "ok"
		})
		if !found {
			t.Errorf("no audit record of %s", action)
		}
	}
}

// TestOAuthClientMetadataDocument: the same flow with a Client ID Metadata
// Document served over https on loopback instead of a registration.
func TestOAuthClientMetadataDocument(t *testing.T) {
	const redirect = "http://127.0.0.1:53683/callback"
	doc := httptest.NewUnstartedServer(nil)
	doc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"client_id":%q,"client_name":"CIMD test client","redirect_uris":[%q],"grant_types":["authorization_code","refresh_token"],"token_endpoint_auth_method":"none"}`,
			"https://"+r.Host+r.URL.Path, redirect)
	})
	doc.StartTLS()
	t.Cleanup(doc.Close)
	e := startGateway(t, server.Config{OAuth: server.OAuthConfig{AllowPrivateClientMetadata: true,
		ClientMetadataTransport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: doc.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}}})
	ctx := testCtx(t, 60*time.Second)
	if _, err := e.srv.Store().AddUser(ctx, "alice", []byte("alice-password")); err != nil {
		t.Fatal(err)
	}
	clientID := doc.URL + "/client.json"
	var asked atomic.Int32
	cs, h := oauthClient(t, e.mcpURL(), &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:                    redirect,
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: clientID},
	}, &asked)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "cimd"}})
	if err != nil || textOf(t, res) != "cimd" {
		t.Fatalf("echo: %+v %v", res, err)
	}
	ts, _ := h.TokenSource(ctx)
	tok, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := e.srv.Store().AuthenticateToken(ctx, tok.AccessToken)
	if err != nil || stored.ClientID != clientID || stored.Name != "oauth: CIMD test client" {
		t.Fatalf("token %+v, %v", stored, err)
	}
}

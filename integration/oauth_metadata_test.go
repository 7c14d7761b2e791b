package integration

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// noRedirects is an HTTP client that reports a redirect instead of
// following it: metadata must never come from one.
var noRedirects = &http.Client{
	Timeout: 10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("redirected")
	},
}

// TestProtectedResourceMetadata: a 401 of the MCP endpoint points an OAuth
// client to the endpoint's Protected Resource Metadata (RFC 9728) and says
// the scopes it needs; the go-sdk's own discovery reads the challenge and
// the metadata, for the endpoint and for an entity-scoped one; --public-url
// names the URL behind a proxy; other /.well-known/ paths are JSON 404s,
// never redirects; a 401 elsewhere points nowhere.
func TestProtectedResourceMetadata(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	proxied := startServer(t, server.Config{PublicURL: "https://mcp.example.com/"})

	for _, path := range []string{"/api/v1/mcp", "/api/v1/mcp/ticket/42"} {
		t.Run(path, func(t *testing.T) {
			resp, err := noRedirects.Post(base+path, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("POST without a token = %d, want 401", resp.StatusCode)
			}
			challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
			if err != nil || len(challenges) != 1 || !strings.EqualFold(challenges[0].Scheme, "Bearer") {
				t.Fatalf("WWW-Authenticate %q: %+v, %v", resp.Header.Values("WWW-Authenticate"), challenges, err)
			}
			params := challenges[0].Params
			if want := base + "/.well-known/oauth-protected-resource" + path; params["resource_metadata"] != want {
				t.Errorf("resource_metadata = %q, want %q", params["resource_metadata"], want)
			}
			if params["scope"] != "tools:list tools:call" {
				t.Errorf("scope = %q", params["scope"])
			}
			if _, ok := params["error"]; ok {
				t.Errorf("a request without a token got error=%q", params["error"])
			}
			// A token that is refused says so (RFC 6750 section 3.1).
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Authorization", "Bearer tb_00000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
			bad, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			bad.Body.Close()
			if cs, err := oauthex.ParseWWWAuthenticate(bad.Header.Values("WWW-Authenticate")); err != nil || len(cs) != 1 || cs[0].Params["error"] != "invalid_token" {
				t.Errorf("a refused token: WWW-Authenticate %q, want error=\"invalid_token\"", bad.Header.Values("WWW-Authenticate"))
			}
			prm, err := oauthex.GetProtectedResourceMetadata(testCtx(t, 10*time.Second), params["resource_metadata"], base+path, noRedirects)
			if err != nil {
				t.Fatalf("the go-sdk's discovery: %v", err)
			}
			if len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != base {
				t.Errorf("authorization_servers = %v, want the gateway itself (%s)", prm.AuthorizationServers, base)
			}
			if strings.Join(prm.ScopesSupported, " ") != "tools:list tools:call" || strings.Join(prm.BearerMethodsSupported, " ") != "header" || prm.ResourceName != "toolbus" {
				t.Errorf("metadata %+v", prm)
			}
		})
	}

	// The origin's metadata at the root (RFC 9728 section 3.3), and an endpoint's behind a proxy.
	for _, tc := range []struct{ url, resource string }{
		{base + "/.well-known/oauth-protected-resource", base},
		{"http://" + proxied.HTTPAddr().String() + "/.well-known/oauth-protected-resource/api/v1/mcp", "https://mcp.example.com/api/v1/mcp"},
	} {
		resp, err := noRedirects.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		var prm oauthex.ProtectedResourceMetadata
		err = json.NewDecoder(resp.Body).Decode(&prm)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || prm.Resource != tc.resource {
			t.Errorf("GET %s = %d %+v %v; want resource %s", tc.url, resp.StatusCode, prm, err, tc.resource)
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("GET %s: no CORS header for browser clients", tc.url)
		}
	}

	// Other well-known paths: JSON 404s, unclean ones too (the router
	// would redirect those).
	for _, path := range []string{"/.well-known/oauth-protected-resource/elsewhere", "/.well-known/oauth-protected-resource/api/v1/mcp/a",
		"/.well-known/oauth-protected-resource//api/v1/mcp", "/.well-known/oauth-authorization-server/x", "/.well-known/oauth-protected-resource/../x"} {
		resp, err := noRedirects.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("GET %s = %d %s, want a JSON 404", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}

	// A Host the gateway does not serve (DNS rebinding) gets no metadata
	// naming it.
	req, _ := http.NewRequest(http.MethodGet, base+"/.well-known/oauth-protected-resource", nil)
	req.Host = "evil.example"
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("metadata for Host evil.example = %d, want 403", resp.StatusCode)
	}

	// A 401 of the admin API is not the MCP resource's.
	resp, err = noRedirects.Get(base + "/api/v1/admin/tokens")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || strings.Contains(got, "resource_metadata") {
		t.Errorf("admin API without a token = %d, WWW-Authenticate %q; want 401 without resource_metadata", resp.StatusCode, got)
	}
}

// TestOAuthDisabled: with --oauth=false the metadata names no
// authorization server and its endpoints are not served.
func TestOAuthDisabled(t *testing.T) {
	srv := startServer(t, server.Config{OAuth: server.OAuthConfig{Disabled: true}})
	base := "http://" + srv.HTTPAddr().String()
	resp, err := noRedirects.Get(base + "/.well-known/oauth-protected-resource/api/v1/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var prm oauthex.ProtectedResourceMetadata
	err = json.NewDecoder(resp.Body).Decode(&prm)
	resp.Body.Close()
	if err != nil || len(prm.AuthorizationServers) != 0 {
		t.Fatalf("metadata %+v %v: want no authorization server", prm, err)
	}
	for _, path := range []string{"/.well-known/oauth-authorization-server", "/oauth/authorize", "/oauth/token"} {
		resp, err := noRedirects.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestInsufficientScopeChallenge: a 403 for a missing scope names the
// scope in an insufficient_scope challenge (RFC 6750 section 3.1), the
// MCP spec's cue for step-up authorization; a 403 for anything else
// (read-only) does not.
func TestInsufficientScopeChallenge(t *testing.T) {
	e := startHostile(t, server.Config{})
	listOnly, _, err := e.srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "ivy", Scopes: []string{store.ScopeToolsList}})
	if err != nil {
		t.Fatal(err)
	}
	r := e.post(t, "/api/v1/mcp", listOnly, callBody(1, "echo", map[string]string{"text": "x"}), map[string]string{"Mcp-Session-Id": e.session(t, listOnly)})
	cs, err := oauthex.ParseWWWAuthenticate(r.header.Values("WWW-Authenticate"))
	if r.status != http.StatusForbidden || err != nil || len(cs) != 1 || cs[0].Params["error"] != "insufficient_scope" ||
		cs[0].Params["scope"] != "tools:list tools:call" || cs[0].Params["resource_metadata"] != e.base+"/.well-known/oauth-protected-resource/api/v1/mcp" {
		t.Fatalf("tools/call without tools:call: %d, WWW-Authenticate %q", r.status, r.header.Values("WWW-Authenticate"))
	}
	r = e.post(t, "/api/v1/mcp", e.ro, callBody(2, "delete_all", map[string]string{}), map[string]string{"Mcp-Session-Id": e.session(t, e.ro)})
	if r.status != http.StatusForbidden || r.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("read-only refusal: %d, WWW-Authenticate %q (want none: no scope would help)", r.status, r.header.Get("WWW-Authenticate"))
	}
}

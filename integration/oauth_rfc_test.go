package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestRootProtectedResourceMetadata: the metadata at the root well-known
// path is the origin's (RFC 9728 section 3.3), the metadata of an
// endpoint's path the endpoint's; the go-sdk's checks accept both.
func TestRootProtectedResourceMetadata(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	for _, tc := range []struct{ path, resource string }{
		{"", base},
		{"/api/v1/mcp", base + "/api/v1/mcp"},
		{"/api/v1/mcp/ticket/42", base + "/api/v1/mcp/ticket/42"},
	} {
		t.Run("metadata"+tc.path, func(t *testing.T) {
			prm, err := oauthex.GetProtectedResourceMetadata(testCtx(t, 10*time.Second),
				base+"/.well-known/oauth-protected-resource"+tc.path, tc.resource, noRedirects)
			if err != nil {
				t.Fatal(err)
			}
			if prm.Resource != tc.resource {
				t.Fatalf("resource %q, want %q", prm.Resource, tc.resource)
			}
		})
	}
}

// TestWrongAudienceNamesBoth: a token used at an endpoint it was not issued
// for gets 401 with invalid_token, and the answer names the resource it was
// issued for and the one it was used at.
func TestWrongAudienceNamesBoth(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	aud := base + "/api/v1/mcp/ticket/42"
	secret, _, err := srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "ann", Audience: aud, ClientID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/api/v1/mcp/ticket/42", http.StatusOK},
		{"/api/v1/mcp", http.StatusUnauthorized},
		{"/api/v1/mcp/ticket/43", http.StatusUnauthorized},
	} {
		t.Run(tc.path, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodPost, base+tc.path, strings.NewReader(initBody))
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("POST = %d %s, want %d", resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusOK {
				return
			}
			var e struct {
				Message string `json:"message"`
			}
			_ = json.Unmarshal(body, &e)
			if !strings.Contains(string(body), aud) || !strings.Contains(string(body), base+tc.path) {
				t.Errorf("401 body %s does not name the token's audience %s and the endpoint %s", body, aud, base+tc.path)
			}
			if !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
				t.Errorf("WWW-Authenticate %q", resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
}

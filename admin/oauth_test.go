package admin_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// oauthGrant registers a public client and runs one consent of alice's
// through to a grant, in the store of e's server, for e's MCP endpoint. It
// returns the client and the access token.
func oauthGrant(t *testing.T, e *env, name string) (store.OAuthClient, string) {
	t.Helper()
	st := e.srv.Store()
	c, _, err := st.RegisterOAuthClient(ctx(t), name, []string{"http://127.0.0.1:9/cb"}, false)
	if err != nil {
		t.Fatal(err)
	}
	spec := store.TokenSpec{UserID: "alice", Scopes: []string{store.ScopeToolsList}, TTL: time.Hour,
		Audience: e.base + "/api/v1/mcp", ClientID: c.ID, Name: "oauth: " + name}
	code, err := st.SaveOAuthCode(ctx(t), store.OAuthCode{ClientID: c.ID, RedirectURI: "http://127.0.0.1:9/cb", Challenge: "ch", Spec: spec,
		Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	redeemed, err := st.RedeemOAuthCode(ctx(t), code)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := st.GrantOAuth(ctx(t), redeemed, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c, toks.Access
}

// mcpStatus is the status of an initialize on e's MCP endpoint with secret.
func mcpStatus(t *testing.T, e *env, secret string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, e.base+"/api/v1/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestOAuthClients: the API lists the registered OAuth clients with their
// live grants and tokens, never a secret; deleting one (admin scope only)
// ends its token at once, leaves the other client alone, is audited, and
// a second deletion is 404.
func TestOAuthClients(t *testing.T) {
	e := startEnv(t)
	c, access := oauthGrant(t, e, "Claude Desktop")
	other, otherAccess := oauthGrant(t, e, "Other client")
	for _, sec := range []string{access, otherAccess} {
		if got := mcpStatus(t, e, sec); got != http.StatusOK {
			t.Fatalf("the consented token before deletion: %d, want 200", got)
		}
	}

	list, err := e.adm.OAuthClients(ctx(t))
	if err != nil || len(list) != 2 {
		t.Fatalf("OAuthClients = %+v, %v; want both clients", list, err)
	}
	got := list[0] // oldest first; two registered in the same millisecond go by ID
	if got.ID != c.ID {
		got = list[1]
	}
	if got.ID != c.ID || got.Name != "Claude Desktop" || got.Confidential || len(got.RedirectURIs) != 1 || got.Grants != 1 ||
		got.Tokens != 1 || got.FirstUsed == nil || got.Registered.IsZero() {
		t.Fatalf("listed client %+v", got)
	}
	status, body := do(t, http.MethodGet, e.base+"/api/v1/admin/oauth-clients", e.adminSecret, "")
	if status != http.StatusOK || !strings.Contains(body, `"redirectUris":["http://127.0.0.1:9/cb"]`) || strings.Contains(strings.ToLower(body), "secret") {
		t.Fatalf("GET /oauth-clients = %d %s", status, body)
	}

	// Without the admin scope, nothing.
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		path := e.base + "/api/v1/admin/oauth-clients"
		if m == http.MethodDelete {
			path += "/" + c.ID
		}
		if status, body := do(t, m, path, e.userSecret, ""); status != http.StatusForbidden {
			t.Fatalf("%s without the admin scope = %d %s, want 403", m, status, body)
		}
		if status, _ := do(t, m, path, "", ""); status != http.StatusUnauthorized {
			t.Fatalf("%s without a token = %d, want 401", m, status)
		}
	}
	if got := mcpStatus(t, e, access); got != http.StatusOK {
		t.Fatalf("the token after a refused deletion: %d, want 200", got)
	}

	del, err := e.adm.DeleteOAuthClient(ctx(t), c.ID)
	if err != nil || del.ID != c.ID || del.Grants != 1 || del.Codes != 1 || del.Tokens != 1 || !strings.Contains(del.Done, c.ID) {
		t.Fatalf("DeleteOAuthClient = %+v, %v", del, err)
	}
	if got := mcpStatus(t, e, access); got != http.StatusUnauthorized {
		t.Fatalf("the deleted client's token: %d, want 401 at once", got)
	}
	if got := mcpStatus(t, e, otherAccess); got != http.StatusOK {
		t.Fatalf("the other client's token: %d, want 200", got)
	}
	list, err = e.adm.OAuthClients(ctx(t))
	if err != nil || len(list) != 1 || list[0].ID != other.ID {
		t.Fatalf("after deletion: %+v, %v; want the other client alone", list, err)
	}
	var ae *admin.APIError
	if _, err := e.adm.DeleteOAuthClient(ctx(t), c.ID); !errors.Is(err, store.ErrNotFound) || !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("second deletion: %v, want 404", err)
	}

	// Both deletions are in the audit log, with the admin token that asked.
	testenv.Poll(t, 10*time.Second, "the audit records of the deletions", func() bool {
		evs, _, err := e.srv.Store().QueryAudit(ctx(t), store.AuditQuery{Kind: store.AuditAdmin, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ok, refused bool
		for _, ev := range evs {
			if ev.Action != "oauth_client.delete" || ev.Target != "oauth client "+c.ID || ev.UserID != "root" {
				continue
			}
			ok = ok || ev.Outcome == "ok"
			refused = refused || ev.Outcome == "error"
		}
		return ok && refused
	})
}

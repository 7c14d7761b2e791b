package console_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// oauthConsented registers a public client named name in srv's store and
// runs a consent of dev's through to a grant for srv's MCP endpoint; it
// returns the client's ID and the access token.
func oauthConsented(t *testing.T, srv *server.Server, base, name string) (string, string) {
	t.Helper()
	st := srv.Store()
	c, _, err := st.RegisterOAuthClient(ctx(t), name, []string{"http://127.0.0.1:9/cb"}, false)
	if err != nil {
		t.Fatal(err)
	}
	spec := store.TokenSpec{UserID: "dev", Scopes: []string{store.ScopeToolsList}, TTL: time.Hour,
		Audience: base + "/api/v1/mcp", ClientID: c.ID, Name: "oauth: " + name}
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
	return c.ID, toks.Access
}

// oauthMCPStatus is the status of an initialize on base's MCP endpoint
// with secret.
func oauthMCPStatus(t *testing.T, base, secret string) int {
	t.Helper()
	resp, _ := do(t, http.DefaultClient, http.MethodPost, base+"/api/v1/mcp", nil, map[string]string{
		"Authorization": "Bearer " + secret, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	return resp.StatusCode
}

// oauthAdminAudit waits for an admin record that match selects.
func oauthAdminAudit(t *testing.T, srv *server.Server, what string, match func(store.AuditEvent) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		evs, _, err := srv.Store().QueryAudit(ctx(t), store.AuditQuery{Kind: store.AuditAdmin, Limit: store.MaxAuditLimit})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if match(e) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no admin audit record %s", what)
}

// TestConsoleOAuthClients: the OAuth clients page lists the registered
// clients (their names as text) with their live grants and tokens; Delete
// removes one with its grants and tokens, whose token is refused at once,
// audited as the operator from the console. Without a session, or from
// another site, nothing is shown or deleted; an unknown client is 404.
func TestConsoleOAuthClients(t *testing.T) {
	srv, base := startConsole(t)
	id, access := oauthConsented(t, srv, base, `Evil <img src=x onerror=alert(1)>`)
	otherID, otherAccess := oauthConsented(t, srv, base, "Other client")
	if got := oauthMCPStatus(t, base, access); got == http.StatusUnauthorized {
		t.Fatal("the consented token is refused before the deletion")
	}
	page, del := base+"/console/oauth-clients", base+"/console/oauth-clients/"+id+"/delete"

	t.Run("no session", func(t *testing.T) {
		c := browser(t)
		if resp, body := do(t, c, http.MethodGet, page, nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) || strings.Contains(body, id) {
			t.Fatalf("GET without a session: %d", resp.StatusCode)
		}
		if resp, _ := do(t, c, http.MethodPost, del, url.Values{}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("POST without a session: %d", resp.StatusCode)
		}
	})
	t.Run("not an admin", func(t *testing.T) {
		c := browser(t)
		if resp := signIn(t, c, base, "dev"); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("sign-in of a non-admin: %d", resp.StatusCode)
		}
		if resp, _ := do(t, c, http.MethodPost, del, url.Values{}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("POST of a non-admin: %d", resp.StatusCode)
		}
	})
	c := browser(t)
	if resp := signIn(t, c, base, "ops"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	t.Run("cross-site post", func(t *testing.T) {
		resp, body := do(t, c, http.MethodPost, del, url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") {
			t.Fatalf("cross-site delete: %d\n%s", resp.StatusCode, body)
		}
	})
	if got := oauthMCPStatus(t, base, access); got == http.StatusUnauthorized {
		t.Fatal("a refused deletion ended the token")
	}

	resp, body := do(t, c, http.MethodGet, page, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<tr data-client="`+id+`" data-grants="1" data-tokens="1">`) ||
		!strings.Contains(body, `data-client="`+otherID+`"`) || !strings.Contains(body, "http://127.0.0.1:9/cb") {
		t.Fatalf("page: %d\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, "<img") || !strings.Contains(body, "Evil &lt;img src=x onerror=alert(1)&gt;") {
		t.Fatalf("the client's name is not shown as text:\n%s", body)
	}

	resp, body = do(t, c, http.MethodPost, del, url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Deleted OAuth client "+id+" with 1 grant(s), 1 authorization code(s) and 1 token(s)") ||
		strings.Contains(body, `data-client="`+id+`"`) || !strings.Contains(body, `data-client="`+otherID+`"`) {
		t.Fatalf("delete: %d\n%s", resp.StatusCode, body)
	}
	if got := oauthMCPStatus(t, base, access); got != http.StatusUnauthorized {
		t.Fatalf("the deleted client's token: %d, want 401 at once", got)
	}
	if got := oauthMCPStatus(t, base, otherAccess); got == http.StatusUnauthorized {
		t.Fatal("the other client's token is refused")
	}
	oauthAdminAudit(t, srv, "of the deletion", func(e store.AuditEvent) bool {
		return e.Action == "oauth_client.delete" && e.Target == "oauth client "+id && e.UserID == "ops" && e.Source == "console" && e.Outcome == "ok"
	})
	resp, body = do(t, c, http.MethodPost, del, url.Values{}, nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "not found") {
		t.Fatalf("second delete: %d\n%s", resp.StatusCode, body)
	}
}

// sessionCookie is the console cookie c holds for base.
func sessionCookie(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	u, _ := url.Parse(base + "/console/")
	for _, k := range c.Jar.Cookies(u) {
		if k.Name == "toolbus-console" {
			return k.Value
		}
	}
	t.Fatal("no console cookie")
	return ""
}

func sessionHandle(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])[:8]
}

// TestConsoleSessions: the sessions page lists the live console sessions
// by handle, never by their secret, and marks the viewer's own; ending
// another signs it out (its next page is the sign-in form) and ends its
// event stream at once; ending one's own signs out. Without a session,
// or from another site, nothing ends; an unknown handle is 404.
func TestConsoleSessions(t *testing.T) {
	srv, base := startConsole(t)
	a, b := browser(t), browser(t)
	for _, c := range []*http.Client{a, b} {
		if resp := signIn(t, c, base, "ops"); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in: %d", resp.StatusCode)
		}
	}
	ca, cb := sessionCookie(t, a, base), sessionCookie(t, b, base)
	ha, hb := sessionHandle(ca), sessionHandle(cb)

	resp, body := do(t, a, http.MethodGet, base+"/console/sessions", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<tr data-session="`+ha+`" data-user="ops" data-current="yes">`) ||
		!strings.Contains(body, `<tr data-session="`+hb+`" data-user="ops">`) {
		t.Fatalf("sessions page: %d\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, ca) || strings.Contains(body, cb) {
		t.Fatal("the sessions page shows a session's secret")
	}

	// b follows the agents page's event stream.
	req, _ := http.NewRequestWithContext(ctx(t), http.MethodGet, base+"/console/events", nil)
	stream, err := b.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %v %v", stream, err)
	}
	defer stream.Body.Close()
	streamEnded := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
		}
		close(streamEnded)
	}()

	t.Run("refusals", func(t *testing.T) {
		end := base + "/console/sessions/" + hb + "/end"
		if resp, _ := do(t, browser(t), http.MethodGet, base+"/console/sessions", nil, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET without a session: %d", resp.StatusCode)
		}
		if resp, _ := do(t, browser(t), http.MethodPost, end, url.Values{}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST without a session: %d", resp.StatusCode)
		}
		if resp, _ := do(t, a, http.MethodPost, end, url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site POST: %d", resp.StatusCode)
		}
		if resp, body := do(t, a, http.MethodPost, base+"/console/sessions/00000000/end", url.Values{}, nil); resp.StatusCode != http.StatusNotFound ||
			!strings.Contains(body, "No such session") {
			t.Errorf("unknown handle: %d", resp.StatusCode)
		}
		if resp, _ := do(t, b, http.MethodGet, base+"/console/", nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("b after the refusals: %d, want its session alive", resp.StatusCode)
		}
	})

	resp, body = do(t, a, http.MethodPost, base+"/console/sessions/"+hb+"/end", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Ended session "+hb+" of ops") || strings.Contains(body, `data-session="`+hb+`"`) {
		t.Fatalf("end b: %d\n%s", resp.StatusCode, body)
	}
	select {
	case <-streamEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("b's event stream did not end with its session")
	}
	if resp, body := do(t, b, http.MethodGet, base+"/console/agents", nil, nil); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, `name="password"`) || !strings.Contains(body, "session ended") {
		t.Fatalf("b after its session ended: %d\n%s", resp.StatusCode, body)
	}
	consoleAudit(t, srv, "of the ended session", func(e store.AuditEvent) bool {
		return e.Action == "session_end" && e.Target == "session "+hb && e.UserID == "ops" && strings.Contains(e.Reason, "ended by ops")
	})

	// Ending one's own signs out.
	resp, _ = do(t, a, http.MethodPost, base+"/console/sessions/"+ha+"/end", url.Values{}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/sign-in" {
		t.Fatalf("end own session: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := do(t, a, http.MethodGet, base+"/console/", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a after ending its own session: %d", resp.StatusCode)
	}
}

package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

const adminPassword = "admin-password-1"

func ctx(t *testing.T) context.Context { return testenv.Context(t, 30*time.Second) }

// startConsole runs a real toolbus (embedded broker) with an admin user
// "ops" and a user "dev" without the role.
func startConsole(t *testing.T) (*server.Server, string) {
	t.Helper()
	return startConsoleWith(t, server.Config{})
}

// startConsoleWith is startConsole with cfg.
func startConsoleWith(t *testing.T, cfg server.Config) (*server.Server, string) {
	t.Helper()
	cfg.ListTimeout = 5 * time.Second
	srv := servertest.Start(t, cfg)
	st := srv.Store()
	for _, u := range []string{"ops", "dev"} {
		if _, err := st.AddUser(ctx(t), u, []byte(adminPassword)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetUserAdmin(ctx(t), "ops", true); err != nil {
		t.Fatal(err)
	}
	return srv, "http://" + srv.HTTPAddr().String()
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, sending what a browser sends on a same-origin form.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx(t), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func signIn(t *testing.T, c *http.Client, base, user string) *http.Response {
	t.Helper()
	resp, _ := do(t, c, http.MethodPost, base+"/console/sign-in", url.Values{"username": {user}, "password": {adminPassword}}, nil)
	return resp
}

// TestConsoleHeadersAndCookie: every answer carries the security headers;
// the session cookie is HttpOnly, SameSite=Strict, Path=/ (and not Secure
// over plain HTTP, where a browser would drop it).
func TestConsoleHeadersAndCookie(t *testing.T) {
	_, base := startConsole(t)
	c := browser(t)
	resp := signIn(t, c, base, "ops")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == "toolbus-console" {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure || len(ck.Value) < 40 {
		t.Fatalf("session cookie %+v", ck)
	}
	for _, p := range []string{"/console/", "/console/agents", "/console/agents/list", "/console/sign-in", "/console/nothing", "/console/assets/console.css"} {
		t.Run(p, func(t *testing.T) {
			resp, _ := do(t, c, http.MethodGet, base+p, nil, nil)
			h := resp.Header
			csp := h.Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
				!strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("CSP %q", csp)
			}
			for k, v := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "Cache-Control": "no-store"} {
				if h.Get(k) != v {
					t.Errorf("%s: %q, want %q", k, h.Get(k), v)
				}
			}
		})
	}
}

// TestConsoleRefusals: no page without a session; a user without the
// admin role is refused (and gets no session); a cross-site form post is
// refused; a session ends when the user loses the role, changes password,
// is removed, or signs out.
func TestConsoleRefusals(t *testing.T) {
	srv, base := startConsole(t)
	pages := []string{"/console/", "/console/agents", "/console/agents/list", "/console/events"}
	refusedEverywhere := func(t *testing.T, c *http.Client) {
		t.Helper()
		for _, p := range pages {
			if resp, body := do(t, c, http.MethodGet, base+p, nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
				t.Errorf("GET %s: %d, want 401 and the sign-in form", p, resp.StatusCode)
			}
		}
	}
	t.Run("no session", func(t *testing.T) { refusedEverywhere(t, browser(t)) })
	t.Run("not an admin", func(t *testing.T) {
		c := browser(t)
		resp, body := do(t, c, http.MethodPost, base+"/console/sign-in", url.Values{"username": {"dev"}, "password": {adminPassword}}, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "does not have the admin role") || len(resp.Cookies()) != 0 {
			t.Fatalf("sign-in of a non-admin: %d, cookies %v\n%s", resp.StatusCode, resp.Cookies(), body)
		}
		refusedEverywhere(t, c)
	})
	t.Run("wrong password", func(t *testing.T) {
		resp, _ := do(t, browser(t), http.MethodPost, base+"/console/sign-in", url.Values{"username": {"ops"}, "password": {"nope"}}, nil)
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Fatalf("wrong password: %d", resp.StatusCode)
		}
	})
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "", "Origin": "https://attacker.example"},
	} {
		t.Run("cross-site post "+hdr["Origin"], func(t *testing.T) {
			resp, body := do(t, browser(t), http.MethodPost, base+"/console/sign-in", url.Values{"username": {"ops"}, "password": {adminPassword}}, hdr)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") || len(resp.Cookies()) != 0 {
				t.Fatalf("cross-site sign-in: %d\n%s", resp.StatusCode, body)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
	}{
		{"role taken back", func(t *testing.T) {
			if err := srv.Store().SetUserAdmin(ctx(t), "ops", false); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Store().SetUserAdmin(context.Background(), "ops", true) })
		}},
		{"password changed", func(t *testing.T) {
			if err := srv.Store().SetUserPassword(ctx(t), "ops", []byte(adminPassword)); err != nil {
				t.Fatal(err)
			}
		}},
		{"signed out", func(t *testing.T) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := browser(t)
			if resp := signIn(t, c, base, "ops"); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign-in: %d", resp.StatusCode)
			}
			if resp, _ := do(t, c, http.MethodGet, base+"/console/agents", nil, nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("agents page: %d", resp.StatusCode)
			}
			tc.change(t)
			if tc.name == "signed out" {
				if resp, _ := do(t, c, http.MethodPost, base+"/console/sign-out", url.Values{}, nil); resp.StatusCode != http.StatusSeeOther {
					t.Fatalf("sign-out: %d", resp.StatusCode)
				}
			}
			refusedEverywhere(t, c)
		})
	}
}

// TestConsoleAgentDataInert: an agent's tool name, description and schema
// reach the page as text: the markup it sends is escaped, no attribute or
// URL is made of it.
func TestConsoleAgentDataInert(t *testing.T) {
	srv, base := startConsole(t)
	startAgent(t, srv, "xss", mcp.Tool{Name: "steal", Title: `<a href="javascript:alert(1)">t</a>`,
		Description: `<img src=x onerror=alert(1)><script>alert(2)</script><a href="javascript:alert(3)">click</a>`,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","description":"</pre><img src=x onerror=alert(4)>"}}}`)})
	c := browser(t)
	signIn(t, c, base, "ops")
	resp, body := do(t, c, http.MethodGet, base+"/console/agents", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "steal") {
		t.Fatalf("agents page: %d\n%s", resp.StatusCode, body)
	}
	// The agent's own page has the description and the schema.
	resp, page := do(t, c, http.MethodGet, base+"/console/agent?name=xss", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "steal") {
		t.Fatalf("agent page: %d\n%s", resp.StatusCode, page)
	}
	for what, b := range map[string]string{"agents page": body, "agent page": page} {
		for _, bad := range []string{"<img", "<script>alert", `href="javascript:`, "onerror=alert(1)>"} {
			if strings.Contains(b, bad) {
				t.Errorf("the %s holds agent markup %q", what, bad)
			}
		}
	}
	if !strings.Contains(page, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the description is not shown escaped")
	}
	// The agent's presence is a plain attribute the page's script and
	// the browser tests select on. (It was data-online="{{.Online}}":
	// html/template takes an attribute named on* after "data-" for an
	// event handler and rendered " true ".)
	if !strings.Contains(body, `data-agent="xss" data-presence="online"`) {
		t.Errorf("the agent's section does not say it is online:\n%s", body)
	}
}

func startAgent(t *testing.T, srv *server.Server, name string, tool mcp.Tool) {
	t.Helper()
	const pw = "agent-password-123"
	if _, err := srv.Store().AddIdentity(ctx(t), name, acl.RoleExpertAgent, []byte(pw)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: pw,
		ClientID: name + "-1", Name: name, Logger: testenv.Logger(t, "agent"),
	})
	if err := a.AddTool(expertagent.Tool{Tool: tool, Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
		return mcp.TextResult("ok"), nil
	}}); err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, "agent", a.Run)
	testenv.Poll(t, 15*time.Second, "agent online", func() bool {
		for _, s := range srv.Requester().Agents() {
			if s.Agent == name && s.Online {
				return true
			}
		}
		return false
	})
}

// behindProxy is a server that trusts the loopback address as a reverse
// proxy (--trusted-proxies 127.0.0.1), allows limit sign-in attempts a
// minute (--oauth-rate-limit) and records every refusal on its own.
func behindProxy(t *testing.T, limit int) (*server.Server, string) {
	t.Helper()
	cfg := server.Config{}
	cfg.OAuth.RateLimit = limit
	cfg.OAuth.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cfg.Audit.AggregateWindow = -1
	cfg.Audit.FlushInterval = 20 * time.Millisecond
	return startConsoleWith(t, cfg)
}

// from is the X-Forwarded-For of a client behind the trusted proxy.
func from(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }

// consoleAudit waits for a console record (kind console) that match
// selects.
func consoleAudit(t *testing.T, srv *server.Server, what string, match func(store.AuditEvent) bool) store.AuditEvent {
	t.Helper()
	return waitAudit(t, srv, store.AuditConsole, what, match)
}

// adminAudit waits for an admin-model record (kind admin) that match
// selects: a change made through the console is one.
func adminAudit(t *testing.T, srv *server.Server, what string, match func(store.AuditEvent) bool) store.AuditEvent {
	t.Helper()
	return waitAudit(t, srv, store.AuditAdmin, what, match)
}

// waitAudit waits (at most 10 s: the writer flushes every 500 ms) for an
// audit record of kind that match selects.
func waitAudit(t *testing.T, srv *server.Server, kind, what string, match func(store.AuditEvent) bool) store.AuditEvent {
	t.Helper()
	var seen []store.AuditEvent
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		evs, _, err := srv.Store().QueryAudit(ctx(t), store.AuditQuery{Kind: kind, Limit: store.MaxAuditLimit})
		if err != nil {
			t.Fatal(err)
		}
		seen = evs
		for _, e := range evs {
			if match(e) {
				return e
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s audit record %s among %+v", kind, what, seen)
	return store.AuditEvent{}
}

// TestConsoleSignInRateLimit: sign-in attempts are limited per client
// address (behind a trusted proxy, the address it forwards for) and per
// user name, at --oauth-rate-limit a minute: past it the sign-in page
// answers 429 with Retry-After, audited; another user from another
// address still signs in.
func TestConsoleSignInRateLimit(t *testing.T) {
	const limit = 3
	srv, base := behindProxy(t, limit)
	if _, err := srv.Store().AddUser(ctx(t), "ops2", []byte(adminPassword)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Store().SetUserAdmin(ctx(t), "ops2", true); err != nil {
		t.Fatal(err)
	}
	wrong := url.Values{"username": {"ops"}, "password": {"wrong-password"}}
	right := func(user string) url.Values { return url.Values{"username": {user}, "password": {adminPassword}} }
	tooMany := func(t *testing.T, what string, resp *http.Response, body string) {
		t.Helper()
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || err != nil || secs < 1 || secs > 60 {
			t.Fatalf("%s: %d, Retry-After %q; want 429 and a wait of 1-60 s\n%s", what, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if !strings.Contains(body, "Too many sign-in attempts; wait "+strconv.Itoa(secs)+" s") || !strings.Contains(body, `name="password"`) || len(resp.Cookies()) != 0 {
			t.Fatalf("%s: not the sign-in page with the wait, or a cookie %v\n%s", what, resp.Cookies(), body)
		}
	}
	for i := range limit {
		if resp, body := do(t, browser(t), http.MethodPost, base+"/console/sign-in", wrong, from("198.51.100.1")); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d\n%s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := do(t, browser(t), http.MethodPost, base+"/console/sign-in", wrong, from("198.51.100.1"))
	tooMany(t, "wrong password past the limit", resp, body)
	// The address has spent its attempts: the right password too waits.
	resp, body = do(t, browser(t), http.MethodPost, base+"/console/sign-in", right("ops2"), from("198.51.100.1"))
	tooMany(t, "right password from the spent address", resp, body)
	// The user "ops" has spent its attempts: from a fresh address too.
	resp, body = do(t, browser(t), http.MethodPost, base+"/console/sign-in", right("ops"), from("198.51.100.3"))
	tooMany(t, "the spent user from another address", resp, body)
	// Another user from another address signs in.
	c := browser(t)
	resp, body = do(t, c, http.MethodPost, base+"/console/sign-in", right("ops2"), from("198.51.100.2"))
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) == 0 {
		t.Fatalf("another user from another address: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := do(t, c, http.MethodGet, base+"/console/agents", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("agents page after sign-in: %d", resp.StatusCode)
	}
	consoleAudit(t, srv, "of the rate-limited sign-in", func(e store.AuditEvent) bool {
		return e.Action == "sign_in" && e.Outcome == "refused" && e.Reason == "rate limited" && e.Status == http.StatusTooManyRequests && e.UserID == "ops"
	})
}

// TestConsoleAuditSourceBehindProxy: the console's audit records name
// the client behind a trusted proxy (its X-Forwarded-For), by its source
// key (no port), not the proxy's address.
func TestConsoleAuditSourceBehindProxy(t *testing.T) {
	srv, base := behindProxy(t, 0)
	c := browser(t)
	if resp, _ := do(t, c, http.MethodPost, base+"/console/sign-in", url.Values{"username": {"ops"}, "password": {adminPassword}}, from("198.51.100.7")); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	if resp, _ := do(t, c, http.MethodPost, base+"/console/sign-in", url.Values{"username": {"dev"}, "password": {adminPassword}}, from("2001:db8:1:2::9")); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in of a non-admin: %d", resp.StatusCode)
	}
	for _, tc := range []struct{ user, outcome, source string }{
		{"ops", "ok", "198.51.100.7"},
		{"dev", "refused", "2001:db8:1:2::/64"},
	} {
		e := consoleAudit(t, srv, "of "+tc.user+"'s sign-in", func(e store.AuditEvent) bool {
			return e.Action == "sign_in" && e.UserID == tc.user && e.Outcome == tc.outcome
		})
		if e.Source != tc.source {
			t.Errorf("%s's sign-in: audit source %q, want %q (the client behind the proxy)", tc.user, e.Source, tc.source)
		}
	}
}

// A user name typed into the sign-in form is cut before it reaches the
// log and the audit record: the form may carry kilobytes.
func TestConsoleAuditCutsUserName(t *testing.T) {
	srv, base := behindProxy(t, 0)
	long := strings.Repeat("u", 8<<10)
	if resp, _ := do(t, browser(t), http.MethodPost, base+"/console/sign-in", url.Values{"username": {long}, "password": {"wrong password"}}, from("198.51.100.8")); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	e := consoleAudit(t, srv, "of the long name's sign-in", func(e store.AuditEvent) bool {
		return e.Action == "sign_in" && e.Outcome == "refused" && strings.HasPrefix(e.UserID, "uuu")
	})
	if len(e.UserID) > 128 {
		t.Errorf("audit user of %d bytes, want at most %d", len(e.UserID), 128)
	}
}

// TestConsoleRefusalReasonCut: a cross-site post names its path in the
// refusal's reason; a long path is cut before the log and the audit.
func TestConsoleRefusalReasonCut(t *testing.T) {
	srv, base := behindProxy(t, 0)
	long := "/console/" + strings.Repeat("p", 16<<10)
	if resp, _ := do(t, browser(t), http.MethodPost, base+long, url.Values{"a": {"b"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site post: %d", resp.StatusCode)
	}
	e := consoleAudit(t, srv, "of the cross-site post", func(e store.AuditEvent) bool { return e.Action == "cross_origin" })
	if len(e.Reason) > 300 {
		t.Errorf("audit reason of %d bytes", len(e.Reason))
	}
}

// TestConsoleCookieSecureBehindProxy: with an https:// public URL (TLS
// ended by a proxy in front) the session cookie is Secure and __Host-,
// though the gateway itself serves plain HTTP.
func TestConsoleCookieSecureBehindProxy(t *testing.T) {
	_, base := startConsoleWith(t, server.Config{PublicURL: "https://gw.example"})
	resp := signIn(t, browser(t), base, "ops")
	var found bool
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-toolbus-console" {
			found = ck.Secure && ck.HttpOnly && ck.Path == "/"
		}
	}
	if resp.StatusCode != http.StatusSeeOther || !found {
		t.Fatalf("sign-in: %d, cookies %v", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
}

package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
)

const adminPassword = "admin-password-1"

func ctx(t *testing.T) context.Context { return testenv.Context(t, 30*time.Second) }

// startConsole runs a real toolbus (embedded broker) with an admin user
// "ops" and a user "dev" without the role.
func startConsole(t *testing.T) (*server.Server, string) {
	t.Helper()
	srv := servertest.Start(t, server.Config{ListTimeout: 5 * time.Second})
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
	for _, bad := range []string{"<img", "<script>alert", `href="javascript:`, "onerror=alert(1)>"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page holds agent markup %q", bad)
		}
	}
	if !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
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

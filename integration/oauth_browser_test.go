package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// tsLine is a line the TypeScript client script prints.
type tsLine struct {
	Kind      string   `json:"kind"`
	URL       string   `json:"url"`
	Names     []string `json:"names"`
	Text      string   `json:"text"`
	IsError   bool     `json:"isError"`
	Count     int      `json:"count"`
	ExpiresIn int      `json:"expires_in"`
	Refresh   bool     `json:"refresh"`
	Tokens    int      `json:"tokens"`
	Distinct  int      `json:"distinct"`
	ClientID  string   `json:"client_id"`
}

// tsClient is testdata/oauth_ts_client.mjs running: the official
// TypeScript SDK's OAuth client against a toolbus endpoint.
type tsClient struct {
	lines chan string
	p     *proc
}

func startTSClient(t *testing.T, endpoint string, args ...string) *tsClient {
	t.Helper()
	node, modules := testenv.NPMPackage(t, "@modelcontextprotocol/sdk")
	script, err := filepath.Abs("testdata/oauth_ts_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	c := &tsClient{lines: make(chan string, 64)}
	c.p = startProc(t, c.lines, node, append([]string{script, modules, endpoint}, args...)...)
	return c
}

// next waits for the client's next line of kind, skipping others; it fails
// the test when the script exits first or d passes.
func (c *tsClient) next(t *testing.T, kind string, d time.Duration) tsLine {
	t.Helper()
	var v tsLine
	c.p.waitLine(t, c.lines, d, "the TypeScript client's "+strconv.Quote(kind), func(l string) bool {
		v = tsLine{}
		return json.Unmarshal([]byte(l), &v) == nil && v.Kind == kind // other lines are not its JSON
	})
	return v
}

// pageText is the text of the page the browser shows.
func pageText(t *testing.T, bctx context.Context) string {
	t.Helper()
	text, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// signInInBrowser plays alice on the authorization page in Chromium: one
// wrong password (the page says so), then the right one, which sends the
// browser back to the client.
func signInInBrowser(t *testing.T, bctx context.Context, authURL string) {
	t.Helper()
	username, password, allow := chromedp.CSS(`input[name=username]`), chromedp.CSS(`input[name=password]`), chromedp.CSS(`button[value=allow]`)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(authURL),
		chromedp.WaitVisible(password),
		chromedp.SendKeys(username, "alice"),
		chromedp.SendKeys(password, "not-her-password"),
		chromedp.Click(allow),
		chromedp.WaitVisible(chromedp.CSS(`p.error`)),
	); err != nil {
		t.Fatalf("sign in with a wrong password: %v", err)
	}
	if text := pageText(t, bctx); !strings.Contains(text, "Wrong user name or password") {
		t.Fatalf("after a wrong password the page says:\n%s", text)
	}
	if err := chromedp.Do(bctx, chromedp.SendKeys(password, "alice-password"), chromedp.Click(allow)); err != nil {
		t.Fatalf("sign in: %v", err)
	}
}

// TestOAuthTypeScriptClientInBrowser: the official TypeScript SDK client,
// given only the endpoint's URL, discovers the metadata, registers, and
// after alice signs in and consents in headless Chromium (one wrong
// password first), lists and calls tools with the token it received; once
// that token expires, it refreshes it and calls again.
func TestOAuthTypeScriptClientInBrowser(t *testing.T) {
	e := startGateway(t, server.Config{OAuth: server.OAuthConfig{AccessTTL: 2 * time.Second}})
	ctx := testCtx(t, 90*time.Second)
	if _, err := e.srv.Store().AddUser(ctx, "alice", []byte("alice-password")); err != nil {
		t.Fatal(err)
	}
	bctx := testenv.Browser(t, 90*time.Second)
	c := startTSClient(t, e.mcpURL())
	if l := c.next(t, "client", 20*time.Second); !strings.HasPrefix(l.ClientID, "tbc_") {
		t.Fatalf("registered as %q", l.ClientID)
	}
	signInInBrowser(t, bctx, c.next(t, "authorize", 20*time.Second).URL)
	if l := c.next(t, "tokens", 20*time.Second); l.Count != 1 || !l.Refresh || l.ExpiresIn != 2 {
		t.Fatalf("first tokens: %+v", l)
	}
	if text := pageText(t, bctx); !strings.Contains(text, "Signed in") {
		t.Fatalf("the browser did not come back to the client:\n%s", text)
	}
	if l := c.next(t, "tools", 20*time.Second); !slices.Contains(l.Names, "echo") || !slices.Contains(l.Names, "platform_whoami") {
		t.Fatalf("tools: %v", l.Names)
	}
	if l := c.next(t, "call", 20*time.Second); l.IsError || l.Text != "from the TypeScript SDK" {
		t.Fatalf("call: %+v", l)
	}
	if l := c.next(t, "tokens", 20*time.Second); l.Count != 2 {
		t.Fatalf("refreshed tokens: %+v", l)
	}
	if l := c.next(t, "call", 20*time.Second); l.IsError || l.Text != "after the refresh" {
		t.Fatalf("call after the refresh: %+v", l)
	}
	if l := c.next(t, "done", 20*time.Second); l.Tokens != 2 || l.Distinct != 2 {
		t.Fatalf("done: %+v", l)
	}
	events := auditAll(t, e.srv.Store(), store.AuditQuery{Kind: store.AuditOAuth})
	for _, want := range []struct{ action, outcome string }{
		{"register", "ok"}, {"sign_in", "refused"}, {"sign_in", "ok"}, {"consent", "ok"}, {"token", "ok"}, {"refresh", "ok"},
	} {
		if !slices.ContainsFunc(events, func(ev store.AuditEvent) bool { return ev.Action == want.action && ev.Outcome == want.outcome }) {
			waitAudit(t, e.srv.Store(), "oauth "+want.action+" "+want.outcome, store.AuditQuery{Kind: store.AuditOAuth, Outcome: want.outcome}, 1)
		}
	}
}

// TestOAuthTypeScriptClientMetadataDocument: the same client with a Client
// ID Metadata Document, served over https on loopback, instead of
// registering.
func TestOAuthTypeScriptClientMetadataDocument(t *testing.T) {
	doc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// Loopback redirect URIs may take any port (RFC 8252), as the
		// client's is chosen when it starts.
		fmt.Fprintf(w, `{"client_id":%q,"client_name":"TS SDK metadata client","redirect_uris":["http://127.0.0.1/callback"],"grant_types":["authorization_code","refresh_token"],"token_endpoint_auth_method":"none"}`,
			"https://"+r.Host+r.URL.Path)
	}))
	doc.StartTLS()
	t.Cleanup(doc.Close)
	e := startGateway(t, server.Config{OAuth: server.OAuthConfig{AccessTTL: 2 * time.Second, AllowPrivateClientMetadata: true,
		ClientMetadataTransport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: doc.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}}})
	ctx := testCtx(t, 90*time.Second)
	if _, err := e.srv.Store().AddUser(ctx, "alice", []byte("alice-password")); err != nil {
		t.Fatal(err)
	}
	bctx := testenv.Browser(t, 90*time.Second)
	clientID := doc.URL + "/ts-client.json"
	c := startTSClient(t, e.mcpURL(), clientID)
	signInInBrowser(t, bctx, c.next(t, "authorize", 20*time.Second).URL)
	c.next(t, "tokens", 20*time.Second)
	if l := c.next(t, "call", 20*time.Second); l.IsError || l.Text != "from the TypeScript SDK" {
		t.Fatalf("call: %+v", l)
	}
	if l := c.next(t, "done", 20*time.Second); l.Distinct != 2 {
		t.Fatalf("done: %+v (want a refreshed token)", l)
	}
	toks, err := e.srv.Store().ListTokens(ctx, "alice")
	// One live token: the refresh replaced the first, row and all.
	if err != nil || len(toks) != 1 || toks[0].ClientID != clientID || toks[0].Name != "oauth: TS SDK metadata client" || !toks[0].RevokedAt.IsZero() {
		t.Fatalf("alice's tokens: %+v %v", toks, err)
	}
}

// TestOAuthPageRefusals: in Chromium, a consent form posted from another
// site and an authorization request whose redirect URI the client did not
// register are refused, shown to the user, and audited.
func TestOAuthPageRefusals(t *testing.T) {
	e := startGateway(t, server.Config{})
	ctx := testCtx(t, 60*time.Second)
	if _, err := e.srv.Store().AddUser(ctx, "alice", []byte("alice-password")); err != nil {
		t.Fatal(err)
	}
	const redirect = "http://127.0.0.1:9/callback"
	reg, err := oauthex.RegisterClient(ctx, e.base+"/oauth/register", &oauthex.ClientRegistrationMetadata{
		ClientName: "page test", RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conf := &oauth2.Config{ClientID: reg.ClientID, RedirectURL: redirect, Scopes: []string{store.ScopeToolsList},
		Endpoint: oauth2.Endpoint{AuthURL: e.base + "/oauth/authorize"}}
	authURL := conf.AuthCodeURL("st", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	bctx := testenv.Browser(t, 60*time.Second)

	t.Run("cross-site form post", func(t *testing.T) {
		// A page on another site (localhost is not 127.0.0.1's site) that
		// holds the whole consent, password included, for a click.
		u, _ := url.Parse(authURL)
		var fields strings.Builder
		for k, vs := range u.Query() {
			fmt.Fprintf(&fields, `<input type="hidden" name="%s" value="%s">`, html.EscapeString(k), html.EscapeString(vs[0]))
		}
		for k, v := range map[string]string{"username": "alice", "password": "alice-password", "action": "allow", "grant_scope": store.ScopeToolsList} {
			fmt.Fprintf(&fields, `<input type="hidden" name="%s" value="%s">`, k, v)
		}
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!doctype html><form method="post" action="%s">%s<button id="go">Win a prize</button></form>`,
				html.EscapeString(e.base+"/oauth/authorize"), fields.String())
		}))
		t.Cleanup(evil.Close)
		evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
		if err := chromedp.Do(bctx, chromedp.Navigate(evilURL), chromedp.Click(chromedp.CSS(`#go`)),
			chromedp.WaitVisible(chromedp.CSS(`p.error`))); err != nil {
			t.Fatal(err)
		}
		if text := pageText(t, bctx); !strings.Contains(text, "sent from another site") {
			t.Fatalf("the browser shows:\n%s", text)
		}
		waitAudit(t, e.srv.Store(), "the cross-site post", store.AuditQuery{Kind: store.AuditOAuth, Outcome: "refused"}, 1)
	})
	t.Run("changed redirect URI", func(t *testing.T) {
		changed := strings.Replace(authURL, url.QueryEscape(redirect), url.QueryEscape("https://attacker.example/cb"), 1)
		if changed == authURL {
			t.Fatal("the redirect URI is not in the URL")
		}
		if err := chromedp.Do(bctx, chromedp.Navigate(changed), chromedp.WaitVisible(chromedp.CSS(`p.error`))); err != nil {
			t.Fatal(err)
		}
		loc, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		if text := pageText(t, bctx); !strings.Contains(text, "is not one the client registered") || !strings.HasPrefix(loc, e.base) {
			t.Fatalf("at %s the browser shows:\n%s", loc, text)
		}
		waitAudit(t, e.srv.Store(), "both refusals", store.AuditQuery{Kind: store.AuditOAuth, Outcome: "refused"}, 2)
	})
}

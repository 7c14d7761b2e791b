package integration

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
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

// TestConsoleBrowserOAuthClients: a client registers through the
// gateway's /oauth/register (RFC 7591) and gets a token through a consent
// of bob's; the OAuth clients page lists it with its live grant and token;
// Delete on the page removes it, and its token is refused at once.
func TestConsoleBrowserOAuthClients(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleUser(t, srv, "bob", "bob-password-123", false)
	ctx := testCtx(t, 60*time.Second)

	const redirect = "http://127.0.0.1:9/callback"
	reg, err := oauthex.RegisterClient(ctx, base+"/oauth/register", &oauthex.ClientRegistrationMetadata{
		ClientName: "Browser test client", RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conf := &oauth2.Config{ClientID: reg.ClientID, RedirectURL: redirect, Scopes: []string{store.ScopeToolsList},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/oauth/authorize", TokenURL: base + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	res, err := signIn(t, conf.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier)), "bob", "bob-password-123")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := conf.Exchange(ctx, res.Code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	mcpURL := base + "/api/v1/mcp"
	if got := status(t, mcpURL, tok.AccessToken); got != http.StatusOK {
		t.Fatalf("the client's token before deletion: %d, want 200", got)
	}

	bctx := testenv.Browser(t, 60*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	row := `tr[data-client="` + reg.ClientID + `"]`
	within(t, bctx, domWait, "OAuth clients page",
		chromedp.WaitVisible(css(`#agents-online`)),
		chromedp.Click(css(`nav a[href="/console/oauth-clients"]`)),
		chromedp.WaitVisible(css(row+`[data-grants="1"][data-tokens="1"]`)),
	)
	if name := get(t, bctx, "client name", chromedp.Text(css(row+` .client-name`))); name != "Browser test client" {
		t.Fatalf("the row names the client %q", name)
	}
	consoleScreenshot(t, bctx, "oauth-clients.png")

	within(t, bctx, domWait, "delete on the page",
		chromedp.Click(css(row+` button.danger`)),
		chromedp.WaitVisible(css(`main p.done`)),
		chromedp.WaitNotPresent(css(row)),
	)
	if done := get(t, bctx, "done", chromedp.Text(css(`main p.done`))); !strings.Contains(done, "Deleted OAuth client "+reg.ClientID) {
		t.Fatalf("the page says %q", done)
	}
	if got := status(t, mcpURL, tok.AccessToken); got != http.StatusUnauthorized {
		t.Fatalf("the deleted client's token: %d, want 401", got)
	}
	cls, err := srv.Store().ListOAuthClients(ctx)
	if err != nil || slices.ContainsFunc(cls, func(c store.OAuthClientSummary) bool { return c.ID == reg.ClientID }) {
		t.Fatalf("the store still lists the client: %+v, %v", cls, err)
	}
	// Its refresh token is refused too: the grant is gone.
	if _, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
		t.Fatal("the deleted client's refresh token still refreshes")
	}
}

// consoleHTTPSession signs user in to the console with an HTTP client of
// its own (a cookie jar, a same-origin form) and returns the client.
func consoleHTTPSession(t *testing.T, base, user, password string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, base+"/console/sign-in", strings.NewReader(url.Values{"username": {user}, "password": {password}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console sign-in of %s over HTTP: %d", user, resp.StatusCode)
	}
	return c
}

// consoleHTTPGet is the status and body of a console page for c.
func consoleHTTPGet(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleBrowserSessions: alice is signed in twice, in Chromium and
// with an HTTP client; the sessions page lists both and marks the
// browser's own; End on the other row signs the HTTP client out (its next
// page is the sign-in form); End on its own row signs the browser out.
func TestConsoleBrowserSessions(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)

	bctx := testenv.Browser(t, 60*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "overview", chromedp.WaitVisible(css(`#agents-online`)))
	other := consoleHTTPSession(t, base, "alice", "alice-console-password")
	if st, _ := consoleHTTPGet(t, other, base+"/console/"); st != http.StatusOK {
		t.Fatalf("the HTTP session's overview: %d", st)
	}

	within(t, bctx, domWait, "sessions page",
		chromedp.Navigate(base+"/console/sessions"),
		chromedp.WaitVisible(css(`tr[data-session][data-current="yes"]`)),
		chromedp.WaitVisible(css(`tr[data-session]:not([data-current])`)),
	)
	if n := get(t, bctx, "rows", chromedp.Evaluate[int](`document.querySelectorAll('tr[data-session]').length`)); n != 2 {
		t.Fatalf("%d sessions listed, want 2", n)
	}
	consoleScreenshot(t, bctx, "sessions.png")

	within(t, bctx, domWait, "end the other session",
		chromedp.Click(css(`tr[data-session]:not([data-current]) button.danger`)),
		chromedp.WaitVisible(css(`main p.done`)),
		chromedp.WaitNotPresent(css(`tr[data-session]:not([data-current])`)),
	)
	st, body := consoleHTTPGet(t, other, base+"/console/agents")
	if st != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) || !strings.Contains(body, "session ended") {
		t.Fatalf("the ended session's next page: %d, want the sign-in form\n%s", st, body)
	}

	within(t, bctx, domWait, "end the browser's own session",
		chromedp.Click(css(`tr[data-current="yes"] button.danger`)),
		chromedp.WaitVisible(css(`form.signin #password`)),
	)
	within(t, bctx, domWait, "a page after signing out",
		chromedp.Navigate(base+"/console/sessions"),
		chromedp.WaitVisible(css(`form.signin #password`)),
	)
	if evalBool(t, bctx, `!!document.querySelector('tr[data-session], nav')`) {
		t.Fatal("a console page is shown after the browser's session ended")
	}
}

package integration

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
)

// accessStatuses is a bearer transport that records the status of every
// POST it sends (the MCP calls; the SDK's event stream is a GET).
type accessStatuses struct {
	token string
	mu    sync.Mutex
	posts []int
}

func (a *accessStatuses) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		a.mu.Lock()
		a.posts = append(a.posts, resp.StatusCode)
		a.mu.Unlock()
	}
	return resp, err
}

func (a *accessStatuses) last() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.posts) == 0 {
		return 0
	}
	return a.posts[len(a.posts)-1]
}

// TestConsoleBrowserTokens: an admin creates a token for a user on the
// Tokens page and reads its secret off the page; a go-sdk MCP client
// lists tools with it and sees the agent's tool; the admin revokes it on
// the page and the client's next call is answered 401. Then the Users
// page: add a user (the generated password shown once), limit their
// tokens to an agent, and the grant shows. Screenshots tokens.png and
// users.png.
func TestConsoleBrowserTokens(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleUser(t, srv, "dave", "dave-sign-in-password", false)
	consoleAgentStart(t, srv, "echoer", consoleTool("echo", "Says back what it is given."))

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "create a token",
		chromedp.WaitVisible(css(`#agents-online`)),
		chromedp.Click(css(`nav a[href="/console/tokens"]`)),
		chromedp.WaitVisible(css(`#token-create`)),
		chromedp.SendKeys(css(`#token-user`), "dave"),
		chromedp.SendKeys(css(`#token-name`), "laptop"),
		chromedp.SendKeys(css(`#token-ttl`), "24h"),
		chromedp.Click(css(`#token-create button[type=submit]`)),
		chromedp.WaitVisible(css(`#new-token-secret`)),
	)
	secret := strings.TrimSpace(get(t, bctx, "secret", chromedp.Text(css(`#new-token-secret`))))
	id := get(t, bctx, "token ID", chromedp.AttributeValue(css(`#new-token-secret`), "data-token")).Value
	if !strings.HasPrefix(secret, id) || !evalBool(t, bctx, `document.querySelector('#new-token').textContent.includes('not shown again')`) {
		t.Fatalf("secret %q of token %q, or no word that it is shown once", secret, id)
	}
	// The copy button shows where the page's script can use the clipboard.
	if !evalBool(t, bctx, `!document.getElementById('copy-token').hidden`) {
		t.Error("the copy button stays hidden")
	}
	consoleScreenshot(t, bctx, "tokens.png")

	tr := &accessStatuses{token: secret}
	client := sdkmcp.NewClient(&sdkmcp.Implementation{Name: "toolbus-console-it", Version: "1"}, nil)
	cs, err := client.Connect(testCtx(t, 15*time.Second), &sdkmcp.StreamableClientTransport{Endpoint: base + "/api/v1/mcp", HTTPClient: &http.Client{Transport: tr}}, nil)
	if err != nil {
		t.Fatalf("connect with the console's token: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
	if err != nil {
		t.Fatalf("list tools with the console's token: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !strings.Contains(" "+strings.Join(names, " ")+" ", " echo ") {
		t.Fatalf("tools listed with the console's token: %v, want echo", names)
	}

	within(t, bctx, domWait, "revoke the token",
		chromedp.Click(css(`tr[data-token="`+id+`"] button.danger`)),
		chromedp.WaitVisible(css(`tr[data-token="`+id+`"][data-state="revoked"]`)),
	)
	if evalBool(t, bctx, `document.body.textContent.includes(`+jsString(secret)+`)`) {
		t.Error("the page shows the secret again after the revocation")
	}
	if _, err := cs.ListTools(testCtx(t, 10*time.Second), nil); err == nil {
		t.Fatal("the revoked token still lists tools")
	}
	if got := tr.last(); got != http.StatusUnauthorized {
		t.Fatalf("the call after the revocation: HTTP %d, want 401", got)
	}

	// Users: add one, limit their tokens to the agent, the grant shows.
	within(t, bctx, domWait, "add a user",
		chromedp.Click(css(`nav a[href="/console/users"]`)),
		chromedp.WaitVisible(css(`#user-add`)),
		chromedp.SendKeys(css(`#add-user`), "erin"),
		chromedp.Click(css(`#user-add button[type=submit]`)),
		chromedp.WaitVisible(css(`#new-user-password[data-user="erin"]`)),
		chromedp.WaitVisible(css(`tr[data-user="erin"][data-admin="no"]`)),
	)
	pw := strings.TrimSpace(get(t, bctx, "password", chromedp.Text(css(`#new-user-password`))))
	if err := srv.Store().VerifyUser(testCtx(t, 5*time.Second), "erin", []byte(pw)); err != nil {
		t.Fatalf("the password shown does not sign erin in: %v", err)
	}
	within(t, bctx, domWait, "grant an agent",
		chromedp.SendKeys(css(`#agents-erin`), "echoer"),
		chromedp.Click(css(`tr[data-user="erin"] form[action$="/agents"] button`)),
		chromedp.WaitVisible(css(`tr[data-user="erin"] td.grants[data-agents="echoer"]`)),
	)
	if evalBool(t, bctx, `!!document.getElementById('new-user-password')`) {
		t.Error("the password is shown again after the next action")
	}
	consoleScreenshot(t, bctx, "users.png")
}

// jsString quotes s for a JavaScript expression.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

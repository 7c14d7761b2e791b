package integration

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
)

// TestConsoleBrowserAgentPage: an MCP server joins through the bridge with
// tools, a resource and a prompt; the agents page links to the agent's own
// page, which shows each tool's description and schema and the resource
// and the prompt (with its argument), as the gateway lists them.
func TestConsoleBrowserAgentPage(t *testing.T) {
	upstream := newUpstream(&upstreamHooks{blockStarted: make(chan struct{}, 1), blockCancelled: make(chan struct{}, 1)})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return upstream }, nil))
	t.Cleanup(hs.Close)
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	startBridge(t, srv, "files", "files-1", bridge.Options{URL: hs.URL})

	bctx := testenv.Browser(t, 60*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)
	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "the agent's page from the agents page",
		chromedp.WaitVisible(css(`#agents-online`)),
		chromedp.Navigate(base+"/console/agents"),
		chromedp.WaitVisible(css(`section[data-agent="files"] a[href="/console/agent?name=files"]`)),
		// Followed by address, not clicked: the page's live list may
		// replace the link's node under a click.
		chromedp.Navigate(base+"/console/agent?name=files"),
		chromedp.WaitVisible(css(`#agent-resources`)),
	)
	text := get(t, bctx, "the agent's page", chromedp.Text(css(`main`)))
	for _, want := range []string{"Adds two integers.", "mem://note", "text/plain", "greet", "name (required)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the agent's page lacks %q:\n%s", want, text)
		}
	}
	consoleScreenshot(t, bctx, "agent.png")
}

package integration

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestConsoleBrowserAudit: a go-sdk MCP client with a token calls the
// agent "relay"'s tool "echo" through a real gateway; the audit page,
// filtered by that tool through its form, shows the call (user, agent,
// outcome). With Live on, a second call's row appears at the top without
// a reload, and a call of another tool does not. Screenshot audit.png.
func TestConsoleBrowserAudit(t *testing.T) {
	cfg := server.Config{}
	cfg.Audit.FlushInterval = 50 * time.Millisecond
	srv := startServer(t, cfg)
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleAgentStart(t, srv, "relay", consoleTool("echo", "Says the text back."), consoleTool("upper", "Says the text in capitals."))

	e := &gwEnv{srv: srv, base: base}
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "ann"}), "2025-06-18", nil)
	call := func(tool, text string) {
		t.Helper()
		res, err := cs.CallTool(testCtx(t, 10*time.Second), &gosdk.CallToolParams{Name: tool, Arguments: map[string]any{"query": text}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
	}
	call("echo", "first")
	call("upper", "other")

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)
	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	// The form: tool echo. The writer flushes within 50 ms: reload the
	// filtered page until the call is there (bounded).
	within(t, bctx, domWait, "audit page filtered by tool",
		chromedp.WaitVisible(css(`nav a[href="/console/audit"]`)),
		chromedp.Click(css(`nav a[href="/console/audit"]`)),
		chromedp.WaitVisible(css(`#audit-tool`)),
		chromedp.SendKeys(css(`#audit-tool`), "echo"),
		chromedp.Click(css(`#audit-filters button[type=submit]`)),
		chromedp.WaitVisible(css(`#audit-clear`)), // on a filtered page only
	)
	deadline := time.Now().Add(domWait)
	for !evalBool(t, bctx, `document.querySelector('#audit-rows tr[data-kind="tool_call"]') !== null`) {
		if time.Now().After(deadline) {
			t.Fatalf("the echo call never showed\n%s", pageState(bctx))
		}
		within(t, bctx, domWait, "reload", chromedp.Reload(), chromedp.WaitVisible(css(`#audit-clear`)))
	}
	loc := get(t, bctx, "location", chromedp.Evaluate[string](`location.search`))
	if q, _ := url.ParseQuery(strings.TrimPrefix(loc, "?")); q.Get("tool") != "echo" {
		t.Errorf("the form sent %q, want tool=echo", loc)
	}
	rows := get(t, bctx, "rows", chromedp.Evaluate[[][]string](
		`Array.from(document.querySelectorAll('#audit-rows tr[data-id]')).map(r => Array.from(r.cells).map(c => c.textContent))`))
	if len(rows) != 1 {
		t.Fatalf("%d rows for tool echo, want 1: %q", len(rows), rows)
	}
	// time, kind, outcome, user, agent, tool, ...
	if r := rows[0]; r[1] != "tool_call" || r[2] != "ok" || r[3] != "ann" || r[4] != "relay" || r[5] != "echo" {
		t.Errorf("the echo call's row: %q", r)
	}

	// Live on: the next echo call appears without a reload; upper does not.
	within(t, bctx, domWait, "live tail on",
		chromedp.WaitVisible(css(`#audit-live`)),
		chromedp.Click(css(`#audit-live`)),
		chromedp.WaitVisible(css(`#audit-live-state[data-state="live"]`)),
	)
	evalBool(t, bctx, `(window.auditMarker = true)`) // gone if the page reloads
	call("upper", "again")
	call("echo", "second")
	within(t, bctx, domWait, "the second call's row",
		chromedp.WaitVisible(css(`#audit-rows tr.audit-new[data-kind="tool_call"]`)),
	)
	if !evalBool(t, bctx, `window.auditMarker === true`) {
		t.Error("the page reloaded")
	}
	rows = get(t, bctx, "rows after the live call", chromedp.Evaluate[[][]string](
		`Array.from(document.querySelectorAll('#audit-rows tr[data-id]')).map(r => Array.from(r.cells).map(c => c.textContent))`))
	if len(rows) != 2 || rows[0][5] != "echo" || rows[0][4] != "relay" || rows[0][3] != "ann" {
		t.Errorf("rows after the live call: %q; want the new echo call on top of the first", rows)
	}
	if rows[0][11] == "" || rows[0][11] == rows[1][11] {
		t.Errorf("the live row's request ID %q (the first's %q)", rows[0][11], rows[1][11])
	}
	consoleScreenshot(t, bctx, "audit.png")
}

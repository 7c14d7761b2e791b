package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
)

// domWait bounds every wait on the console's DOM: the issue asks for an
// agent's arrival or departure to show within 2 s; 10 s leaves room for a
// loaded CI machine without hiding a page that never updates.
const domWait = 10 * time.Second

// screenshotsDocsEnv, when set, also writes the screenshots into
// docs/console/ (tracked files): `make test` leaves them alone.
const screenshotsDocsEnv = "CONSOLE_SCREENSHOTS_DOCS"

// consoleAgentStart runs an expert agent named name serving tools and waits
// until the gateway sees it online. The returned func stops it (at most
// once; the test's cleanup stops it otherwise).
func consoleAgentStart(t *testing.T, srv *server.Server, name string, tools ...mcp.Tool) (stop func()) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := srv.Store().AddIdentity(ctx, name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: agentPassword,
		ClientID: name + "-1", Name: name, Version: "1.0.0", Logger: testenv.LoggerAt(t, "agent", logrus.WarnLevel),
	})
	for _, tool := range tools {
		tool := tool
		err := a.AddTool(expertagent.Tool{Tool: tool,
			Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return mcp.TextResult(name + ":" + tool.Name), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("agent %s did not stop", name)
			}
		})
	}
	t.Cleanup(stop)
	poll(t, 15*time.Second, name+" online", func() bool { return agentOnline(srv, name+"-1") })
	return stop
}

// consoleTool is a tool with a description and a small input schema.
func consoleTool(name, description string) mcp.Tool {
	return mcp.Tool{Name: name, Description: description,
		InputSchema: []byte(`{"type":"object","properties":{"query":{"type":"string","description":"what to look for"}},"required":["query"]}`)}
}

// consoleUser adds a sign-in user, with the admin role if admin.
func consoleUser(t *testing.T, srv *server.Server, user, password string, admin bool) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := srv.Store().AddUser(ctx, user, []byte(password)); err != nil {
		t.Fatal(err)
	}
	if admin {
		if err := srv.Store().SetUserAdmin(ctx, user, true); err != nil {
			t.Fatal(err)
		}
	}
}

// browserWatch records what the page must never do: JavaScript dialogs
// (dismissed at once, so that a failing test does not hang on one),
// exceptions, and CSP violations or other errors on the browser console.
type browserWatch struct {
	mu       sync.Mutex
	dialogs  []string
	problems []string
}

func watchBrowser(t *testing.T, bctx context.Context) *browserWatch {
	t.Helper()
	w := &browserWatch{}
	listen := func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			w.add(&w.dialogs, fmt.Sprintf("%s dialog: %q", ev.Type, ev.Message))
			// Dismissed from another goroutine: a listener must not
			// run commands.
			go func() {
				_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			w.add(&w.problems, fmt.Sprintf("exception: %s at %s:%d", msg, d.URL, d.LineNumber))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				w.add(&w.problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *log.EventEntryAdded:
			e := ev.Entry
			t.Logf("browser log (%s, %s): %s %s", e.Source, e.Level, e.Text, e.URL)
			// Network errors are the answers' statuses (401 on the
			// sign-in page, 403 on the refusal, 404 for /favicon.ico),
			// which the tests check themselves; a CSP violation is
			// source "security" (or "violation"), a script error
			// "javascript".
			if e.Level == log.EntryLevelError && e.Source != log.EntrySourceNetwork {
				w.add(&w.problems, fmt.Sprintf("%s: %s %s", e.Source, e.Text, e.URL))
			}
		}
	}
	if err := chromedp.Listen(bctx, listen); err != nil {
		t.Fatal(err)
	}
	for _, enable := range []cdp.Command[cdp.Empty, cdp.Empty]{log.Enable, runtime.Enable} {
		if _, err := chromedp.Call(bctx, enable, cdp.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	// A laptop's screen: the screenshots are taken at this size.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *browserWatch) add(to *[]string, s string) {
	w.mu.Lock()
	*to = append(*to, s)
	w.mu.Unlock()
}

// check fails the test for any dialog, exception, CSP violation or error
// the browser reported.
func (w *browserWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.dialogs {
		t.Errorf("the console opened a JavaScript dialog: %s", d)
	}
	for _, p := range w.problems {
		t.Errorf("the browser reported: %s", p)
	}
}

// within runs actions with a deadline of d.
func within(t *testing.T, bctx context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, pageState(bctx))
	}
}

// pageState is the page's URL and HTML, to say what the browser showed
// when a wait failed.
func pageState(bctx context.Context) string {
	ctx, cancel := context.WithTimeout(bctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.documentElement.outerHTML`))
	if err != nil {
		return "(page not readable: " + err.Error() + ")"
	}
	return "the page was: " + s
}

// get runs one action that returns a value, with a deadline of domWait.
func get[T any](t *testing.T, bctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, domWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// css is a CSS selector for the first match.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// consoleSignIn fills in and sends the console's sign-in form.
func consoleSignIn(t *testing.T, bctx context.Context, base, user, password string) {
	t.Helper()
	within(t, bctx, domWait, "sign-in form",
		chromedp.Navigate(base+"/console/sign-in"),
		chromedp.WaitVisible(css(`#password`)),
		chromedp.SendKeys(css(`#username`), user),
		chromedp.SendKeys(css(`#password`), password),
		chromedp.Click(css(`form.signin button[type=submit]`)),
	)
}

// consoleScreenshot saves the viewport as results/console/name (PNG) and,
// with CONSOLE_SCREENSHOTS_DOCS set, as docs/console/name too.
func consoleScreenshot(t *testing.T, bctx context.Context, name string) {
	t.Helper()
	png := get(t, bctx, "screenshot "+name, chromedp.CaptureScreenshot())
	dirs := []string{filepath.Join("..", "results", "console")}
	if os.Getenv(screenshotsDocsEnv) != "" {
		dirs = append(dirs, filepath.Join("..", "docs", "console"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", path, len(png))
	}
}

func evalBool(t *testing.T, bctx context.Context, expr string) bool {
	t.Helper()
	return get(t, bctx, expr, chromedp.Evaluate[bool](expr))
}

// TestConsoleBrowserAgentsLive: an admin signs in through the console's
// form in Chromium; the overview counts two agents online; the agents
// page lists both with their tools; a third agent started by the test
// appears without a reload, and leaves (or shows offline) when stopped.
// Screenshots of both pages go to results/console/. Nothing on the way
// trips the CSP or throws.
func TestConsoleBrowserAgentsLive(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleAgentStart(t, srv, "weather",
		consoleTool("forecast", "The forecast for a place, hour by hour, for the next three days."),
		consoleTool("alerts", "Weather alerts in force for a region."))
	consoleAgentStart(t, srv, "files",
		consoleTool("read", "Reads a file of the shared drive."),
		consoleTool("search", "Finds files whose name or text matches the query."))

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "overview after sign-in", chromedp.WaitVisible(css(`#agents-online`)))
	online := get(t, bctx, "agents online", chromedp.Text(css(`#agents-online`)))
	user := get(t, bctx, "user", chromedp.Text(css(`form.signout span`)))
	if !strings.HasPrefix(online, "2 ") || user != "alice" {
		t.Fatalf("overview: agents online %q, signed in as %q", online, user)
	}

	within(t, bctx, domWait, "agents page",
		chromedp.Click(css(`nav a[href="/console/agents"]`)),
		chromedp.WaitVisible(css(`section[data-agent="weather"][data-presence="online"]`)),
		chromedp.WaitVisible(css(`section[data-agent="files"][data-presence="online"]`)),
		// The event stream is open: what follows must arrive through it.
		chromedp.WaitVisible(css(`#live[data-state="live"]`)),
	)
	tools := get(t, bctx, "tool names", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('section.agent .tool-name')).map(e => e.closest('section').dataset.agent + "/" + e.textContent)`))
	if got := strings.Join(tools, " "); got != "files/read files/search weather/alerts weather/forecast" &&
		got != "weather/alerts weather/forecast files/read files/search" {
		t.Fatalf("tools on the agents page: %q", got)
	}
	consoleScreenshot(t, bctx, "agents.png")

	// A mark on the window survives only if the page is never reloaded.
	get(t, bctx, "mark the page", chromedp.Evaluate[bool](`window.notReloaded = true`))
	stop := consoleAgentStart(t, srv, "third", consoleTool("ping", "Answers pong."))
	within(t, bctx, domWait, "the third agent appears",
		chromedp.WaitVisible(css(`section[data-agent="third"][data-presence="online"] .tool-name`)))
	stop()
	within(t, bctx, domWait, "the third agent leaves",
		chromedp.WaitNotPresent(css(`section[data-agent="third"][data-presence="online"]`)))
	if !evalBool(t, bctx, `window.notReloaded === true && !!document.querySelector('section[data-agent="weather"][data-presence="online"]')`) {
		t.Fatal("the agents page was reloaded, or lost the other agents, while following presence")
	}
}

// TestConsoleBrowserRefusesNonAdmin: without a session, /console/agents
// shows the sign-in form (no agent data); a user without the admin role
// who signs in gets the refusal page, and still no console page.
func TestConsoleBrowserRefusesNonAdmin(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "bob", "bob-console-password", false)
	consoleAgentStart(t, srv, "weather", consoleTool("forecast", "The forecast."))

	bctx := testenv.Browser(t, 60*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	within(t, bctx, domWait, "agents page without a session",
		chromedp.Navigate(base+"/console/agents"),
		chromedp.WaitVisible(css(`form.signin #password`)),
	)
	title := get(t, bctx, "title", chromedp.Title())
	if !strings.HasPrefix(title, "Sign in") || evalBool(t, bctx, `!!document.querySelector('#agent-list, section.agent')`) {
		t.Fatalf("without a session /console/agents shows %q with agent data", title)
	}

	consoleSignIn(t, bctx, base, "bob", "bob-console-password")
	within(t, bctx, domWait, "refusal page", chromedp.WaitVisible(css(`main a[href="/console/sign-in"]`)))
	msg := get(t, bctx, "message", chromedp.Text(css(`main .message`)))
	title = get(t, bctx, "title", chromedp.Title())
	if !strings.HasPrefix(title, "Not an admin") || !strings.Contains(msg, "does not have the admin role") {
		t.Fatalf("a non-admin's sign-in shows %q: %q", title, msg)
	}
	within(t, bctx, domWait, "agents page after a refused sign-in",
		chromedp.Navigate(base+"/console/agents"),
		chromedp.WaitVisible(css(`form.signin #password`)),
	)
	if evalBool(t, bctx, `!!document.querySelector('#agent-list, section.agent, nav')`) {
		t.Fatal("a non-admin sees console pages after a refused sign-in")
	}
}

// TestConsoleBrowserXSSAgentRunsNothing: an agent whose tool description
// (and title and schema) holds an <img onerror>, a javascript: link and an
// image on an attacker's server is shown as text, at load and after the
// live update has rendered the list again: no dialog opens, the attacker
// gets no request, the list holds no element of the agent's making, and
// the CSP reports nothing (it would report markup that slipped through).
func TestConsoleBrowserXSSAgentRunsNothing(t *testing.T) {
	var hits atomic.Int64
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		t.Logf("attacker server: %s %s", r.Method, r.URL)
	}))
	defer attacker.Close()
	payload := `<img src=x onerror=alert(1)> <a href="javascript:alert(2)">x</a> <img src="` + attacker.URL + `/hit">`

	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleAgentStart(t, srv, "evil", mcp.Tool{
		Name: "lookup", Title: `<script>alert(3)</script>`, Description: "Looks things up. " + payload,
		InputSchema: []byte(`{"type":"object","properties":{"q":{"type":"string","description":` +
			fmt.Sprintf("%q", payload) + `}}}`),
	})

	bctx := testenv.Browser(t, 60*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "agents page",
		chromedp.WaitVisible(css(`#agents-online`)),
		chromedp.Navigate(base+"/console/agents"),
		chromedp.WaitVisible(css(`section[data-agent="evil"] .tool-name`)),
		chromedp.WaitVisible(css(`#live[data-state="live"]`)),
	)
	// The console's own link to an agent's page is the one anchor allowed.
	const foreign = `img, script, [onerror], a:not([href^="/console/agent?name="])`
	listInert := func(when string) {
		t.Helper()
		if evalBool(t, bctx, `!!document.querySelector('#agent-list :is(`+foreign+`)')`) {
			t.Errorf("%s: the agent's markup is in the agents page", when)
		}
	}
	listInert("at load")
	// The live update renders the list again (the script's path, not the
	// page's): another agent coming online triggers it.
	consoleAgentStart(t, srv, "trigger", consoleTool("ping", "Answers pong."))
	within(t, bctx, domWait, "the live update",
		chromedp.WaitVisible(css(`section[data-agent="trigger"] .tool-name`)))
	listInert("after the live update")

	// The agent's own page shows the description and the schema in full.
	within(t, bctx, domWait, "the agent's page",
		chromedp.WaitVisible(css(`section[data-agent="evil"] a[href="/console/agent?name=evil"]`)),
		chromedp.Navigate(base+"/console/agent?name=evil"),
		chromedp.WaitVisible(css(`section[data-agent="evil"] .description`)))
	desc := get(t, bctx, "description", chromedp.TextContent(css(`section[data-agent="evil"] .description`)))
	if !strings.Contains(desc, payload) {
		t.Errorf("the description is not shown as text: %q", desc)
	}
	if evalBool(t, bctx, `!!document.querySelector('main :is(img, script, [onerror], a[href^="javascript:"])')`) {
		t.Error("the agent's markup is in the agent's page")
	}
	// Let the browser finish whatever the page started (image loads,
	// handlers): a round trip through the page's event loop and the
	// network stack of the same tab.
	get(t, bctx, "settle", chromedp.Evaluate[string](
		`new Promise(r => setTimeout(() => fetch('/console/agents/list').then(() => r('ok')), 200))`, chromedp.EvalAwaitPromise))
	if n := hits.Load(); n != 0 {
		t.Errorf("the attacker's server got %d requests from the console", n)
	}
}

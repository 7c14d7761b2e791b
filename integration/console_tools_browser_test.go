package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
)

// toolsAgentStart runs an expert agent named name with tools (their own
// handlers) and waits until the gateway sees it online.
func toolsAgentStart(t *testing.T, srv *server.Server, name string, tools ...expertagent.Tool) {
	t.Helper()
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: agentPassword,
		ClientID: name + "-1", Name: name, Version: "1.0.0", Logger: testenv.LoggerAt(t, "agent", logrus.WarnLevel),
	})
	for _, tool := range tools {
		if err := a.AddTool(tool); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Run(t, "agent "+name, a.Run)
	poll(t, 15*time.Second, name+" online", func() bool { return agentOnline(srv, name+"-1") })
}

// TestConsoleBrowserTryIt: the Tools page as a user granted one agent
// shows that agent's tools and the platform tools, and lists the other
// agent's tool as not visible because of the grant; Try it calls the
// agent's echo with a form value, platform_whoami (whose answer names the
// chosen user: it called the API with the minted token), and slow, whose
// progress line shows while the call is still open (the page streams),
// then its result. Screenshots tools.png and try.png.
func TestConsoleBrowserTryIt(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleUser(t, srv, "dev", "dev-console-password", false)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	toolsAgentStart(t, srv, "alpha",
		expertagent.Tool{
			Tool: mcp.Tool{Name: "echo", Description: "Returns the text it is given.",
				InputSchema: []byte(`{"type":"object","properties":{"text":{"type":"string","description":"what to send back"},"loud":{"type":"boolean","description":"in capitals"}},"required":["text"]}`)},
			Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				var a struct {
					Text string `json:"text"`
					Loud bool   `json:"loud"`
				}
				if err := req.Bind(&a); err != nil {
					return nil, err
				}
				if a.Loud {
					a.Text = strings.ToUpper(a.Text)
				}
				return mcp.TextResult(a.Text), nil
			}},
		expertagent.Tool{
			Tool: mcp.Tool{Name: "slow", Description: "Works in steps, reporting progress; answers once the test lets it.",
				InputSchema: []byte(`{"type":"object","properties":{"steps":{"type":"integer","description":"how many steps"}}}`)},
			Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				if err := req.Progress(ctx, 1, 2, "halfway"); err != nil {
					return nil, err
				}
				_ = req.Log(ctx, "info", "waiting for the test")
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return mcp.TextResult("slow is done"), nil
			}},
	)
	toolsAgentStart(t, srv, "beta", expertagent.Tool{Tool: consoleTool("lookup", "Looks things up."),
		Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			return mcp.TextResult("found"), nil
		}})
	if err := srv.Store().SetUserAgents(testCtx(t, 10*time.Second), "dev", []string{"alpha"}); err != nil {
		t.Fatal(err)
	}

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)
	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "overview after sign-in", chromedp.WaitVisible(css(`#agents-online`)))

	// The Tools page, as dev, chosen in its form.
	within(t, bctx, domWait, "tools page as dev",
		chromedp.Click(css(`nav a[href="/console/tools"]`)),
		chromedp.WaitVisible(css(`#tools-caller`)),
		chromedp.SetValue(css(`#caller-user`), "dev"),
		chromedp.Click(css(`#tools-caller button[type=submit]`)),
		chromedp.WaitVisible(css(`#tools-visible tr[data-tool="echo"][data-source="alpha"]`)),
		chromedp.WaitVisible(css(`#tools-visible tr[data-tool="platform_whoami"][data-source="platform"]`)),
		chromedp.WaitVisible(css(`#tools-hidden tr[data-tool="lookup"][data-source="beta"]`)),
	)
	reason := get(t, bctx, "lookup's reason", chromedp.Text(css(`#tools-hidden tr[data-tool="lookup"] .tools-reason`)))
	if !strings.Contains(reason, "Agent beta is not granted to user dev") {
		t.Fatalf("why dev does not see lookup: %q", reason)
	}
	if evalBool(t, bctx, `!!document.querySelector('#tools-visible tr[data-tool="lookup"]')`) {
		t.Fatal("dev sees beta's lookup")
	}
	get(t, bctx, "scroll to the tables", chromedp.Evaluate[bool](`document.querySelector('#tools-as').scrollIntoView(), true`))
	consoleScreenshot(t, bctx, "tools.png")

	// Try it: echo, from its link, with a form value.
	within(t, bctx, domWait, "echo",
		chromedp.Click(css(`#tools-visible tr[data-tool="echo"] a.tools-try`)),
		chromedp.WaitVisible(css(`#try-form`)),
		chromedp.SendKeys(css(`#arg-0`), "hello from the console"),
		chromedp.Click(css(`#try-call`)),
		chromedp.WaitVisible(css(`#try-result[data-outcome="ok"] pre.try-text`)),
	)
	if got := get(t, bctx, "echo's result", chromedp.Text(css(`#try-result pre.try-text`))); got != "hello from the console" {
		t.Fatalf("echo answered %q", got)
	}

	// A platform tool, chosen in the page's tool select: it calls the API
	// with the call's token, and says whose it is.
	within(t, bctx, domWait, "platform_whoami",
		chromedp.SetValue(css(`#caller-tool`), "platform_whoami"),
		chromedp.Click(css(`#tools-caller button[type=submit]`)),
		chromedp.WaitReady(css(`#try-form input[name="tool"][value="platform_whoami"]`)),
		chromedp.Click(css(`#try-call`)),
		chromedp.WaitVisible(css(`#try-result[data-outcome="ok"] #try-structured`)),
	)
	if got := get(t, bctx, "whoami's result", chromedp.Text(css(`#try-structured`))); !strings.Contains(got, `"user": "dev"`) {
		t.Fatalf("platform_whoami answered %q", got)
	}

	// slow: its progress shows while the call is open, then its result.
	within(t, bctx, domWait, "slow's progress",
		chromedp.SetValue(css(`#caller-tool`), "slow"),
		chromedp.Click(css(`#tools-caller button[type=submit]`)),
		chromedp.WaitReady(css(`#try-form input[name="tool"][value="slow"]`)),
		chromedp.Click(css(`#try-call`)),
		chromedp.WaitVisible(css(`#try-events li[data-kind="progress"]`)),
	)
	if evalBool(t, bctx, `!!document.querySelector('#try-result')`) {
		t.Fatal("slow's result shows before the tool answered")
	}
	progress := get(t, bctx, "slow's progress", chromedp.Text(css(`#try-events li[data-kind="progress"]`)))
	if progress != "Progress 1 of 2: halfway" {
		t.Fatalf("slow's progress line: %q", progress)
	}
	releaseOnce.Do(func() { close(release) })
	within(t, bctx, domWait, "slow's result", chromedp.WaitVisible(css(`#try-result[data-outcome="ok"] pre.try-text`)))
	if got := get(t, bctx, "slow's result", chromedp.Text(css(`#try-result pre.try-text`))); got != "slow is done" {
		t.Fatalf("slow answered %q", got)
	}
	consoleScreenshot(t, bctx, "try.png")
}

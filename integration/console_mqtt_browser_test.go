package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestConsoleBrowserMQTTIdentities: an admin disables the MQTT identity of
// an online agent on the identities page: the Done line counts the client
// disconnected, the agent goes offline, and an MCP client's tools/list
// loses its tool. On the rules page a bad topic filter is refused with the
// CLI's message, a good rule is listed, then removed. Screenshots of both
// pages go to results/console/.
func TestConsoleBrowserMQTTIdentities(t *testing.T) {
	srv := startServer(t, server.Config{})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleAgentStart(t, srv, "weather", consoleTool("forecast", "The forecast for a place, hour by hour."))
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "carol"}), "2025-11-25", nil)
	// listed says whether tools/list answered, and with forecast.
	listed := func() (answered, forecast bool) {
		list, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
		if err != nil {
			t.Logf("tools/list: %v", err)
			return false, false
		}
		for _, tool := range list.Tools {
			if tool.Name == "forecast" {
				return true, true
			}
		}
		return true, false
	}
	if _, ok := listed(); !ok {
		t.Fatal("the MCP client does not list forecast before the disable")
	}

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)

	consoleSignIn(t, bctx, e.base, "alice", "alice-console-password")
	within(t, bctx, domWait, "identities page",
		chromedp.WaitVisible(css(`#agents-online`)),
		chromedp.Click(css(`nav a[href="/console/identities"]`)),
		chromedp.WaitVisible(css(`tr[data-identity="weather"][data-state="enabled"][data-clients="1"]`)),
	)
	within(t, bctx, domWait, "disable weather",
		chromedp.Click(css(`tr[data-identity="weather"] button[aria-label="Disable weather"]`)),
		chromedp.WaitVisible(css(`tr[data-identity="weather"][data-state="disabled"]`)),
	)
	if done := get(t, bctx, "done", chromedp.Text(css(`main .done`))); done != "Disabled MQTT identity weather; disconnected 1 client." {
		t.Fatalf("after the disable the page says %q", done)
	}
	consoleScreenshot(t, bctx, "identities.png")
	poll(t, domWait, "weather-1 offline", func() bool { return !agentOnline(srv, "weather-1") })
	poll(t, domWait, "forecast gone from tools/list", func() bool {
		answered, forecast := listed()
		return answered && !forecast
	})

	// Rules: a bad filter shows the model's (the CLI's) message.
	within(t, bctx, domWait, "rules page, a bad filter",
		chromedp.Click(css(`nav a[href="/console/rules"]`)),
		chromedp.WaitVisible(css(`tr[data-rule="builtin-agent-req"]`)),
		chromedp.SetValue(css(`#rule-who`), "*"),
		chromedp.SetValue(css(`#rule-access`), "write"),
		chromedp.SendKeys(css(`#rule-filter`), "sensors/#/t"),
		chromedp.Click(css(`#rule-add button[type=submit]`)),
		chromedp.WaitVisible(css(`main .message`)),
	)
	if msg := get(t, bctx, "message", chromedp.Text(css(`main .message`))); msg != `invalid rule: "sensors/#/t" is not a valid MQTT topic filter` {
		t.Fatalf("a bad filter: the page says %q", msg)
	}
	if evalBool(t, bctx, `!!document.querySelector('tr[data-kind="builtin"] form, tr[data-kind="operator"]')`) {
		t.Fatal("a built-in rule has a remove button, or the bad rule was added")
	}
	within(t, bctx, domWait, "a good rule",
		chromedp.SetValue(css(`#rule-filter`), "sensors/+/t"),
		chromedp.Click(css(`#rule-add button[type=submit]`)),
		chromedp.WaitVisible(css(`tr[data-kind="operator"] td.filter`)),
	)
	if f := get(t, bctx, "filter", chromedp.Text(css(`tr[data-kind="operator"] td.filter`))); f != "sensors/+/t" {
		t.Fatalf("the rule listed has the filter %q", f)
	}
	if done := get(t, bctx, "done", chromedp.Text(css(`main .done`))); !strings.Contains(done, ": * write sensors/+/t;") {
		t.Fatalf("after the add the page says %q", done)
	}
	consoleScreenshot(t, bctx, "rules.png")
	within(t, bctx, domWait, "remove the rule",
		chromedp.Click(css(`tr[data-kind="operator"] button.danger`)),
		chromedp.WaitVisible(css(`#no-operator-rules`)),
	)
	rules, err := srv.Store().ListRules(testCtx(t, 5*time.Second))
	if err != nil || len(rules) != 0 {
		t.Fatalf("rules left in the store: %+v %v", rules, err)
	}
}

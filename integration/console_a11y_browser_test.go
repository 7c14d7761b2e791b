package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
)

// TestConsoleBrowserFormsLabelled: on every console page each form
// control a person fills is named (a <label for>, an enclosing label or
// aria-label), every data table has column headers, and each page has
// one h1; the menu reaches every page by keyboard (Tab moves through its
// links in order).
func TestConsoleBrowserFormsLabelled(t *testing.T) {
	srv := startServer(t, server.Config{})
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	consoleAgentStart(t, srv, "weather", consoleTool("forecast", "The forecast for a place."))

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)
	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "overview", chromedp.WaitVisible(css(`#agents-online`)))

	const unlabelled = `Array.from(document.querySelectorAll('main input:not([type=hidden]):not([type=submit]), main select, main textarea'))
		.filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
		.map(e => e.outerHTML.slice(0, 120))`
	const headless = `Array.from(document.querySelectorAll('main table')).filter(t => !t.querySelector('th')).map(t => t.id || t.outerHTML.slice(0, 80))`
	for _, page := range []string{"/console/", "/console/agents", "/console/agent?name=weather", "/console/tools?user=alice",
		"/console/try?user=alice&tool=platform_echo", "/console/tokens", "/console/users", "/console/oauth-clients",
		"/console/identities", "/console/rules", "/console/audit", "/console/settings", "/console/sessions"} {
		within(t, bctx, domWait, page, chromedp.Navigate(base+page), chromedp.WaitVisible(css(`main h1`)))
		if bad := get(t, bctx, page+" controls", chromedp.Evaluate[[]string](unlabelled)); len(bad) > 0 {
			t.Errorf("%s: form controls without a label: %s", page, strings.Join(bad, " | "))
		}
		if bad := get(t, bctx, page+" tables", chromedp.Evaluate[[]string](headless)); len(bad) > 0 {
			t.Errorf("%s: tables without headers: %s", page, strings.Join(bad, " | "))
		}
		if n := get(t, bctx, page+" h1", chromedp.Evaluate[int](`document.querySelectorAll('h1').length`)); n != 1 {
			t.Errorf("%s: %d h1 elements, want 1", page, n)
		}
	}

	// Keyboard: from the top of the page, Tab reaches the menu's links in
	// their order.
	links := get(t, bctx, "menu", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('header nav a')).map(a => a.getAttribute('href'))`))
	within(t, bctx, domWait, "focus the page", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(css(`main h1`)))
	var reached []string
	for i := 0; i < len(links)+5 && len(reached) < len(links); i++ {
		within(t, bctx, domWait, "tab", chromedp.KeyEvent("\t"))
		if href := get(t, bctx, "focused", chromedp.Evaluate[string](`document.activeElement && document.activeElement.closest('header nav') ? document.activeElement.getAttribute('href') : ''`)); href != "" {
			reached = append(reached, href)
		}
	}
	if strings.Join(reached, " ") != strings.Join(links, " ") {
		t.Errorf("Tab reached the menu links %v, want %v", reached, links)
	}
}

package integration

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// overviewAgentStart runs the agent "weather" with a tool "forecast" that
// fails (isError) when asked for the place "nowhere", and waits for it
// to be online.
func overviewAgentStart(t *testing.T, srv *server.Server) {
	t.Helper()
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), "weather", acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: "weather", Password: agentPassword,
		ClientID: "weather-1", Name: "weather", Version: "1.0.0", Logger: testenv.LoggerAt(t, "agent", logrus.WarnLevel),
	})
	err := a.AddTool(expertagent.Tool{Tool: consoleTool("forecast", "The forecast for a place."),
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var q struct {
				Query string `json:"query"`
			}
			if err := req.Bind(&q); err != nil {
				return nil, err
			}
			if q.Query == "nowhere" {
				return mcp.ErrorResult("no forecast for %s", q.Query), nil
			}
			return mcp.TextResult("sunny in " + q.Query), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, "agent weather", a.Run)
	poll(t, 15*time.Second, "weather online", func() bool { return agentOnline(srv, "weather-1") })
}

// TestConsoleBrowserOverviewCharts: a go-sdk MCP client calls an agent's
// tool (some calls fail with isError) and a platform tool through a real
// gateway; the overview then shows, for the whole gateway, the platform
// and the agent, the calls/s, errors and latency charts with points, and
// the table of the figures (screenshot overview.png). Settings: the page
// lists the settings; Reload does what the process's reload does (here
// the log level goes to warning) and says Done (screenshot settings.png).
func TestConsoleBrowserOverviewCharts(t *testing.T) {
	var srvp atomic.Pointer[server.Server]
	var reloads atomic.Int32
	cfg := server.Config{Logger: testenv.LoggerAt(t, "", logrus.InfoLevel)}
	cfg.Settings = func() []admin.Setting {
		return []admin.Setting{
			{Name: "http-addr", Value: "127.0.0.1:0", Source: "flag"},
			{Name: "log-level", Value: "info", Source: "file"},
			{Name: "rate-limit-token", Value: "600:50", Source: "file"},
			{Name: "session-secret", Value: "********", Source: "env"},
			{Name: "call-timeout", Value: "30s", Source: "default"},
		}
	}
	cfg.Console.Reload = func(ctx context.Context) error {
		reloads.Add(1)
		lv := logrus.WarnLevel
		return srvp.Load().Reload(ctx, server.Reload{LogLevel: &lv})
	}
	srv := startServer(t, cfg)
	srvp.Store(srv)
	base := "http://" + srv.HTTPAddr().String()
	consoleUser(t, srv, "alice", "alice-console-password", true)
	overviewAgentStart(t, srv)

	e := &gwEnv{srv: srv, base: base}
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "ann"}), "2025-06-18", nil)
	var wg sync.WaitGroup
	var failed, bad atomic.Int32
	for i := range 12 {
		wg.Go(func() {
			place := "Lyon"
			if i%4 == 0 {
				place = "nowhere"
			}
			res, err := cs.CallTool(testCtx(t, 20*time.Second), &gosdk.CallToolParams{Name: "forecast", Arguments: map[string]any{"query": place}})
			switch {
			case err != nil:
				t.Errorf("forecast %s: %v", place, err)
			case res.IsError != (place == "nowhere"):
				bad.Add(1)
			case res.IsError:
				failed.Add(1)
			}
		})
	}
	for range 5 {
		if res, err := cs.CallTool(testCtx(t, 10*time.Second), &gosdk.CallToolParams{Name: "platform_echo", Arguments: map[string]any{"text": "hi"}}); err != nil || res.IsError {
			t.Fatalf("platform_echo: %v %+v", err, res)
		}
	}
	wg.Wait()
	if failed.Load() != 3 || bad.Load() != 0 {
		t.Fatalf("%d calls failed, %d answered wrong", failed.Load(), bad.Load())
	}

	bctx := testenv.Browser(t, 90*time.Second)
	w := watchBrowser(t, bctx)
	defer w.check(t)
	consoleSignIn(t, bctx, base, "alice", "alice-console-password")
	within(t, bctx, domWait, "overview with charts",
		chromedp.WaitVisible(css(`#agents-online`)),
		chromedp.WaitVisible(css(`section.chart-group[data-series="agent:weather"] svg[data-chart="latency"] circle`)),
	)
	if online := get(t, bctx, "agents online", chromedp.Text(css(`#agents-online`))); !strings.HasPrefix(online, "1 ") {
		t.Errorf("agents online %q", online)
	}
	// Per series, each chart's data points (minutes with data), in
	// order calls, errors, latency.
	points := get(t, bctx, "chart points", chromedp.Evaluate[map[string][]int](`(() => {
		const out = {};
		for (const g of document.querySelectorAll('section.chart-group')) {
			out[g.dataset.series] = Array.from(g.querySelectorAll('svg.chart')).map(s =>
				s.querySelectorAll('circle, rect').length > 0 ? Number(s.dataset.points) : -1);
		}
		return out;
	})()`))
	// All the calls ran within a minute or two: one minute, or two if
	// the test crossed a minute's end.
	one := func(n int) bool { return n == 1 || n == 2 }
	for series, want := range map[string]bool{"all": true, "platform": false, "agent:weather": true} {
		p := points[series]
		if len(p) != 3 || !one(p[0]) || !one(p[2]) || (want && !one(p[1])) || (!want && p[1] != -1) {
			t.Errorf("%s: points %v (calls, errors, latency)", series, p)
		}
	}
	if len(points) != 3 {
		t.Errorf("chart groups %v, want all, platform and weather", points)
	}
	row := get(t, bctx, "weather row", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#calls-table tr[data-series="agent:weather"] th, #calls-table tr[data-series="agent:weather"] td')).map(c => c.textContent)`))
	if len(row) != 6 || row[0] != "Agent weather" || row[2] != "12" || row[3] != "3" || row[4] == "—" || row[5] == "—" {
		t.Errorf("weather row %q", row)
	}
	label := get(t, bctx, "chart label", chromedp.Evaluate[string](
		`document.querySelector('section.chart-group[data-series="agent:weather"] svg[data-chart="errors"] desc').textContent`))
	if !strings.Contains(label, "3 in the hour (of 12 calls)") {
		t.Errorf("the weather errors chart's text: %q", label)
	}
	consoleScreenshot(t, bctx, "overview.png")

	// Settings: the list, then Reload.
	within(t, bctx, domWait, "settings page",
		chromedp.Click(css(`nav a[href="/console/settings"]`)),
		chromedp.WaitVisible(css(`#settings tr[data-setting="session-secret"]`)),
	)
	if v := get(t, bctx, "secret", chromedp.Text(css(`#settings tr[data-setting="session-secret"] .setting-value`))); v != "********" {
		t.Errorf("session-secret shows %q", v)
	}
	if cfg.Logger.Logger.GetLevel() != logrus.InfoLevel {
		t.Fatalf("log level %v before the reload", cfg.Logger.Logger.GetLevel())
	}
	within(t, bctx, domWait, "reload",
		chromedp.Click(css(`#reload-button`)),
		chromedp.WaitVisible(css(`main .done`)),
	)
	done := get(t, bctx, "done", chromedp.Text(css(`main .done`)))
	if !strings.Contains(done, "Settings reloaded") || reloads.Load() != 1 || cfg.Logger.Logger.GetLevel() != logrus.WarnLevel {
		t.Errorf("after Reload: %q, %d reloads, log level %v", done, reloads.Load(), cfg.Logger.Logger.GetLevel())
	}
	consoleScreenshot(t, bctx, "settings.png")
}

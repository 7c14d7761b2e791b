package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/internal/testenv/servertest"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
)

// benchEnvInt reads a positive integer from the environment, or def.
func benchEnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkConsolePages measures each console page's server time (a GET
// on loopback, the whole answer read) with many agents online, 200
// agents × 50 tools by default (CONSOLE_BENCH_AGENTS, CONSOLE_BENCH_TOOLS),
// and an audit log of a million records (filled first, in about 15 s).
// It reports the p50 and p99 of the requests of each page.
//
//	go test -run '^$' -bench BenchmarkConsolePages -benchtime 50x ./console/
//
// (one page: -bench 'BenchmarkConsolePages/agents$').
func BenchmarkConsolePages(b *testing.B) {
	agents, tools := benchEnvInt("CONSOLE_BENCH_AGENTS", 200), benchEnvInt("CONSOLE_BENCH_TOOLS", 50)
	cfg := server.Config{ListTimeout: 30 * time.Second, Logger: testenv.LoggerAt(b, "", logrus.WarnLevel),
		DataDir: benchAuditStore(b, time.Now().Add(-time.Minute))} // a million audit records (audit_bench_test.go)
	cfg.Audit.Retention = -1 // the records' times are what they are
	srv := servertest.Start(b, cfg)
	ctx := testenv.Context(b, 5*time.Minute)
	st := srv.Store()
	if _, err := st.AddUser(ctx, "ops", []byte(adminPassword)); err != nil {
		b.Fatal(err)
	}
	if err := st.SetUserAdmin(ctx, "ops", true); err != nil {
		b.Fatal(err)
	}
	startBenchAgents(b, ctx, srv, agents, tools)

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + srv.HTTPAddr().String()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/console/sign-in",
		strings.NewReader(url.Values{"username": {"ops"}, "password": {adminPassword}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		b.Fatalf("sign-in: %v %v", resp, err)
	}
	resp.Body.Close()

	for _, page := range []string{"/console/", "/console/agents", "/console/tools?user=ops", "/console/try?tool=platform_echo&user=ops",
		"/console/tokens", "/console/users", "/console/oauth-clients", "/console/identities", "/console/rules",
		"/console/audit", "/console/settings"} {
		get := func() time.Duration {
			start := time.Now()
			r, err := c.Get(base + page)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				b.Fatalf("GET %s: %s", page, r.Status)
			}
			return time.Since(start)
		}
		name := strings.TrimPrefix(page, "/console/")
		if name == "" {
			name = "overview"
		}
		b.Run(name, func(b *testing.B) {
			get() // the first view fills the catalog of the agents' lists
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				lat = append(lat, get())
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// startBenchAgents runs n expert agents of tools tools each, in this
// process, and waits until the gateway sees them all online.
func startBenchAgents(b *testing.B, ctx context.Context, srv *server.Server, n, tools int) {
	b.Helper()
	const pw = "agent-password-123"
	schema := []byte(`{"type":"object","properties":{"query":{"type":"string","description":"what to look for"},"limit":{"type":"integer"}},"required":["query"]}`)
	for i := range n {
		name := fmt.Sprintf("agent%03d", i)
		if _, err := srv.Store().AddIdentity(ctx, name, acl.RoleExpertAgent, []byte(pw)); err != nil {
			b.Fatal(err)
		}
		a := expertagent.NewAgent(expertagent.AgentOptions{
			BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: pw,
			ClientID: name + "-1", Name: name, Version: "1.0.0", Logger: testenv.LoggerAt(b, "agent", logrus.ErrorLevel),
		})
		for j := range tools {
			err := a.AddTool(expertagent.Tool{Tool: mcp.Tool{Name: fmt.Sprintf("tool%02d", j),
				Description: "Finds things of kind " + strconv.Itoa(j) + " that match the query, newest first.", InputSchema: schema},
				Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
					return mcp.TextResult("ok"), nil
				}})
			if err != nil {
				b.Fatal(err)
			}
		}
		testenv.Run(b, name, a.Run)
	}
	testenv.Poll(b, 2*time.Minute, "agents online", func() bool {
		online := 0
		for _, s := range srv.Requester().Agents() {
			if s.Online {
				online++
			}
		}
		return online >= n
	})
}

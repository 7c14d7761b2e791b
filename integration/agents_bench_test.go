package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The many-agents benchmarks: benchAgents distinct agents of
// benchToolsPerAgent tools each, SDK agents in this process on the
// embedded broker, driven by a raw HTTP JSON-RPC client over
// benchSessions sessions (the go-sdk client would be the bottleneck).
// Every agent serves echo, so each is listed as <agent>.echo. Run:
//
//	go test ./integration/ -run '^$' -bench BenchmarkManyAgents -benchtime 2000x
const (
	benchAgents        = 20
	benchToolsPerAgent = 50
)

func benchAgentName(i int) string { return fmt.Sprintf("agent-%02d", i+1) }

// startBenchAgents starts a gateway with the agents online and their
// union listed, and returns it with a token.
func startBenchAgents(b *testing.B, cfg server.Config) (*gwEnv, string) {
	b.Helper()
	cfg.Logger = benchLogger(b)
	srv := startServer(b, cfg)
	g := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	ctx := testCtx(b, time.Minute)
	for i := range benchAgents {
		name := benchAgentName(i)
		if _, err := srv.Store().AddIdentity(ctx, name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
			b.Fatal(err)
		}
		a := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://" + srv.MQTTAddr().String(),
			Username: name, Password: agentPassword, ClientID: name + "-1"})
		tools := []expertagent.Tool{{
			Tool: tbmcp.Tool{Name: "echo", Description: "Echoes.",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
			Handler: func(_ context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
				var args struct{ Text string }
				if err := req.Bind(&args); err != nil {
					return nil, err
				}
				return tbmcp.TextResult(args.Text), nil
			},
		}}
		for j := 1; j < benchToolsPerAgent; j++ {
			tools = append(tools, expertagent.Tool{Tool: tbmcp.Tool{Name: fmt.Sprintf("tool_%02d", j), Description: "A tool of the benchmark."},
				Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
					return tbmcp.TextResult("ok"), nil
				}})
		}
		for _, t := range tools {
			if err := a.AddTool(t); err != nil {
				b.Fatal(err)
			}
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		b.Cleanup(func() { cancel(); <-done })
	}
	secret, _, err := srv.Store().CreateToken(ctx, store.TokenSpec{UserID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	poll(b, 30*time.Second, "the agents' tools listed", func() bool {
		body, err := post2026(ctx, http.DefaultClient, g.mcpURL()+"/bench/warm", secret, "tools/list", `{}`)
		return err == nil && fullFirstPage(body)
	})
	return g, secret
}

// fullFirstPage reports whether a tools/list answer is the first page of
// the whole union: platform tools, then every agent's, up to the page size
// (1000 tools).
func fullFirstPage(body string) bool {
	agents, platform := strings.Count(body, `"io.toolbus/agent"`), strings.Count(body, `"name":"platform_`)
	return platform > 0 && agents+platform == min(benchAgents*benchToolsPerAgent+platform, 1000)
}

// post2026 sends one request on the stateless 2026-07-28 wire; params is a
// JSON object, to which it adds the _meta that wire wants.
func post2026(ctx context.Context, hc *http.Client, url, token, method, params string) (string, error) {
	var p map[string]any
	if err := json.Unmarshal([]byte(params), &p); err != nil {
		return "", err
	}
	p["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "bench", "version": "1"}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := p["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(out), fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(out), nil
}

// runSessions runs b.N requests over benchSessions workers; do makes
// request n of worker w and says whether its answer is right. It reports
// calls/s and the p50 and p99 latency.
func runSessions(b *testing.B, do func(w, n int) bool) {
	b.Helper()
	var next, failed atomic.Int64
	lat := make([][]time.Duration, benchSessions)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range benchSessions {
		wg.Go(func() {
			for n := 0; ; n++ {
				if next.Add(1) > int64(b.N) {
					return
				}
				t0 := time.Now()
				if !do(w, n) {
					failed.Add(1)
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed", n, b.N)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkManyAgents: tools/list of the union of 20 agents x 50 tools,
// cached (one context per session, fetched once) and cold (each list in a
// new context: the gateway asks the 20 agents concurrently); tools/call
// at 32 sessions, all to one agent and spread over the 20.
func BenchmarkManyAgents(b *testing.B) {
	g, secret := startBenchAgents(b, server.Config{})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchSessions, MaxConnsPerHost: benchSessions}}
	ctx := testCtx(b, 10*time.Minute)
	var cold atomic.Int64
	b.Run("tools-list-cached", func(b *testing.B) {
		runSessions(b, func(w, _ int) bool {
			body, err := post2026(ctx, hc, fmt.Sprintf("%s/bench/cached-%d", g.mcpURL(), w), secret, "tools/list", `{}`)
			return err == nil && fullFirstPage(body)
		})
	})
	b.Run("tools-list-cold", func(b *testing.B) {
		runSessions(b, func(int, int) bool {
			body, err := post2026(ctx, hc, fmt.Sprintf("%s/bench/cold-%d", g.mcpURL(), cold.Add(1)), secret, "tools/list", `{}`)
			return err == nil && fullFirstPage(body)
		})
	})
	call := func(agent int) func(w, n int) bool {
		return func(w, n int) bool {
			a := agent
			if a < 0 {
				a = (w + n) % benchAgents
			}
			body, err := post2026(ctx, hc, fmt.Sprintf("%s/bench/call-%d", g.mcpURL(), w), secret, "tools/call",
				`{"name":"`+benchAgentName(a)+`.echo","arguments":{"text":"bench"}}`)
			return err == nil && strings.Contains(body, `"text":"bench"`) && !strings.Contains(body, `"isError":true`)
		}
	}
	b.Run("calls-one-agent", func(b *testing.B) { runSessions(b, call(0)) })
	b.Run("calls-20-agents", func(b *testing.B) { runSessions(b, call(-1)) })
}

// BenchmarkManyAgentsContexts: the memory of b.N contexts (each call on a
// new entity path) with 20 agents online: the Go heap in use of this
// process (gateway, broker and agents), after a GC, per context.
//
//	go test ./integration/ -run '^$' -bench BenchmarkManyAgentsContexts -benchtime 100000x
func BenchmarkManyAgentsContexts(b *testing.B) {
	g, secret := startBenchAgents(b, server.Config{MaxContexts: 1 << 20})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchSessions, MaxConnsPerHost: benchSessions}}
	ctx := testCtx(b, 30*time.Minute)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	var ctxNo atomic.Int64
	runSessions(b, func(int, int) bool {
		body, err := post2026(ctx, hc, fmt.Sprintf("%s/bench/ctx-%d", g.mcpURL(), ctxNo.Add(1)), secret, "tools/call",
			`{"name":"agent-01.echo","arguments":{"text":"bench"}}`)
		return err == nil && strings.Contains(body, `"text":"bench"`)
	})
	after := heap()
	if n := g.srv.Requester().Stats().Contexts; n < b.N {
		b.Fatalf("%d contexts subscribed, want %d", n, b.N)
	}
	b.ReportMetric(float64(after-before)/float64(b.N), "heap-B/context")
}

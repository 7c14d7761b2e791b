package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

var platformToolNames = []string{"platform_agents", "platform_contexts", "platform_echo", "platform_whoami"}
var agentToolNames = []string{"delete_all", "echo", "slow_progress", "wait_cancel", "whoami_agent"}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(testCtx(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	sort.Strings(names)
	return names
}

func sorted(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	sort.Strings(out)
	return out
}

// TestMCPClient drives the endpoint with the official go-sdk client, once
// per protocol version: the union of tools, calls of both kinds, progress.
func TestMCPClient(t *testing.T) {
	e := startGateway(t, server.Config{})
	tok := e.token(t, store.TokenSpec{UserID: "alice"})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			var mu sync.Mutex
			var progress []float64
			cs := e.connect(t, e.mcpURL(), tok, v, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					progress = append(progress, req.Params.Progress)
					mu.Unlock()
				},
			})
			if got, want := toolNames(t, cs), sorted(platformToolNames, agentToolNames); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("tools = %v, want %v", got, want)
			}
			ctx := testCtx(t, 20*time.Second)

			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi " + v}})
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || textOf(t, res) != "hi "+v {
				t.Fatalf("echo: %+v", res)
			}

			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "platform_whoami"})
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || !strings.Contains(textOf(t, res), `"alice"`) {
				t.Fatalf("platform_whoami: %s", textOf(t, res))
			}

			p := &mcp.CallToolParams{Name: "slow_progress", Arguments: map[string]any{}}
			p.SetProgressToken("pt-" + v)
			res, err = cs.CallTool(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if textOf(t, res) != "done" {
				t.Fatalf("slow_progress: %+v", res)
			}
			poll(t, 5*time.Second, "three progress notifications", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(progress) == 3
			})
			mu.Lock()
			if fmt.Sprint(progress) != "[1 2 3]" {
				t.Errorf("progress = %v", progress)
			}
			mu.Unlock()

			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
				t.Fatalf("unknown tool: err = %v", err)
			}
		})
	}
}

// TestMCPScopes: what a token may see and call.
func TestMCPScopes(t *testing.T) {
	e := startGateway(t, server.Config{})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			ctx := testCtx(t, 20*time.Second)

			listOnly := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "bob", Scopes: []string{store.ScopeToolsList}}), v, nil)
			if got := toolNames(t, listOnly); len(got) != len(platformToolNames)+len(agentToolNames) {
				t.Fatalf("list-only token sees %v", got)
			}
			e.spy.quiet(t, "call without tools:call", func() {
				if _, err := listOnly.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err == nil {
					t.Error("a token without tools:call called a tool")
				}
			})

			ro := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "carol", ReadOnly: true}), v, nil)
			e.spy.quiet(t, "read-only token calling a destructive tool", func() {
				if _, err := ro.CallTool(ctx, &mcp.CallToolParams{Name: "delete_all"}); err == nil || !strings.Contains(err.Error(), "read-only") {
					t.Errorf("read-only token calling delete_all: err = %v", err)
				}
			})
			if res, err := ro.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ro"}}); err != nil || textOf(t, res) != "ro" {
				t.Fatalf("read-only token calling echo: %v %+v", err, res)
			}
		})
	}
}

// rawPost sends one JSON-RPC message without an MCP client.
func rawPost(t *testing.T, url, token, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// TestMCPRefusals: every way a token can fail is refused with its documented
// status before anything reaches the bus.
func TestMCPRefusals(t *testing.T) {
	e := startGateway(t, server.Config{})
	st := e.srv.Store()
	good := e.token(t, store.TokenSpec{UserID: "dave"})
	revoked := e.token(t, store.TokenSpec{UserID: "dave"})
	if err := st.RevokeToken(testCtx(t, 5*time.Second), strings.Join(strings.Split(revoked, "_")[:2], "_")); err != nil {
		t.Fatal(err)
	}
	expired := e.token(t, store.TokenSpec{UserID: "dave", TTL: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	narrowed := e.token(t, store.TokenSpec{UserID: "dave", Entities: []store.Entity{{Type: "project", ID: "p1"}}})

	for _, tc := range []struct {
		name, path, token string
		status            int
	}{
		{"no token", "/api/v1/mcp", "", http.StatusUnauthorized},
		{"bad token", "/api/v1/mcp", "tb_nothing_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", http.StatusUnauthorized},
		{"revoked token", "/api/v1/mcp", revoked, http.StatusUnauthorized},
		{"expired token", "/api/v1/mcp", expired, http.StatusUnauthorized},
		{"narrowed token, plain endpoint", "/api/v1/mcp", narrowed, http.StatusForbidden},
		{"narrowed token, other entity", "/api/v1/mcp/project/p2", narrowed, http.StatusForbidden},
		{"narrowed token, its entity", "/api/v1/mcp/project/p1", narrowed, http.StatusOK},
		{"good token", "/api/v1/mcp", good, http.StatusOK},
		{"entity with +", "/api/v1/mcp/project/a+b", good, http.StatusBadRequest},
		{"entity $SYS", "/api/v1/mcp/$SYS/x", good, http.StatusBadRequest},
		{"entity of 200 chars", "/api/v1/mcp/project/" + strings.Repeat("a", 200), good, http.StatusBadRequest},
		{"entity with %2F", "/api/v1/mcp/project/a%2Fb", good, http.StatusNotFound},
		{"entity with #", "/api/v1/mcp/project/a%23b", good, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.spy.quiet(t, tc.name, func() {
				resp, body := rawPost(t, e.base+tc.path, tc.token, initBody, nil)
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
				}
				if tc.status == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without WWW-Authenticate: Bearer")
				}
				if tc.status >= 400 && !json.Valid(body) {
					t.Errorf("error body is not JSON: %s", body)
				}
			})
		})
	}

	t.Run("tool call on another entity is refused before the bus", func(t *testing.T) {
		for _, v := range protocolVersions {
			e.spy.quiet(t, v, func() {
				c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil)
				tr := &mcp.StreamableClientTransport{Endpoint: e.base + "/api/v1/mcp/project/p2", HTTPClient: &http.Client{Transport: bearerTransport{narrowed}}}
				if cs, err := c.Connect(testCtx(t, 10*time.Second), tr, &mcp.ClientSessionOptions{ProtocolVersion: v}); err == nil {
					_, err = cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
					cs.Close()
					if err == nil {
						t.Errorf("%s: narrowed token called a tool on another entity", v)
					}
				}
			})
		}
	})
}

// TestMCPAgentOffline: with no agent, tools/list still answers with the
// platform tools, and an agent tool call fails clearly and fast.
func TestMCPAgentOffline(t *testing.T) {
	e := startGateway(t, server.Config{CallTimeout: 30 * time.Second})
	tok := e.token(t, store.TokenSpec{UserID: "erin"})
	for _, v := range protocolVersions {
		t.Run(v, func(t *testing.T) {
			cs := e.connect(t, e.mcpURL(), tok, v, nil)
			e.agentStop()
			poll(t, 10*time.Second, "agent offline", func() bool { return !agentOnline(e.srv, "tagent-1") })
			start := time.Now()
			if got := toolNames(t, cs); fmt.Sprint(got) != fmt.Sprint(platformToolNames) {
				t.Fatalf("tools with the agent offline = %v, want %v", got, platformToolNames)
			}
			res, err := cs.CallTool(testCtx(t, 20*time.Second), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError || !strings.Contains(textOf(t, res), "no expert agent is online") {
				t.Fatalf("agent tool with the agent offline: %+v", res)
			}
			// Not a timing assertion of speed: 30 s is the call deadline, and
			// the answer must come from presence, not from waiting it out.
			if el := time.Since(start); el > 15*time.Second {
				t.Fatalf("took %v", el)
			}
		})
	}
}

// TestMCPTwoUsers: concurrent sessions of two users calling the same agent
// tool each get only their own answers.
func TestMCPTwoUsers(t *testing.T) {
	e := startGateway(t, server.Config{})
	var wg sync.WaitGroup
	for i, user := range []string{"frank", "grace"} {
		v := protocolVersions[i%len(protocolVersions)]
		cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: user}), v, nil)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := testCtx(t, 30*time.Second)
				for n := range 25 {
					text := fmt.Sprintf("%s-%d-%d", user, w, n)
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
					if err != nil {
						t.Error(err)
						return
					}
					if got := textOf(t, res); got != text {
						t.Errorf("%s got %q", text, got)
					}
					res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami_agent"})
					if err != nil {
						t.Error(err)
						return
					}
					if got := textOf(t, res); !strings.HasPrefix(got, user+"/") {
						t.Errorf("%s: agent saw caller %q", user, got)
					}
				}
			}()
		}
	}
	wg.Wait()
}

// TestMCPProtocolErrors: malformed requests get the documented JSON-RPC errors.
func TestMCPProtocolErrors(t *testing.T) {
	e := startGateway(t, server.Config{})
	tok := e.token(t, store.TokenSpec{UserID: "heidi"})
	for _, tc := range []struct {
		name, body string
		status     int
		code       int
	}{
		{"parse error", `{"jsonrpc":"2.0",`, 400, -32700},
		{"batch", `[` + initBody + `]`, 400, -32600},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, 400, -32600},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, 400, -32600},
		{"no session", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, 400, -32600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawPost(t, e.mcpURL(), tok, tc.body, nil)
			var m struct {
				Error struct{ Code int } `json:"error"`
			}
			if resp.StatusCode != tc.status || json.Unmarshal(body, &m) != nil || m.Error.Code != tc.code {
				t.Fatalf("status %d body %s, want %d with code %d", resp.StatusCode, body, tc.status, tc.code)
			}
		})
	}
	t.Run("forged session", func(t *testing.T) {
		resp, body := rawPost(t, e.mcpURL(), tok, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": "eyJrIjoiYSJ9.AAAA"})
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("another user's session", func(t *testing.T) {
		resp, _ := rawPost(t, e.mcpURL(), tok, initBody, nil)
		sid := resp.Header.Get("Mcp-Session-Id")
		other := e.token(t, store.TokenSpec{UserID: "ivan"})
		resp, body := rawPost(t, e.mcpURL(), other, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": sid})
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("body too large", func(t *testing.T) {
		big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", 5<<20) + `"}}`
		resp, _ := rawPost(t, e.mcpURL(), tok, big, nil)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("foreign origin", func(t *testing.T) {
		resp, _ := rawPost(t, e.mcpURL(), tok, initBody, map[string]string{"Origin": "https://evil.example"})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("foreign host", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(testCtx(t, 5*time.Second), http.MethodPost, e.mcpURL(), bytes.NewReader([]byte(initBody)))
		req.Host = "evil.example"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/server"
)

// addAgentIdentity creates an expert-agent identity with the real CLI and
// returns the password it generated.
func addAgentIdentity(t *testing.T, dataDir, username string) string {
	t.Helper()
	if out, err := exec.Command(bins.toolbus, "init", "--data-dir", dataDir).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	out, err := exec.Command(bins.toolbus, "mqtt-user", "add", "--data-dir", dataDir,
		"--username", username, "--role", "expert-agent", "--generate-password").CombinedOutput()
	if err != nil {
		t.Fatalf("mqtt-user add: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// startAgentProc runs the reference expert agent against srv's broker and
// waits until the gateway sees it online.
func startAgentProc(t *testing.T, srv *server.Server, username, password, clientID string) *proc {
	t.Helper()
	p := startProc(t, nil, bins.expertAgent,
		"--broker-url", "tcp://"+srv.MQTTAddr().String(), "--username", username,
		"--password", password, "--client-id", clientID, "--log-format", "text")
	poll(t, 15*time.Second, "agent "+clientID+" online", func() bool { return agentOnline(srv, clientID) })
	return p
}

func agentOnline(srv *server.Server, clientID string) bool {
	for _, a := range srv.Requester().Agents() {
		if a.ClientID == clientID && a.Online {
			return true
		}
	}
	return false
}

func ctxFor(srv *server.Server, user, session string) contract.Context {
	return contract.Context{PlatformID: srv.PlatformID(), UserID: user, SessionID: session,
		EntityType: contract.NoEntity, EntityID: contract.NoEntity}
}

type callResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func decodeResult(t *testing.T, raw json.RawMessage) callResult {
	t.Helper()
	var r callResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return r
}

// TestReferenceAgentProcess drives the real expert-agent binary through the
// gateway's requester over the embedded broker's TCP listener: its tools,
// progress, many concurrent callers, and what callers see when it dies and
// when it comes back.
func TestReferenceAgentProcess(t *testing.T) {
	// The agent's name on the bus is the username it logs in with.
	const refAgent = "ref-agent"
	dataDir := t.TempDir()
	password := addAgentIdentity(t, dataDir, refAgent)
	srv := startServer(t, server.Config{DataDir: dataDir, CallTimeout: 20 * time.Second})
	agent := startAgentProc(t, srv, refAgent, password, "ref-agent-1")
	rq := srv.Requester()
	parent := t
	caller := &contract.Caller{UserID: "alice", Scopes: []string{"tools:list", "tools:call"}}

	t.Run("tools/list", func(t *testing.T) {
		raw, err := rq.ListTools(testCtx(t, 10*time.Second), ctxFor(srv, "alice", "s1"), refAgent, caller)
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Tools []struct {
				Name        string          `json:"name"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
			if len(tl.InputSchema) == 0 {
				t.Errorf("tool %s has no inputSchema", tl.Name)
			}
		}
		sort.Strings(names)
		if got, want := strings.Join(names, ","), "countdown,echo,sha256,time_now,word_count"; got != want {
			t.Fatalf("tools = %s, want %s", got, want)
		}
	})

	t.Run("tools/call", func(t *testing.T) {
		for _, tc := range []struct {
			name, tool, args, wantText string
			wantErr                    bool
		}{
			{"echo", "echo", `{"text":"hello, bus"}`, "hello, bus", false},
			{"sha256", "sha256", `{"text":"abc"}`, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", false},
			{"bad arguments", "echo", `{"txt":"x"}`, "", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				raw, err := rq.CallTool(testCtx(t, 10*time.Second), ctxFor(srv, "alice", "s1"), refAgent, caller, tc.tool, json.RawMessage(tc.args), nil)
				if err != nil {
					t.Fatal(err)
				}
				res := decodeResult(t, raw)
				if res.IsError != tc.wantErr {
					t.Fatalf("isError = %v, want %v: %s", res.IsError, tc.wantErr, raw)
				}
				if tc.wantText != "" && (len(res.Content) == 0 || res.Content[0].Text != tc.wantText) {
					t.Fatalf("result %s, want text %q", raw, tc.wantText)
				}
			})
		}
	})

	t.Run("unknown tool is a JSON-RPC error", func(t *testing.T) {
		_, err := rq.CallTool(testCtx(t, 10*time.Second), ctxFor(srv, "alice", "s1"), refAgent, caller, "no_such_tool", json.RawMessage(`{}`), nil)
		var rpcErr *jsonrpc.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
			t.Fatalf("err = %v, want a -32602 *jsonrpc.Error", err)
		}
	})

	t.Run("progress arrives before the result", func(t *testing.T) {
		var mu sync.Mutex
		var progress []float64
		params := json.RawMessage(`{"name":"countdown","arguments":{"seconds":2},"_meta":{"progressToken":"p1"}}`)
		msg, err := rq.Request(testCtx(t, 15*time.Second), ctxFor(srv, "alice", "s1"), refAgent, caller, "tools/call", params,
			func(_ string, m *jsonrpc.Message) {
				if m.Method != "notifications/progress" {
					return
				}
				var p struct {
					Token    string  `json:"progressToken"`
					Progress float64 `json:"progress"`
				}
				if err := json.Unmarshal(m.Params, &p); err != nil || p.Token != "p1" {
					t.Errorf("progress %s: %v", m.Params, err)
				}
				mu.Lock()
				progress = append(progress, p.Progress)
				mu.Unlock()
			})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(progress) != "[1 2]" {
			t.Fatalf("progress = %v, want [1 2]; result %s", progress, msg.Result)
		}
	})

	t.Run("concurrent callers get their own answers", func(t *testing.T) {
		const users, perUser = 8, 25
		ctx := testCtx(t, 30*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, users*perUser)
		for u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				user := fmt.Sprintf("user%d", u)
				c := ctxFor(srv, user, fmt.Sprintf("sess%d", u))
				for i := range perUser {
					text := fmt.Sprintf("%s-%d", user, i)
					raw, err := rq.CallTool(ctx, c, refAgent, &contract.Caller{UserID: user}, "echo", json.RawMessage(`{"text":"`+text+`"}`), nil)
					if err != nil {
						errs <- err
						return
					}
					var res callResult
					if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) != 1 || res.Content[0].Text != text {
						errs <- fmt.Errorf("%s got %s", text, raw)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("agent killed mid-call: the call fails fast, the next one at once", func(t *testing.T) {
		c := ctxFor(srv, "alice", "s2")
		done := make(chan error, 1)
		started := time.Now()
		go func() {
			_, err := rq.CallTool(testCtx(t, 30*time.Second), c, refAgent, caller, "countdown", json.RawMessage(`{"seconds":60}`), nil)
			done <- err
		}()
		poll(t, 10*time.Second, "the call to be pending", func() bool { return rq.Stats().Pending == 1 })
		_ = agent.stop(t, syscall.SIGKILL, 10*time.Second) // no DISCONNECT: only the Last Will tells
		var err error
		select {
		case err = <-done:
		case <-time.After(25 * time.Second):
			t.Fatal("the call did not end after the agent was killed")
		}
		if !errors.Is(err, requester.ErrNoAgent) {
			t.Fatalf("err = %v, want ErrNoAgent", err)
		}
		// Not a timing assertion: 20 s is the call deadline, and the
		// failure must come from the Will, not from waiting it out.
		if el := time.Since(started); el > 15*time.Second {
			t.Fatalf("the call took %v: it waited for its deadline instead of failing on the Will", el)
		}
		_, err = rq.CallTool(testCtx(t, 5*time.Second), c, refAgent, caller, "echo", json.RawMessage(`{"text":"x"}`), nil)
		if !errors.Is(err, requester.ErrNoAgent) {
			t.Fatalf("call with no agent: err = %v, want ErrNoAgent", err)
		}
		if p := rq.Stats().Pending; p != 0 {
			t.Fatalf("pending = %d after the failures", p)
		}
	})

	t.Run("agent restarted: calls succeed again", func(t *testing.T) {
		agent = startAgentProc(parent, srv, refAgent, password, "ref-agent-2") // lives beyond this subtest
		raw, err := rq.CallTool(testCtx(t, 10*time.Second), ctxFor(srv, "alice", "s2"), refAgent, caller, "echo", json.RawMessage(`{"text":"back"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res := decodeResult(t, raw); res.Content[0].Text != "back" {
			t.Fatalf("result %s", raw)
		}
	})

	t.Run("SIGTERM: the agent goes offline cleanly", func(t *testing.T) {
		if err := agent.stop(t, syscall.SIGTERM, 15*time.Second); err != nil {
			t.Fatalf("agent exit: %v", err)
		}
		poll(t, 5*time.Second, "offline presence", func() bool { return !agentOnline(srv, "ref-agent-2") })
	})
}

// TestAgentWrongPassword: the agent process is refused by the broker and
// says so, instead of running without a connection: it keeps trying (an
// operator may be fixing the password) until --connect-timeout, then
// exits non-zero.
func TestAgentWrongPassword(t *testing.T) {
	dataDir := t.TempDir()
	addAgentIdentity(t, dataDir, "ref-agent")
	srv := startServer(t, server.Config{DataDir: dataDir})
	p := startProc(t, nil, bins.expertAgent, "--broker-url", "tcp://"+srv.MQTTAddr().String(),
		"--username", "ref-agent", "--password", "not-the-password", "--connect-timeout", "2s")
	if err := p.wait(t, 20*time.Second); err == nil {
		t.Fatal("agent with a wrong password exited 0")
	}
	if n := len(srv.Requester().Agents()); n != 0 {
		t.Fatalf("gateway saw %d agents", n)
	}
}

var serveLine = regexp.MustCompile(`http://([^/\s]+)\S*\s+mqtt://(\S+)`)

// TestServeProcess runs `toolbus serve` as a process: it prints its bound
// addresses, answers /healthz and /readyz, and exits 0 on SIGTERM.
func TestServeProcess(t *testing.T) {
	lines := make(chan string, 16)
	p := startProc(t, lines, bins.toolbus, "serve", "--data-dir", t.TempDir(),
		"--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--log-format", "text")
	var httpAddr string
	timeout := time.After(20 * time.Second)
	for httpAddr == "" {
		select {
		case l := <-lines:
			if m := serveLine.FindStringSubmatch(l); m != nil {
				httpAddr = m[1]
			}
		case <-timeout:
			t.Fatal("toolbus serve did not print its addresses")
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		req, _ := http.NewRequestWithContext(testCtx(t, 5*time.Second), http.MethodGet, "http://"+httpAddr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("toolbus serve exit after SIGTERM: %v", err)
	}
}

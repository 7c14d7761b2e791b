package integration

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/bridge"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// startBridge runs a bridge in this process as instance clientID of agent
// username on srv's broker (its identity made if it is the first), for
// the upstream o names, and waits until the gateway sees it online.
func startBridge(t testing.TB, srv *server.Server, username, clientID string, o bridge.Options) {
	t.Helper()
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), username, acl.RoleExpertAgent, []byte(agentPassword)); err != nil &&
		!errors.Is(err, store.ErrExists) {
		t.Fatal(err)
	}
	url := o.Agent.BrokerURL // tcp:// to srv's broker unless set
	if url == "" {
		url = "tcp://" + srv.MQTTAddr().String()
	}
	o.Agent = expertagent.AgentOptions{BrokerURL: url, Username: username, Password: agentPassword,
		ClientID: clientID, ShutdownTimeout: 2 * time.Second}
	if o.Logger == nil {
		o.Logger = testLogger(t).WithField("test", username)
	}
	b, err := bridge.New(o)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "bridge "+clientID, b.Run)
	poll(t, 20*time.Second, "bridge "+clientID+" online", func() bool { return agentOnline(srv, clientID) })
}

// startEchoAgent runs an SDK agent with one tool, echo, beside a bridge.
func startEchoAgent(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: name, Password: agentPassword,
		ClientID: name + "-1", Logger: testLogger(t).WithField("component", name)})
	if err := a.AddTool(expertagent.Tool{Tool: tbmcp.Tool{Name: "echo", InputSchema: []byte(`{"type":"object"}`)},
		Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			return tbmcp.TextResult("echoed"), nil
		}}); err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, name, a.Run)
	poll(t, 10*time.Second, name+" online", func() bool { return agentOnline(srv, name+"-1") })
}

// bridgeClient is an MCP client of the gateway that answers the
// upstream's questions and counts progress.
type bridgeClient struct {
	cs       *mcp.ClientSession
	progress atomic.Int64
	started  chan struct{} // progress "blocking" seen
}

func connectBridgeClient(t *testing.T, e *gwEnv, version, user string) *bridgeClient {
	t.Helper()
	c := &bridgeClient{started: make(chan struct{}, 8)}
	c.cs = e.connectWith(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: user}), version, []*mcp.Root{{URI: "file:///work/" + user}}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: "forty-two"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			if r.Params.Message == "blocking" {
				c.started <- struct{}{}
				return
			}
			c.progress.Add(1)
		},
	})
	return c
}

func (c *bridgeClient) callText(t *testing.T, name string, args any) string {
	t.Helper()
	res, err := c.cs.CallTool(testCtx(t, 20*time.Second), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %q", name, textOf(t, res))
	}
	return textOf(t, res)
}

// callTexts calls a tool and returns all its text contents, joined.
func (c *bridgeClient) callTexts(t *testing.T, name string, args any) string {
	t.Helper()
	res, err := c.cs.CallTool(testCtx(t, 20*time.Second), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s: %+v, %v", name, res, err)
	}
	var texts []string
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// An MCP server on Streamable HTTP, which accepts only the bridge's
// credential, joins the bus through a bridge beside another agent: MCP
// clients of both protocol eras list the union, call its tools with
// progress, read its resource, get its prompt, answer the sampling and the
// elicitation it asks for during a call, list their roots for it, and
// cancel a call upstream; the upstream's tool list change reaches them.
func TestBridgeHTTPUpstream(t *testing.T) {
	hooks := &upstreamHooks{blockStarted: make(chan struct{}, 4), blockCancelled: make(chan struct{}, 4)}
	upstream := newUpstream(hooks)
	var unauthorized atomic.Int64
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return upstream }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer upstream-secret" {
			unauthorized.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)

	srv := startServer(t, server.Config{})
	startEchoAgent(t, srv, "other")
	// Pinned to 2025-11-25: the upstream asks for input with requests of
	// its own during the call, which the bridge holds between rounds.
	// Two instances of one agent: the round that answers a question must
	// reach the instance that holds the call.
	for _, instance := range []string{"files-1", "files-2"} {
		startBridge(t, srv, "files", instance, bridge.Options{URL: hs.URL, Header: http.Header{"Authorization": {"Bearer upstream-secret"}},
			ProtocolVersion: "2025-11-25"})
	}
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}

	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			c := connectBridgeClient(t, e, version, "hal")
			ctx := testCtx(t, 30*time.Second)
			list, err := c.cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range list.Tools {
				if !strings.HasPrefix(tool.Name, "platform_") {
					names = append(names, tool.Name)
				}
			}
			slices.Sort(names)
			if want := []string{"add", "ask", "block", "echo", "pid", "roots", "slow", "whoami"}; !slices.Equal(names, want) {
				t.Errorf("tools %v, want the upstream's and the other agent's %v", names, want)
			}
			if got := c.callText(t, "add", map[string]any{"a": 2, "b": 40}); got != "2+40=42" {
				t.Errorf("add = %q", got)
			}
			if got := c.callText(t, "echo", nil); got != "echoed" {
				t.Errorf("echo = %q", got)
			}
			if got := c.callText(t, "whoami", nil); !strings.Contains(got, `"userId":"hal"`) || strings.Contains(got, "tb_") {
				t.Errorf("whoami = %q, want the caller in _meta, no token", got)
			}

			before := c.progress.Load()
			res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Meta: mcp.Meta{"progressToken": "p-" + version}})
			if err != nil || res.IsError {
				t.Fatalf("slow: %+v, %v", res, err)
			}
			poll(t, 5*time.Second, "3 progress notifications", func() bool { return c.progress.Load()-before >= 3 })

			r, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "mem://note"})
			if err != nil || len(r.Contents) != 1 || r.Contents[0].Text != "a note" {
				t.Errorf("read mem://note: %+v, %v", r, err)
			}
			p, err := c.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "Ada"}})
			if err != nil || len(p.Messages) != 1 || p.Messages[0].Content.(*mcp.TextContent).Text != "Hello Ada" {
				t.Errorf("get greet: %+v, %v", p, err)
			}

			for range 6 {
				if got := c.callText(t, "ask", nil); got != "model said forty-two; accept is Ada" {
					t.Errorf("ask = %q, want the client's answers", got)
				}
			}
			if got := c.callText(t, "roots", nil); got != "file:///work/hal" {
				t.Errorf("roots = %q, want the client's", got)
			}

			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := c.cs.CallTool(cctx, &mcp.CallToolParams{Name: "block"})
				done <- err
			}()
			waitFor(t, hooks.blockStarted, "block started upstream")
			cancel()
			waitFor(t, hooks.blockCancelled, "the cancellation reached the upstream")
			<-done
		})
	}

	t.Run("list changed", func(t *testing.T) {
		c := connectBridgeClient(t, e, "2025-11-25", "hal")
		mcp.AddTool(upstream, &mcp.Tool{Name: "late"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text("late"), nil, nil
		})
		poll(t, 10*time.Second, "the upstream's new tool in the union", func() bool {
			list, err := c.cs.ListTools(testCtx(t, 10*time.Second), nil)
			return err == nil && slices.ContainsFunc(list.Tools, func(tool *mcp.Tool) bool { return tool.Name == "late" })
		})
		if got := c.callText(t, "late", nil); got != "late" {
			t.Errorf("late = %q", got)
		}
	})
	if n := unauthorized.Load(); n != 0 {
		t.Errorf("%d upstream requests without the bridge's credential", n)
	}
}

// A bridge behind a proxy that lets only HTTP out reaches the embedded
// broker over WebSocket (toolbus serve --mqtt-ws-addr).
func TestBridgeOverWebSocket(t *testing.T) {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newUpstream(nil) }, nil))
	t.Cleanup(hs.Close)
	srv := startServer(t, server.Config{MQTTWSAddr: "127.0.0.1:0"})
	startBridge(t, srv, "files", "files-1", bridge.Options{URL: hs.URL,
		Agent: expertagent.AgentOptions{BrokerURL: "ws://" + srv.MQTTWSAddr().String() + "/mqtt"}})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	c := connectBridgeClient(t, e, "2025-11-25", "hal")
	if got := c.callText(t, "add", map[string]any{"a": 1, "b": 2}); got != "1+2=3" {
		t.Errorf("add over a WebSocket link = %q", got)
	}
}

// A round that echoes a requestState naming this bridge but no call it
// holds gets a clear tool error, and one naming an instance that is not
// online fails at once.
func TestBridgeHeldStateUnknown(t *testing.T) {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newUpstream(nil) }, nil))
	t.Cleanup(hs.Close)
	srv := startServer(t, server.Config{})
	startBridge(t, srv, "files", "files-1", bridge.Options{URL: hs.URL, ProtocolVersion: "2025-11-25"})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	c := connectBridgeClient(t, e, "2026-07-28", "hal")

	res, err := c.cs.CallTool(testCtx(t, 20*time.Second), &mcp.CallToolParams{Name: "ask",
		RequestState: contract.HoldState("files-1", "not-a-call"), InputResponses: mcp.InputResponseMap{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(textOf(t, res), "no longer holds") {
		t.Errorf("a round for no held call = %+v, want a tool error saying so", res)
	}

	ctx := testCtx(t, 20*time.Second)
	start := time.Now()
	res, err = c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask", RequestState: contract.HoldState("files-9", "x"), InputResponses: mcp.InputResponseMap{}})
	if err == nil && !res.IsError {
		t.Errorf("a round for an instance that is not online = %+v, want a failure", res)
	}
	if dl, _ := ctx.Deadline(); !time.Now().Before(dl) {
		t.Errorf("the round for a gone instance waited %s, its whole deadline", time.Since(start))
	}
}

// A held call resumes only for the user it was started for: another
// user's round that echoes its requestState gets the same answer as for a
// call never held, and the owner's round then goes on.
func TestBridgeHeldStateOtherUser(t *testing.T) {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newUpstream(nil) }, nil))
	t.Cleanup(hs.Close)
	srv := startServer(t, server.Config{})
	startBridge(t, srv, "files", "files-1", bridge.Options{URL: hs.URL, ProtocolVersion: "2025-11-25"})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	manual := func(user string) *mcp.ClientSession {
		return e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: user}), "2026-07-28", &mcp.ClientOptions{
			MultiRoundTrip:       &mcp.MultiRoundTripOptions{Disabled: true}, // the test answers by hand
			CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) { return nil, nil },
			ElicitationHandler:   func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return nil, nil },
		})
	}
	hal, eve := manual("hal"), manual("eve")
	ctx := testCtx(t, 20*time.Second)
	first, err := hal.CallTool(ctx, &mcp.CallToolParams{Name: "ask"})
	if err != nil || !first.NeedsInput() || len(first.InputRequests) != 1 || !strings.HasPrefix(first.RequestState, "@files-1/") {
		t.Fatalf("ask = %+v, %v; want an input required result held by files-1", first, err)
	}
	var key string
	for k := range first.InputRequests {
		key = k
	}
	sample := mcp.InputResponseMap{key: &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "forty-two"}}}

	stolen, err := eve.CallTool(ctx, &mcp.CallToolParams{Name: "ask", RequestState: first.RequestState, InputResponses: sample})
	if err != nil || !stolen.IsError || !strings.Contains(textOf(t, stolen), "no longer holds") {
		t.Errorf("another user's round = %+v, %v; want the tool error of a call not held", stolen, err)
	}
	second, err := hal.CallTool(ctx, &mcp.CallToolParams{Name: "ask", RequestState: first.RequestState, InputResponses: sample})
	if err != nil || !second.NeedsInput() || second.RequestState == first.RequestState {
		t.Fatalf("the owner's round = %+v, %v; want the next question (elicitation), with a state of its own", second, err)
	}
	replay, err := hal.CallTool(ctx, &mcp.CallToolParams{Name: "ask", RequestState: first.RequestState, InputResponses: sample})
	if err != nil || !replay.IsError {
		t.Errorf("a round's state used twice = %+v, %v; want the tool error of a call not held", replay, err)
	}
	for k := range second.InputRequests {
		key = k
	}
	done, err := hal.CallTool(ctx, &mcp.CallToolParams{Name: "ask", RequestState: second.RequestState,
		InputResponses: mcp.InputResponseMap{key: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}}})
	if err != nil || done.IsError || textOf(t, done) != "model said forty-two; accept is Ada" {
		t.Errorf("the last round = %+v, %v", done, err)
	}
	// A call left held: the bridge still stops at once (startBridge's
	// cleanup checks), its upstream's question unanswered.
	if left, err := hal.CallTool(ctx, &mcp.CallToolParams{Name: "ask"}); err != nil || !left.NeedsInput() {
		t.Errorf("ask = %+v, %v; want a call held", left, err)
	}
}

// waitFor waits for one value on ch, or fails the test after 10 s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting: %s", what)
	}
}

// stderrLines collects the upstream's stderr lines the bridge logs.
type stderrLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *stderrLines) Levels() []logrus.Level { return logrus.AllLevels }

func (h *stderrLines) Fire(e *logrus.Entry) error {
	if e.Data["stream"] == "upstream-stderr" {
		h.mu.Lock()
		h.lines = append(h.lines, e.Message)
		h.mu.Unlock()
	}
	return nil
}

func (h *stderrLines) has(line string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.lines, line)
}

// A stdio upstream (this test binary, a real process) dies during a call:
// the call fails at once with a tool error, the bridge goes offline,
// starts the process again and comes back; later calls reach the new
// process. Its stderr is in the bridge's log, line by line.
func TestBridgeStdioUpstreamRestart(t *testing.T) {
	srv := startServer(t, server.Config{})
	log := testLogger(t)
	lines := &stderrLines{}
	log.Logger.AddHook(lines)
	startBridge(t, srv, "local", "local-1", bridge.Options{Command: []string{os.Args[0]}, Env: append(os.Environ(), upstreamEnv+"=stdio"),
		RestartBackoff: 2 * time.Second, Logger: log})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	c := connectBridgeClient(t, e, "2025-11-25", "hal")

	pid, err := strconv.Atoi(c.callText(t, "pid", nil))
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 5*time.Second, "the upstream's stderr in the bridge's log", func() bool { return lines.has("pid asked") })

	ctx := testCtx(t, 25*time.Second)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "block", Meta: mcp.Meta{"progressToken": "b"}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	waitFor(t, c.started, "block running upstream")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !res.IsError || !strings.Contains(textOf(t, res), "upstream") {
			t.Errorf("the call the upstream died in = %+v, want a tool error naming the upstream", res)
		}
	case <-ctx.Done():
		t.Fatal("the call the upstream died in waited for its deadline")
	}
	poll(t, 10*time.Second, "the bridge offline while its upstream is down", func() bool { return !agentOnline(srv, "local-1") })
	poll(t, 20*time.Second, "the bridge online again", func() bool { return agentOnline(srv, "local-1") })
	again, err := strconv.Atoi(c.callText(t, "pid", nil))
	if err != nil || again == pid {
		t.Errorf("pid after the restart = %d, %v; want a new process (was %d)", again, err, pid)
	}
}

// The bridge process itself is killed during a call: the call fails at
// once (its Last Will), and its upstream goes with it.
func TestBridgeProcessKilled(t *testing.T) {
	srv := startServer(t, server.Config{})
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), "local", acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	t.Setenv(upstreamEnv, "stdio") // inherited by the bridge, then by its upstream
	p := startProc(t, nil, bins.expertAgent, "bridge", "--broker-url", "tcp://"+srv.MQTTAddr().String(),
		"--username", "local", "--password", agentPassword, "--client-id", "local-1", "--log-format", "text", "--", os.Args[0])
	poll(t, 20*time.Second, "bridge online", func() bool { return agentOnline(srv, "local-1") })
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	c := connectBridgeClient(t, e, "2025-11-25", "hal")
	pid, err := strconv.Atoi(c.callText(t, "pid", nil))
	if err != nil {
		t.Fatal(err)
	}

	ctx := testCtx(t, 25*time.Second)
	done := make(chan error, 1)
	go func() {
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "block", Meta: mcp.Meta{"progressToken": "b"}})
		if err == nil && !res.IsError {
			err = errorString("block answered after its bridge was killed")
		}
		done <- err
	}()
	waitFor(t, c.started, "block running upstream")
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil && ctx.Err() != nil {
			t.Errorf("the call waited for its deadline: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the call of a killed bridge waited for its deadline")
	}
	poll(t, 10*time.Second, "the upstream gone with its bridge", func() bool { return processGone(pid) })
}

// processGone reports whether pid has exited: no such process, or a zombie
// that nobody reaped yet (an orphan's parent is init, which may not).
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || strings.Contains(string(b), ") Z ")
}

type errorString string

func (e errorString) Error() string { return string(e) }

// The official reference server, @modelcontextprotocol/server-everything
// from npm (a stdio process), bridged onto the bus beside the reference
// agent: a go-sdk client lists the union, calls its tools, receives the
// progress of its long-running tool, reads a resource, gets a prompt, and
// answers the sampling request and the elicitation it makes mid-call.
func TestBridgeServerEverything(t *testing.T) {
	argv := testenv.ServerEverything(t)
	srv := startServer(t, server.Config{})
	if _, err := srv.Store().AddIdentity(testCtx(t, 10*time.Second), "ref", acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	startAgentProc(t, srv, "ref", agentPassword, "ref-1")
	startBridge(t, srv, "everything", "everything-1", bridge.Options{Command: argv})
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}

	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			c := connectBridgeClient(t, e, version, "hal")
			// The tools that need the bridge's sampling and elicitation
			// come after initialize, each with a list_changed.
			var names []string
			poll(t, 15*time.Second, "server-everything's tools in the union", func() bool {
				list, err := c.cs.ListTools(testCtx(t, 10*time.Second), nil)
				if err != nil {
					return false
				}
				names = names[:0]
				for _, tool := range list.Tools {
					names = append(names, tool.Name)
				}
				return slices.Contains(names, "trigger-sampling-request") && slices.Contains(names, "trigger-elicitation-request")
			})
			// everything and ref both serve echo: the one online first keeps
			// the name, the other is qualified.
			if !slices.Contains(names, "echo") || !slices.Contains(names, "everything.echo") && !slices.Contains(names, "ref.echo") {
				t.Errorf("echo of everything and ref: %v", names)
			}
			for _, want := range []string{"get-sum", "trigger-long-running-operation", "word_count"} {
				if !slices.Contains(names, want) {
					t.Errorf("the union %v lacks %s", names, want)
				}
			}
			if got := c.callText(t, "get-sum", map[string]any{"a": 2, "b": 40}); !strings.Contains(got, "42") {
				t.Errorf("get-sum = %q", got)
			}
			if got := c.callText(t, "everything.echo", map[string]any{"message": "hi"}); !strings.Contains(got, "hi") {
				t.Errorf("everything.echo = %q", got)
			}

			ctx := testCtx(t, 30*time.Second)
			before := c.progress.Load()
			res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "trigger-long-running-operation",
				Arguments: map[string]any{"duration": 0.3, "steps": 3}, Meta: mcp.Meta{"progressToken": "long-" + version}})
			if err != nil || res.IsError {
				t.Fatalf("trigger-long-running-operation: %+v, %v", res, err)
			}
			poll(t, 5*time.Second, "3 progress notifications", func() bool { return c.progress.Load()-before >= 3 })

			r, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://resource/static/document/features.md"})
			if err != nil || len(r.Contents) != 1 || r.Contents[0].Text == "" {
				t.Errorf("read features.md: %+v, %v", r, err)
			}
			p, err := c.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "args-prompt", Arguments: map[string]string{"city": "Paris"}})
			if err != nil || len(p.Messages) == 0 || !strings.Contains(p.Messages[0].Content.(*mcp.TextContent).Text, "Paris") {
				t.Errorf("args-prompt: %+v, %v", p, err)
			}

			if got := c.callText(t, "trigger-sampling-request", map[string]any{"prompt": "six times seven?", "maxTokens": 10}); !strings.Contains(got, "forty-two") {
				t.Errorf("trigger-sampling-request = %q, want the client's sample", got)
			}
			if got := c.callTexts(t, "trigger-elicitation-request", nil); !strings.Contains(got, "Ada") {
				t.Errorf("trigger-elicitation-request = %q, want the client's answer", got)
			}
		})
	}
}

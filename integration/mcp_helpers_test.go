package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	tbmcp "github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// protocolVersions are the MCP versions the endpoint claims; every client
// test runs once per version.
var protocolVersions = []string{"2025-06-18", "2025-11-25", "2026-07-28"}

// gwEnv is a running gateway with its embedded broker, an expert agent
// (Agent SDK, in this process, over TCP) and a spy on the request topics.
type gwEnv struct {
	srv       *server.Server
	base      string // http://127.0.0.1:port
	agentStop func()
	spy       *reqSpy
}

func (e *gwEnv) mcpURL() string { return e.base + "/api/v1/mcp" }

// startGateway starts toolbus with the test agent connected.
func startGateway(t *testing.T, cfg server.Config) *gwEnv {
	t.Helper()
	srv := startServer(t, cfg)
	e := &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}
	e.spy = startReqSpy(t, srv)
	e.agentStop = startTestAgent(t, srv, "tagent")
	return e
}

const agentPassword = "agent-password-123"

// cancelled receives the correlation IDs of wait_cancel calls that were
// cancelled (buffered; tests drain it).
var cancelled = make(chan string, 16)

// waitStarted receives the correlation IDs of wait_cancel calls whose
// handler runs: a cancellation sent before would never reach the handler.
var waitStarted = make(chan string, 16)

// startTestAgent runs an expert agent with the tools the tests call, and
// waits until the gateway sees it online. The returned func stops it.
func startTestAgent(t *testing.T, srv *server.Server, name string) func() {
	t.Helper()
	return startTestAgentAt(t, srv, name, "tcp://"+srv.MQTTAddr().String())
}

// startTestAgentAt is startTestAgent with the agent connecting to brokerURL
// (a proxy in front of srv's broker, say).
func startTestAgentAt(t *testing.T, srv *server.Server, name, brokerURL string) func() {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := srv.Store().Identity(ctx, name); err != nil {
		if _, err := srv.Store().AddIdentity(ctx, name, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
			t.Fatal(err)
		}
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: brokerURL, Username: name, Password: agentPassword,
		ClientID: name + "-1", Name: name, Logger: testLogger(t).WithField("component", "agent"),
	})
	yes, no := true, false
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "echo",
			Description: "Returns its text.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			var a struct {
				Text string `json:"text"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			return tbmcp.TextResult(a.Text), nil
		},
	}))
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "whoami_agent",
			Description: "Says who the gateway says is calling.",
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			return tbmcp.TextResult(req.Caller.UserID + "/" + req.Context.SessionID), nil
		},
	}))
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "delete_all",
			Description: "A destructive tool.",
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &no, DestructiveHint: &yes},
		},
		Handler: func(context.Context, *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			return tbmcp.TextResult("deleted"), nil
		},
	}))
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "slow_progress",
			Description: "Reports progress three times, then answers.",
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			for i := 1; i <= 3; i++ {
				if err := req.Progress(ctx, float64(i), 3, fmt.Sprintf("step %d", i)); err != nil {
					return nil, err
				}
				time.Sleep(20 * time.Millisecond)
			}
			return tbmcp.TextResult("done"), nil
		},
	}))
	must(a.AddTool(expertagent.Tool{
		Tool: tbmcp.Tool{
			Name:        "wait_cancel",
			Description: "Waits until the call is cancelled.",
			Annotations: &tbmcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*tbmcp.CallToolResult, error) {
			select {
			case waitStarted <- req.CorrelationID:
			default:
			}
			select {
			case <-ctx.Done():
				select {
				case cancelled <- req.CorrelationID:
				default:
				}
				return nil, ctx.Err()
			case <-time.After(20 * time.Second):
				return tbmcp.TextResult("not cancelled"), nil
			}
		},
	}))
	a.Handle("prompts/list", func(context.Context, *expertagent.MethodRequest) (any, error) {
		return json.RawMessage(`{"prompts":[{"name":"greet","description":"Greets someone.","arguments":[{"name":"who","required":true}]}]}`), nil
	})
	a.Handle("prompts/get", func(_ context.Context, req *expertagent.MethodRequest) (any, error) {
		var p struct {
			Name      string            `json:"name"`
			Arguments map[string]string `json:"arguments"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil || p.Name != "greet" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown prompt"}
		}
		return map[string]any{"messages": []any{map[string]any{"role": "user",
			"content": map[string]string{"type": "text", "text": "Say hello to " + p.Arguments["who"] + "."}}}}, nil
	})
	a.Handle("resources/list", func(context.Context, *expertagent.MethodRequest) (any, error) {
		return json.RawMessage(`{"resources":[{"uri":"test://note","name":"note","mimeType":"text/plain"}]}`), nil
	})
	a.Handle("resources/read", func(_ context.Context, req *expertagent.MethodRequest) (any, error) {
		var p struct {
			URI string `json:"uri"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if p.URI != "test://note" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such resource", Data: json.RawMessage(`{"uri":` + strconv.Quote(p.URI) + `}`)}
		}
		return map[string]any{"contents": []any{map[string]string{"uri": p.URI, "mimeType": "text/plain", "text": "a note for " + req.Caller.UserID}}}, nil
	})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("agent: %v", err)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("agent not ready")
	}
	poll(t, 10*time.Second, "agent online", func() bool { return agentOnline(srv, name+"-1") })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// allRequests matches every request topic of the contract, for any agent
// and instance. No identity may subscribe to it over MQTT; the tests do on
// the embedded broker's inline bus, which the ACL does not apply to.
const allRequests = contract.TopicPrefix + "+/+/+/+/+/+/+/" + contract.Request

// reqSpy counts every tools/call request the broker routes, to any agent:
// the broker-side witness that a refused call never reached the agents. (A
// tools/list the gateway sends to learn the agents' tools is not the
// refused request.) It subscribes to allRequests on the inline bus of the
// embedded broker, which sees what the broker routes to every subscriber.
// It also keeps an MQTT connection as the expert-agent identity spy
// (client ID spy-1), which serves nothing and is never online: another
// agent identity on the broker, for the hostile tests that try to take
// its client ID.
//
// A marker request, which the spy publishes itself after the requests it
// watches for, shows that nothing more is on its way (barrier).
type reqSpy struct {
	n       atomic.Int64
	client  paho.Client
	srv     *server.Server
	seq     atomic.Int64
	markers chan string // correlation IDs of marker requests seen
}

func startReqSpy(t *testing.T, srv *server.Server) *reqSpy {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := srv.Store().AddIdentity(ctx, "spy", acl.RoleExpertAgent, []byte("spy-password-123")); err != nil {
		t.Fatal(err)
	}
	s := &reqSpy{srv: srv, markers: make(chan string, 16)}
	opts := paho.NewClientOptions().AddBroker("tcp://" + srv.MQTTAddr().String()).
		SetClientID("spy-1").SetUsername("spy").SetPassword("spy-password-123").
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	s.client = paho.NewClient(opts)
	if tok := s.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("spy connect: %v", tok.Error())
	}
	t.Cleanup(func() { s.client.Disconnect(100) })
	bus := srv.Broker().Bus()
	if err := bus.Subscribe(ctx, allRequests, func(topic string, payload []byte) {
		env, err := contract.DecodeEnvelope(payload)
		if err != nil {
			t.Errorf("spy: bad request envelope on %s: %v", topic, err)
			return
		}
		var msg struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(env.Message, &msg) != nil {
			return
		}
		switch msg.Method {
		case "tools/call":
			s.n.Add(1)
		case spyMarkerMethod:
			s.markers <- env.CorrelationID
		}
	}); err != nil {
		t.Fatalf("spy subscribe: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = bus.Unsubscribe(ctx, allRequests)
	})
	return s
}

// spyMarkerMethod is the method of the spy's marker requests.
const spyMarkerMethod = "toolbus-test/marker"

// spyMarkerTopic is where the spy's markers go: a request for an agent
// nobody is.
var spyMarkerTopic = contract.Context{PlatformID: "spy", UserID: "spy", SessionID: "marker",
	EntityType: contract.NoEntity, EntityID: contract.NoEntity}.RequestTopic("spy-marker", contract.AnyInstance)

// barrier publishes a marker request through the gateway's own bus, the
// way the gateway publishes its requests, and waits until the spy sees it:
// every request published before it has been delivered by then.
func (s *reqSpy) barrier(t *testing.T) {
	t.Helper()
	id := fmt.Sprintf("marker-%d", s.seq.Add(1))
	payload := fmt.Sprintf(`{"v":2,"correlationId":%q,"message":{"jsonrpc":"2.0","id":%q,"method":%q}}`, id, id, spyMarkerMethod)
	ctx := testCtx(t, 10*time.Second)
	if err := s.srv.Broker().Bus().Publish(ctx, spyMarkerTopic, []byte(payload)); err != nil {
		t.Fatalf("spy marker: %v", err)
	}
	for {
		select {
		case got := <-s.markers:
			if got == id {
				return
			}
		case <-ctx.Done():
			t.Fatalf("the spy did not see its marker %s", id)
		}
	}
}

// quiet asserts that no request reached the bus while f ran.
func (s *reqSpy) quiet(t *testing.T, what string, f func()) {
	t.Helper()
	before := s.n.Load()
	f()
	s.barrier(t)
	if n := s.n.Load() - before; n != 0 {
		t.Errorf("%s: %d request(s) reached the bus", what, n)
	}
}

// token mints a token in the gateway's store.
func (e *gwEnv) token(t *testing.T, spec store.TokenSpec) string {
	t.Helper()
	secret, _, err := e.srv.Store().CreateToken(testCtx(t, 5*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session with the official go-sdk client.
func (e *gwEnv) connect(t *testing.T, url, token, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return e.connectWith(t, url, token, version, nil, opts)
}

// connectWith is connect for a client with roots.
func (e *gwEnv) connectWith(t *testing.T, url, token, version string, roots []*mcp.Root, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "toolbus-it", Version: "1"}, opts)
	c.AddRoots(roots...)
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport{token}}}
	cs, err := c.Connect(testCtx(t, 15*time.Second), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect (%s): %v", version, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	return cs
}

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatalf("no content: %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content[0] is %T", res.Content[0])
	}
	return tc.Text
}

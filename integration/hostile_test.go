package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The hostile-input suite: every case sends something a careless or
// malicious client could send, then checks the documented answer, that
// nothing reached the bus that should not have (the wiretap sees every
// message the broker routes, synchronously for the gateway's own
// publishes; the spy counts tools/call requests as an agent would see
// them), and that the process still serves a normal call.

// hostileEnv is a running toolbus with its own expert agent (tools echo,
// delete_all and sleep), the request spy and a wiretap on every topic.
type hostileEnv struct {
	srv    *server.Server
	addr   string // HTTP host:port
	base   string // http://addr
	spy    *reqSpy
	tap    *wiretap
	client *http.Client
	tok    string // user hank, default scopes
	ro     string // user hank, read-only
	seq    atomic.Int64
}

const hostileAgentName = "hagent"

func startHostile(t *testing.T, cfg server.Config) *hostileEnv {
	t.Helper()
	if cfg.Logger == nil {
		// Refusals are logged at Info with what was refused; at Warn the
		// test log stays readable with megabyte names in the requests.
		cfg.Logger = testenv.LoggerAt(t, "", logrus.WarnLevel)
	}
	srv := startServer(t, cfg)
	e := &hostileEnv{srv: srv, addr: srv.HTTPAddr().String()}
	e.base = "http://" + e.addr
	e.client = newHTTPClient(t)
	e.tap = startWiretap(t, srv)
	e.spy = startReqSpy(t, srv)
	startHostileAgent(t, srv)
	ctx := testCtx(t, 5*time.Second)
	var err error
	if e.tok, _, err = srv.Store().CreateToken(ctx, store.TokenSpec{UserID: "hank"}); err != nil {
		t.Fatal(err)
	}
	if e.ro, _, err = srv.Store().CreateToken(ctx, store.TokenSpec{UserID: "hank", ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	return e
}

// startHostileAgent runs the expert agent of the suite and waits until the
// gateway sees it online.
// newHTTPClient returns a client with its own connection pool, so that
// the goroutine count can be taken without idle connections in it.
func newHTTPClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func startHostileAgent(t *testing.T, srv *server.Server) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := srv.Store().AddIdentity(ctx, hostileAgentName, acl.RoleExpertAgent, []byte(agentPassword)); err != nil {
		t.Fatal(err)
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{
		BrokerURL: "tcp://" + srv.MQTTAddr().String(), Username: hostileAgentName, Password: agentPassword,
		ClientID: hostileAgentName + "-1", Name: hostileAgentName,
		Logger: testenv.LoggerAt(t, "agent", logrus.WarnLevel),
	})
	yes, no := true, false
	tools := []expertagent.Tool{{
		Tool: mcp.Tool{
			Name:        "echo",
			Description: "Returns its text.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Text string `json:"text"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			return mcp.TextResult(a.Text), nil
		},
	}, {
		Tool: mcp.Tool{
			Name:        "delete_all",
			Description: "A destructive tool.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &no, DestructiveHint: &yes},
		},
		Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			return mcp.TextResult("deleted"), nil
		},
	}, {
		Tool: mcp.Tool{
			Name:        "sleep",
			Description: "Answers after ms milliseconds.",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &yes},
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			var a struct {
				MS int `json:"ms"`
			}
			if err := req.Bind(&a); err != nil {
				return nil, err
			}
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return mcp.TextResult("slept"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}}
	for _, tl := range tools {
		if err := a.AddTool(tl); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Run(t, "agent", a.Run)
	poll(t, 15*time.Second, "agent online", func() bool { return agentOnline(srv, hostileAgentName+"-1") })
}

// wiretap is an in-process subscription to "#" on the embedded broker: it
// sees every message routed to any subscriber, retained ones included. The
// gateway publishes through the same in-process client, so a message the
// gateway publishes while it serves a request is recorded before the
// request is answered.
type wiretap struct {
	mu   sync.Mutex
	msgs []tapped
}

type tapped struct {
	topic   string
	payload []byte
}

func startWiretap(t *testing.T, srv *server.Server) *wiretap {
	t.Helper()
	w := &wiretap{}
	bus := srv.Broker().Bus()
	if err := bus.Subscribe(testCtx(t, 5*time.Second), "#", func(topic string, payload []byte) {
		w.mu.Lock()
		w.msgs = append(w.msgs, tapped{topic, payload})
		w.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = bus.Unsubscribe(ctx, "#")
	})
	return w
}

func (w *wiretap) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.msgs)
}

func (w *wiretap) since(mark int) []tapped {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]tapped(nil), w.msgs[mark:]...)
}

// method is the JSON-RPC method of a request envelope ("" for anything else).
func (m tapped) method() string {
	env, err := contract.DecodeEnvelope(m.payload)
	if err != nil {
		return ""
	}
	var msg struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(env.Message, &msg)
	return msg.Method
}

// replied waits until each request published since mark has its final
// reply recorded too. The gateway may answer its client before the
// wiretap's handler has run for the agent's reply (both are handed the
// message by the broker), so a case ends only once the reply is in, and
// the next case's window holds nothing of it.
func (w *wiretap) replied(t *testing.T, mark int) {
	t.Helper()
	poll(t, 10*time.Second, "the agents' replies through the wiretap", func() bool {
		open := map[string]bool{}
		for _, m := range w.since(mark) {
			env, err := contract.DecodeEnvelope(m.payload)
			if err != nil {
				continue
			}
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(env.Message, &msg) != nil || len(msg.ID) == 0 {
				continue
			}
			switch {
			case strings.HasSuffix(m.topic, "/req") && msg.Method != "":
				open[env.CorrelationID] = true
			case strings.HasSuffix(m.topic, "/res") && (msg.Result != nil || msg.Error != nil):
				delete(open, env.CorrelationID)
			}
		}
		return len(open) == 0
	})
}

// quiet fails if anything was published since mark.
func (w *wiretap) quiet(t *testing.T, mark int) {
	t.Helper()
	for _, m := range w.since(mark) {
		t.Errorf("published on %s (%d bytes)", m.topic, len(m.payload))
	}
}

// noCalls fails if a tools/call was published since mark, or anything off
// the caller's own context with the suite's agent (a tools/list that fills
// the gateway's tool catalog, and its reply, are fine).
func (w *wiretap) noCalls(t *testing.T, mark int, own contract.Context) {
	t.Helper()
	for _, m := range w.since(mark) {
		if _, ok := ownTopic(own, m.topic); !ok || m.method() == "tools/call" {
			t.Errorf("published %q on %s", m.method(), m.topic)
		}
	}
}

// ownTopic reports whether topic is a request to the suite's agent or one
// of its replies, in the context own, and which (contract.Request or
// contract.Reply).
func ownTopic(own contract.Context, topic string) (kind string, ok bool) {
	rt, err := contract.ParseTopic(topic)
	if err != nil || rt.Context != own || rt.Agent != hostileAgentName {
		return "", false
	}
	return rt.Kind, true
}

// reply is one answer of the MCP endpoint, decoded loosely: a JSON-RPC
// response, the plain error shape, or nothing.
type reply struct {
	status int
	header http.Header
	raw    []byte
	hasID  bool
	id     string          // the raw id
	code   int             // JSON-RPC error code, 0 without one
	msg    string          // JSON-RPC error message
	data   json.RawMessage // JSON-RPC error data
	result json.RawMessage
	plain  string // "error" of the plain shape
}

func parseReply(t *testing.T, resp *http.Response, raw []byte) reply {
	t.Helper()
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The final response is the last event.
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				raw = []byte(d)
			}
		}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return r
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("status %d: answer is not a JSON object: %.300q", r.status, raw)
	}
	if id, ok := m["id"]; ok {
		r.hasID, r.id = true, string(id)
	}
	r.result = m["result"]
	if e := m["error"]; len(e) > 0 {
		switch e[0] {
		case '"':
			_ = json.Unmarshal(e, &r.plain)
			if _, ok := m["message"]; !ok {
				t.Errorf("plain error without message: %s", raw)
			}
		case '{':
			var je struct {
				Code    int             `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(e, &je); err != nil || je.Code == 0 || je.Message == "" {
				t.Errorf("malformed JSON-RPC error: %s", raw)
			}
			r.code, r.msg, r.data = je.Code, je.Message, je.Data
			if v := string(m["jsonrpc"]); v != `"2.0"` {
				t.Errorf(`JSON-RPC error without "jsonrpc":"2.0": %.300s`, raw)
			}
		}
	}
	return r
}

// post sends body to path with the usual MCP headers; hdr overrides them
// (an empty value removes one).
func (e *hostileEnv) post(t *testing.T, path, token, body string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t, 20*time.Second), http.MethodPost, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return e.do(t, req)
}

func (e *hostileEnv) do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return parseReply(t, resp, raw)
}

// session initializes a legacy (2025-11-25) session and returns its ID.
func (e *hostileEnv) session(t *testing.T, token string) string {
	t.Helper()
	r := e.post(t, "/api/v1/mcp", token, initBody, nil)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", r.status, r.raw)
	}
	return sid
}

// ownContext is the context of a session on the bus.
func (e *hostileEnv) ownContext(t *testing.T, sid string) contract.Context {
	t.Helper()
	claims, _, _ := strings.Cut(sid, ".")
	b, err := base64.RawURLEncoding.DecodeString(claims)
	var c struct {
		K string `json:"k"`
		U string `json:"u"`
	}
	if err != nil || json.Unmarshal(b, &c) != nil {
		t.Fatalf("session ID %q does not carry its claims", sid)
	}
	return contract.Context{PlatformID: e.srv.PlatformID(), UserID: c.U, SessionID: c.K,
		EntityType: contract.NoEntity, EntityID: contract.NoEntity}
}

func callBody(id int, name string, args any) string {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// healthy checks that the process still works: health endpoint, a new
// session, an agent tool call that reaches the agent and comes back.
func (e *hostileEnv) healthy(t *testing.T) {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, e.base+"/healthz", nil)
	if r := e.do(t, req); r.status != http.StatusOK {
		t.Fatalf("healthz: %d %s", r.status, r.raw)
	}
	mark := e.tap.mark()
	defer e.tap.replied(t, mark)
	sid := e.session(t, e.tok)
	text := fmt.Sprintf("still alive %d", e.seq.Add(1))
	before := e.spy.n.Load()
	r := e.post(t, "/api/v1/mcp", e.tok, callBody(1, "echo", map[string]string{"text": text}), map[string]string{"Mcp-Session-Id": sid})
	if r.status != http.StatusOK || r.code != 0 || !strings.Contains(string(r.result), text) || strings.Contains(string(r.result), `"isError":true`) {
		t.Fatalf("normal call after hostile input: %d %s", r.status, r.raw)
	}
	poll(t, 10*time.Second, "the spy sees the normal call", func() bool { return e.spy.n.Load() > before })
	if !agentOnline(e.srv, hostileAgentName+"-1") {
		t.Fatal("the expert agent is no longer online")
	}
}

// goroutines returns a baseline for settled.
func goroutines(e *hostileEnv) int {
	e.client.CloseIdleConnections()
	return runtime.NumGoroutine()
}

// settled waits until the goroutine count is back near base: connections
// of refused requests, stalled readers and flooding clients are all gone.
func settled(t *testing.T, e *hostileEnv, base int) {
	t.Helper()
	const slack = 8
	n := 0
	testenv.Poll(t, 15*time.Second, "goroutines back near the baseline", func() bool {
		e.client.CloseIdleConnections()
		n = runtime.NumGoroutine()
		return n <= base+slack
	})
	t.Logf("goroutines: baseline %d, now %d", base, n)
}

// dial opens a raw TCP connection to the HTTP listener.
func (e *hostileEnv) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether err is the server closing the connection.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// trickle writes one line every interval until stop closes or a write fails.
func trickle(c net.Conn, interval time.Duration, stop <-chan struct{}, line func(i int) string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(c, line(i)); err != nil {
					return
				}
			}
		}
	}()
	return done
}

// TestHostileHTTP: malformed and abusive HTTP requests on the MCP endpoint.
func TestHostileHTTP(t *testing.T) {
	e := startHostile(t, server.Config{ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: time.Second})
	e.healthy(t)
	base := goroutines(e)
	sid := e.session(t, e.tok)
	inSession := map[string]string{"Mcp-Session-Id": sid}
	spyBefore := e.spy.n.Load()

	const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	// A body of the largest size accepted, all of it one open array: the
	// decoder would recurse four million times.
	deepest := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + strings.Repeat("[", 4<<20-60) + `}}`
	bigInt := "1" + strings.Repeat("0", 1000)

	t.Run("bodies", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			body    string
			session bool
			status  int
			code    int    // JSON-RPC error code; 0: a result (or, with 202, nothing)
			id      string // the id the answer carries; "" none
		}{
			{"not JSON", `hello`, true, 400, -32700, ""},
			{"truncated", `{"jsonrpc":"2.0","id":1,`, true, 400, -32700, ""},
			{"data after the message", ping + `x`, true, 400, -32700, ""},
			{"two messages", ping + ping, true, 400, -32700, ""},
			{"empty body", ``, true, 400, -32700, ""},
			{"only whitespace", " \r\n\t ", true, 400, -32700, ""},
			{"a JSON string", `"ping"`, true, 400, -32600, ""},
			{"a JSON number", `42`, true, 400, -32600, ""},
			{"null", `null`, true, 400, -32600, ""},
			{"method is a number", `{"jsonrpc":"2.0","id":1,"method":7}`, true, 400, -32600, ""},
			{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, true, 400, -32600, "1"},
			{"no jsonrpc member", `{"id":1,"method":"ping"}`, true, 400, -32600, "1"},
			{"params is a string", `{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}`, true, 400, -32602, "1"},
			{"params is an array", `{"jsonrpc":"2.0","id":1,"method":"ping","params":[1,2]}`, true, 400, -32602, "1"},
			{"params null", `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`, true, 200, 0, "1"},

			{"10 000 levels in params", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":` + nest(10000) + `}}`, true, 400, -32700, ""},
			{"10 000 levels in the id", `{"jsonrpc":"2.0","id":` + nest(10000) + `,"method":"ping"}`, true, 400, -32700, ""},
			{"10 000 open objects", strings.Repeat(`{"a":`, 10000), true, 400, -32700, ""},
			{"4 MiB of open arrays", deepest, true, 400, -32700, ""},
			{"brackets inside strings are not nesting", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"` + strings.Repeat("[{", 5000) + `"}}`, true, 200, 0, "1"},

			{"1000-digit id", `{"jsonrpc":"2.0","id":` + bigInt + `,"method":"ping"}`, true, 200, 0, bigInt},
			{"id 1e999999999", `{"jsonrpc":"2.0","id":1e999999999,"method":"ping"}`, true, 200, 0, "1e999999999"},
			{"id -1.5e-300", `{"jsonrpc":"2.0","id":-1.5e-300,"method":"ping"}`, true, 200, 0, "-1.5e-300"},
			{"huge numbers in params", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1e999999999,"m":-` + bigInt + `.5}}`, true, 200, 0, "1"},
			{"number 0x10", `{"jsonrpc":"2.0","id":0x10,"method":"ping"}`, true, 400, -32700, ""},
			{"NaN", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":NaN}}`, true, 400, -32700, ""},

			{"invalid UTF-8 in the method", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\xffng\"}", true, 400, -32700, ""},
			{"invalid UTF-8 in params", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\xc3\x28\"}}", true, 400, -32700, ""},
			{"overlong slash in a tool name", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"ec\xc0\xafho\"}}", true, 400, -32700, ""},
			{"UTF-16 surrogate bytes", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\xed\xa0\x80\"}}", true, 400, -32700, ""},
			{"lone surrogate escape", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"\ud800"}}`, true, 200, 0, "1"},
			{"NUL escape in the method", `{"jsonrpc":"2.0","id":1,"method":"ping\u0000"}`, true, 200, -32601, "1"},
			{"BOM before the message", "\xef\xbb\xbf" + ping, true, 400, -32700, ""},

			{"duplicate id", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, true, 400, -32600, ""},
			{"method twice, other case", `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}`, true, 400, -32600, ""},
			{"duplicate tool name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"delete_all","arguments":{}}}`, true, 400, -32602, "1"},
			{"tool name twice, other case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","Name":"echo"}}`, true, 400, -32602, "1"},
			{"tool name twice, escaped", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","\u006eame":"delete_all"}}`, true, 400, -32602, "1"},
			{"duplicates inside arguments are the tool's", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a","text":"b"}}}`, true, 200, 0, "1"},

			{"batch", `[` + ping + `]`, true, 400, -32600, ""},
			{"empty batch", `[]`, true, 400, -32600, ""},
			{"batch after whitespace", "\n\t [" + ping + "," + ping + "]", true, 400, -32600, ""},

			{"string id", `{"jsonrpc":"2.0","id":"abc","method":"ping"}`, true, 200, 0, `"abc"`},
			{"empty string id", `{"jsonrpc":"2.0","id":"","method":"ping"}`, true, 200, 0, `""`},
			{"id 0", `{"jsonrpc":"2.0","id":0,"method":"ping"}`, true, 200, 0, "0"},
			{"negative id", `{"jsonrpc":"2.0","id":-7,"method":"ping"}`, true, 200, 0, "-7"},
			{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, true, 400, -32600, ""},
			{"true id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, true, 400, -32600, ""},
			{"false id", `{"jsonrpc":"2.0","id":false,"method":"ping"}`, true, 400, -32600, ""},
			{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, true, 400, -32600, ""},
			{"array id", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, true, 400, -32600, ""},
			{"no id: a notification", `{"jsonrpc":"2.0","method":"ping"}`, true, 202, 0, ""},
			{"unknown notification", `{"jsonrpc":"2.0","method":"notifications/whatever"}`, true, 202, 0, ""},
			{"cancel of nothing", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`, true, 202, 0, ""},
			{"a response to nothing", `{"jsonrpc":"2.0","id":"tb-x","result":{}}`, true, 202, 0, ""},
			{"neither request nor response", `{"jsonrpc":"2.0","id":5}`, true, 400, -32600, "5"},

			{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"foo/bar"}`, true, 200, -32601, "1"},
			{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, true, 400, -32600, "1"},
			{"rpc. method", `{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}`, true, 200, -32601, "1"},
			{"1 MiB method", `{"jsonrpc":"2.0","id":1,"method":"` + strings.Repeat("m", 1<<20) + `"}`, true, 200, -32601, "1"},
			{"server/discover on a session", `{"jsonrpc":"2.0","id":1,"method":"server/discover"}`, true, 200, -32601, "1"},
			{"unknown method before initialize", `{"jsonrpc":"2.0","id":1,"method":"foo/bar"}`, false, 400, -32600, "1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				hdr := map[string]string{}
				if tc.session {
					hdr["Mcp-Session-Id"] = sid
				}
				mark := e.tap.mark()
				r := e.post(t, "/api/v1/mcp", e.tok, tc.body, hdr)
				if r.status != tc.status || r.code != tc.code {
					t.Fatalf("status %d code %d, want %d and %d: %.300s", r.status, r.code, tc.status, tc.code, r.raw)
				}
				switch {
				case tc.status == http.StatusAccepted:
					if len(r.raw) != 0 {
						t.Errorf("202 with a body: %.300s", r.raw)
					}
				case tc.id == "" && r.hasID:
					t.Errorf("answer carries id %s, want none", r.id)
				case tc.id != "" && r.id != tc.id:
					t.Errorf("answer id %.80s, want %.80s", r.id, tc.id)
				case tc.code == 0 && r.result == nil:
					t.Errorf("no result: %.300s", r.raw)
				}
				if len(r.raw) > 4096 && tc.code != 0 {
					t.Errorf("a %d-byte error answer: client input is echoed", len(r.raw))
				}
				e.tap.replied(t, mark)
				if !strings.Contains(tc.name, "duplicates inside arguments") {
					e.tap.quiet(t, mark)
				}
			})
		}
	})

	t.Run("content types", func(t *testing.T) {
		for _, tc := range []struct {
			name, method string
			hdr          map[string]string
			status       int
			plain        string
		}{
			{"no Content-Type", http.MethodPost, map[string]string{"Content-Type": ""}, 415, "unsupported_media_type"},
			{"text/plain", http.MethodPost, map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
			{"form (a browser's cross-site POST)", http.MethodPost, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
			{"multipart", http.MethodPost, map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"},
			{"json-seq", http.MethodPost, map[string]string{"Content-Type": "application/json-seq"}, 415, "unsupported_media_type"},
			{"two media types", http.MethodPost, map[string]string{"Content-Type": "application/json, text/plain"}, 415, "unsupported_media_type"},
			{"garbage", http.MethodPost, map[string]string{"Content-Type": ";;;="}, 415, "unsupported_media_type"},
			{"Accept text/html", http.MethodPost, map[string]string{"Accept": "text/html"}, 406, "not_acceptable"},
			{"Accept text/event-stream only", http.MethodPost, map[string]string{"Accept": "text/event-stream"}, 406, "not_acceptable"},
			{"GET without text/event-stream", http.MethodGet, map[string]string{"Accept": "application/json"}, 406, "not_acceptable"},
			{"PUT", http.MethodPut, nil, 405, "method_not_allowed"},
			{"PATCH", http.MethodPatch, nil, 405, "method_not_allowed"},
			{"charset utf-8", http.MethodPost, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 200, ""},
			{"upper case", http.MethodPost, map[string]string{"Content-Type": "Application/JSON"}, 200, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req, err := http.NewRequestWithContext(testCtx(t, 10*time.Second), tc.method, e.base+"/api/v1/mcp", strings.NewReader(ping))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Authorization", "Bearer "+e.tok)
				req.Header.Set("Mcp-Session-Id", sid)
				for k, v := range tc.hdr {
					if v == "" {
						req.Header.Del(k)
					} else {
						req.Header[k] = []string{v}
					}
				}
				mark := e.tap.mark()
				r := e.do(t, req)
				if r.status != tc.status || r.plain != tc.plain {
					t.Fatalf("status %d error %q, want %d %q: %.300s", r.status, r.plain, tc.status, tc.plain, r.raw)
				}
				if tc.status == http.StatusMethodNotAllowed && r.header.Get("Allow") == "" {
					t.Error("405 without Allow")
				}
				e.tap.quiet(t, mark)
			})
		}
	})

	t.Run("slowloris on the headers", func(t *testing.T) {
		// One header line every 100 ms: the connection is cut at the
		// header timeout, whatever keeps arriving.
		c := e.dial(t)
		if _, err := io.WriteString(c, "POST /api/v1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := trickle(c, 100*time.Millisecond, stop, func(i int) string { return fmt.Sprintf("X-Slow-%d: x\r\n", i) })
		defer func() { close(stop); <-done }()
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := c.Read(make([]byte, 512))
		if n != 0 || !closedByPeer(err) {
			t.Fatalf("read %d bytes, %v: want the server to close the connection", n, err)
		}
	})

	t.Run("silent connection", func(t *testing.T) {
		c := e.dial(t)
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := c.Read(make([]byte, 512))
		if n != 0 || !closedByPeer(err) {
			t.Fatalf("read %d bytes, %v: want the server to close the connection", n, err)
		}
	})

	t.Run("slowloris on the body", func(t *testing.T) {
		c := e.dial(t)
		fmt.Fprintf(c, "POST /api/v1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nAccept: application/json\r\nMcp-Session-Id: %s\r\nContent-Length: 1000\r\n\r\n{", e.tok, sid)
		stop := make(chan struct{})
		done := trickle(c, 100*time.Millisecond, stop, func(int) string { return " " })
		defer func() { close(stop); <-done }()
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if r := parseReply(t, resp, raw); r.status != http.StatusRequestTimeout || r.plain != "request_timeout" {
			t.Fatalf("status %d %s, want 408 request_timeout", r.status, raw)
		}
		if !resp.Close {
			t.Error("the connection is kept after a body that did not arrive")
		}
	})

	t.Run("a call may outlast the read timeout", func(t *testing.T) {
		// The read timeout bounds receiving the request, not serving it.
		mark := e.tap.mark()
		defer e.tap.replied(t, mark)
		r := e.post(t, "/api/v1/mcp", e.tok, callBody(1, "sleep", map[string]int{"ms": 1300}), inSession)
		if r.status != http.StatusOK || !strings.Contains(string(r.result), "slept") {
			t.Fatalf("status %d: %.300s", r.status, r.raw)
		}
	})

	t.Run("100 MiB bodies", func(t *testing.T) {
		const size = 100 << 20
		for _, chunked := range []bool{false, true} {
			t.Run(map[bool]string{false: "with Content-Length", true: "chunked"}[chunked], func(t *testing.T) {
				c := e.dial(t)
				framing := fmt.Sprintf("Content-Length: %d", size)
				if chunked {
					framing = "Transfer-Encoding: chunked"
				}
				fmt.Fprintf(c, "POST /api/v1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
					"Content-Type: application/json\r\nAccept: application/json\r\nMcp-Session-Id: %s\r\n%s\r\n\r\n", e.tok, sid, framing)
				var sent atomic.Int64
				werr := make(chan error, 1)
				go func() {
					chunk := bytes.Repeat([]byte{' '}, 64<<10)
					if chunked {
						chunk = append(append([]byte(fmt.Sprintf("%x\r\n", len(chunk))), chunk...), "\r\n"...)
					}
					for sent.Load() < size {
						n, err := c.Write(chunk)
						sent.Add(int64(n))
						if err != nil {
							werr <- err
							return
						}
					}
					werr <- nil
				}()
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if r := parseReply(t, resp, raw); r.status != http.StatusRequestEntityTooLarge || r.plain != "body_too_large" {
					t.Fatalf("status %d %s, want 413 body_too_large", r.status, raw)
				}
				select {
				case err := <-werr:
					if err == nil {
						t.Fatalf("the server took all %d bytes", size)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("the server still reads the body after refusing it (%d bytes sent)", sent.Load())
				}
				t.Logf("refused after %d MiB sent", sent.Load()>>20)
			})
		}
	})

	t.Run("10 000 headers", func(t *testing.T) {
		many := func(line func(i int) string) string {
			var b strings.Builder
			for i := range 10000 {
				b.WriteString(line(i))
			}
			return b.String()
		}
		for _, tc := range []struct {
			name    string
			headers string
			status  int
		}{
			// 10 000 distinct headers are over the 64 KiB header limit.
			{"distinct", many(func(i int) string { return fmt.Sprintf("X-Hostile-%05d: v\r\n", i) }), http.StatusRequestHeaderFieldsTooLarge},
			// 10 000 short ones fit: the request is served.
			{"short", many(func(int) string { return "A: 1\r\n" }), http.StatusOK},
			{"two Content-Lengths", "Content-Length: 40\r\nContent-Length: 41\r\n", http.StatusBadRequest},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := e.dial(t)
				framing := fmt.Sprintf("Content-Length: %d\r\n", len(ping))
				if strings.Contains(tc.headers, "Content-Length") {
					framing = ""
				}
				mark := e.tap.mark()
				fmt.Fprintf(c, "POST /api/v1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
					"Content-Type: application/json\r\nAccept: application/json\r\nMcp-Session-Id: %s\r\n%s%s\r\n%s", e.tok, sid, tc.headers, framing, ping)
				_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
				}
				e.tap.quiet(t, mark)
			})
		}
	})

	// Two calls were meant to reach the agent: "duplicates inside
	// arguments are the tool's" and "a call may outlast the read timeout".
	e.spy.barrier(t)
	if n := e.spy.n.Load() - spyBefore; n != 2 {
		t.Errorf("%d tools/call requests reached the agents, want 2", n)
	}
	e.healthy(t)
	settled(t, e, base)
}

// TestHostileMCP: hostile values in MCP requests: tool names, arguments,
// paths, protocol versions, session IDs.
func TestHostileMCP(t *testing.T) {
	e := startHostile(t, server.Config{})
	e.healthy(t)
	base := goroutines(e)
	sid := e.session(t, e.tok)
	own := e.ownContext(t, sid)
	inSession := map[string]string{"Mcp-Session-Id": sid}
	roSID := e.session(t, e.ro)

	t.Run("tool names", func(t *testing.T) {
		for _, name := range []string{
			"+", "#", "ec/ho", "echo/+", "echo/#", "$SYS/broker/uptime", "$share/g/echo",
			allRequests, "ff/v1/mcp/+/+/+/+/+/req", "../../etc/passwd", "..", "echo/../delete_all", `..\..\echo`,
			"echo\x00", "%2e%2e%2f", " echo", "echo\n", "ECHO", strings.Repeat("a", 129),
			strings.Repeat("n", 1<<20),
			// An agent-qualified name reaches only that agent's own tool
			// (hagent.echo is hagent's echo: tool_names_test.go); of an
			// agent that is not online, or with no tool, it is unknown,
			// and the old prefix for a collision is gone.
			"spy.echo", ".echo", hostileAgentName + ".",
			"agent_echo",
		} {
			t.Run(clipName(name), func(t *testing.T) {
				mark := e.tap.mark()
				r := e.post(t, "/api/v1/mcp", e.tok, callBody(1, name, map[string]string{"text": "x"}), inSession)
				if r.status != http.StatusOK || r.code != -32602 || !strings.Contains(r.msg, "unknown tool") {
					t.Fatalf("status %d code %d: %.300s", r.status, r.code, r.raw)
				}
				if len(r.raw) > 1024 {
					t.Errorf("a %d-byte answer: the name is echoed", len(r.raw))
				}
				e.tap.replied(t, mark)
				e.tap.noCalls(t, mark, own)
			})
		}
		t.Run("empty", func(t *testing.T) {
			r := e.post(t, "/api/v1/mcp", e.tok, callBody(1, "", nil), inSession)
			if r.status != http.StatusOK || r.code != -32602 {
				t.Fatalf("status %d code %d: %.300s", r.status, r.code, r.raw)
			}
		})
	})

	t.Run("arguments", func(t *testing.T) {
		// Arguments travel in the payload, never in a topic: the agent gets
		// them as sent, on the caller's own topic, and nothing else moves.
		for _, text := range []string{
			"+", "#", "a/+/#", "$SYS/#", "$share/g/" + contract.TopicPrefix + "+/+/+/+/+/+/+/res",
			own.ReplyTopic(hostileAgentName, hostileAgentName+"-1"), contract.PresenceTopic(hostileAgentName, "x"), "ff/v1/mcp/x/y/z/_/_/res",
			"../../../../etc/passwd", `..\..\windows\system32`, "\x00", "\u2028\u2029", strings.Repeat("x", 1<<20),
		} {
			t.Run(clipName(text), func(t *testing.T) {
				mark := e.tap.mark()
				before := e.spy.n.Load()
				r := e.post(t, "/api/v1/mcp", e.tok, callBody(1, "echo", map[string]string{"text": text}), inSession)
				e.tap.replied(t, mark)
				var res callResult
				if r.status != http.StatusOK || json.Unmarshal(r.result, &res) != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Text != text {
					t.Fatalf("status %d: %.300s", r.status, r.raw)
				}
				calls := 0
				for _, m := range e.tap.since(mark) {
					kind, ok := ownTopic(own, m.topic)
					switch {
					case kind == contract.Request && m.method() == "tools/call":
						calls++
					case ok:
					default:
						t.Errorf("published on %s", m.topic)
					}
				}
				if calls != 1 {
					t.Errorf("%d tools/call published, want 1", calls)
				}
				poll(t, 5*time.Second, "the spy sees the call", func() bool { return e.spy.n.Load() == before+1 })
			})
		}
	})

	t.Run("paths", func(t *testing.T) {
		// Raw request targets: Go's client would clean them.
		for _, tc := range []struct {
			target   string
			status   int
			location string // for redirects
		}{
			// The router answers a path that is not clean with a redirect to
			// its clean form, before authentication; nothing runs.
			{"/api/v1/mcp/../../healthz", http.StatusMovedPermanently, "/api/healthz"},
			{"/api/v1/mcp/%2e%2e/%2e%2e", http.StatusMovedPermanently, "/api"},
			{"/api/v1/mcp/project/..%2F..%2F..%2Fx", http.StatusMovedPermanently, "/api/x"},
			{"/api/v1/mcp//project/p", http.StatusMovedPermanently, "/api/v1/mcp/project/p"},
			{"/api/v1/mcp/a%2Fb/c", http.StatusNotFound, ""},
			{"/api/v1/mcp/+/+", http.StatusBadRequest, ""},
			{"/api/v1/mcp/%23/x", http.StatusBadRequest, ""},
			{"/api/v1/mcp/%24SYS/x", http.StatusBadRequest, ""},
			{"/api/v1/mcp/_/_", http.StatusBadRequest, ""},
			{"/api/v1/mcp/a%00/b", http.StatusBadRequest, ""},
			{"/api/v1/mcp/%C0%AF/b", http.StatusBadRequest, ""},
			{"/api/v1/mcp/" + strings.Repeat("e", 129) + "/x", http.StatusBadRequest, ""},
		} {
			t.Run(clipName(tc.target), func(t *testing.T) {
				c := e.dial(t)
				mark := e.tap.mark()
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
					"Accept: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", tc.target, e.tok, len(initBody), initBody)
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
					t.Fatalf("status %d Location %q, want %d %q", resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
				}
				e.tap.quiet(t, mark)
			})
		}
	})

	t.Run("protocol versions", func(t *testing.T) {
		init := func(v string) string {
			return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":` + v + `,"capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`
		}
		meta := func(method, v, extra string) string {
			return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{` + extra + `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + v + `","io.modelcontextprotocol/clientCapabilities":{}}}}`
		}
		for _, tc := range []struct {
			name    string
			body    string
			hdr     map[string]string
			token   string
			status  int
			code    int
			version string // negotiated, for initialize
		}{
			{"initialize: unknown version", init(`"1999-01-01"`), nil, "", 200, 0, "2025-11-25"},
			{"initialize: older version", init(`"2024-11-05"`), nil, "", 200, 0, "2025-11-25"},
			{"initialize: empty version", init(`""`), nil, "", 200, 0, "2025-11-25"},
			{"initialize: 1 MiB version", init(`"` + strings.Repeat("9", 1<<20) + `"`), nil, "", 200, 0, "2025-11-25"},
			{"initialize: a number", init(`20251125`), nil, "", 400, -32602, ""},
			{"initialize: an object", init(`{"v":"2025-11-25"}`), nil, "", 400, -32602, ""},
			{"initialize: on the stateless wire", init(`"2026-07-28"`), map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, "", 400, -32602, ""},
			{"header: unknown version", meta("tools/list", "2099-01-01", ""), map[string]string{"Mcp-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"}, "", 400, -32022, ""},
			{"header: garbage", meta("tools/list", "garbage", ""), map[string]string{"Mcp-Protocol-Version": "garbage", "Mcp-Method": "tools/list"}, "", 400, -32022, ""},
			{"header and _meta: 60 KiB versions", meta("tools/list", strings.Repeat("7", 60<<10), ""), map[string]string{"Mcp-Protocol-Version": strings.Repeat("7", 60<<10), "Mcp-Method": "tools/list"}, "", 400, -32022, ""},
			{"header: 16 KiB", meta("tools/list", "2026-07-28", ""), map[string]string{"Mcp-Protocol-Version": strings.Repeat("x", 16<<10), "Mcp-Method": "tools/list"}, "", 400, -32020, ""},
			{"header and _meta differ", meta("tools/list", "2025-11-25", ""), map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}, "", 400, -32020, ""},
			{"header without _meta", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}, "", 400, -32602, ""},
			{"Mcp-Name differs from the body", meta("tools/call", "2026-07-28", `"name":"delete_all","arguments":{},`),
				map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}, "ro", 400, -32020, ""},
			{"Mcp-Method differs from the body", meta("tools/call", "2026-07-28", `"name":"echo","arguments":{"text":"x"},`),
				map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list", "Mcp-Name": "echo"}, "", 400, -32020, ""},
			{"legacy session, other version", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}, "", 400, -32600, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tok := e.tok
				if tc.token == "ro" {
					tok = e.ro
				}
				mark := e.tap.mark()
				r := e.post(t, "/api/v1/mcp", tok, tc.body, tc.hdr)
				if r.status != tc.status || r.code != tc.code {
					t.Fatalf("status %d code %d, want %d %d: %.300s", r.status, r.code, tc.status, tc.code, r.raw)
				}
				if tc.version != "" {
					var res struct {
						ProtocolVersion string `json:"protocolVersion"`
					}
					if json.Unmarshal(r.result, &res) != nil || res.ProtocolVersion != tc.version {
						t.Errorf("negotiated %q, want %q", res.ProtocolVersion, tc.version)
					}
				}
				if tc.code == -32022 && !strings.Contains(string(r.data), "2026-07-28") {
					t.Errorf("-32022 without the supported versions: %s", r.raw)
				}
				if len(r.raw) > 4096 {
					t.Errorf("a %d-byte answer: client input is echoed", len(r.raw))
				}
				e.tap.quiet(t, mark)
			})
		}
	})

	t.Run("session IDs", func(t *testing.T) {
		other, _, err := e.srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "ivy"})
		if err != nil {
			t.Fatal(err)
		}
		ivySID := e.session(t, other)
		ended := e.session(t, e.tok)
		req, _ := http.NewRequestWithContext(testCtx(t, 5*time.Second), http.MethodDelete, e.base+"/api/v1/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+e.tok)
		req.Header.Set("Mcp-Session-Id", ended)
		if r := e.do(t, req); r.status != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", r.status, r.raw)
		}
		claims, sig, _ := strings.Cut(sid, ".")
		flipped := []byte(sig)
		if flipped[0] == 'A' {
			flipped[0] = 'B'
		} else {
			flipped[0] = 'A'
		}
		// Claims naming hank, signed with a key the gateway does not have.
		forgedClaims := base64.RawURLEncoding.EncodeToString([]byte(`{"k":"0123456789abcdef0123456789abcdef","u":"hank","t":"tb_x","v":"2025-11-25","c":` + strconv.FormatInt(time.Now().Unix(), 10) + `}`))
		m := hmac.New(sha256.New, []byte("not the secret"))
		m.Write([]byte(forgedClaims))
		forged := forgedClaims + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))

		for _, tc := range []struct {
			name, token, id string
		}{
			{"random", e.tok, "abc"},
			{"two dots", e.tok, "a.b.c"},
			{"claims without a signature", e.tok, claims},
			{"claims, signature of another", e.tok, claims + "." + strings.SplitN(ivySID, ".", 2)[1]},
			{"signature flipped", e.tok, claims + "." + string(flipped)},
			{"signed with another key", e.tok, forged},
			{"2 KiB", e.tok, strings.Repeat("A", 2048) + ".x"},
			{"another user's", e.tok, ivySID},
			{"the same user's other token", e.ro, sid},
			{"the read-only token's, by the full token", e.tok, roSID},
			{"ended", e.tok, ended},
		} {
			t.Run(tc.name, func(t *testing.T) {
				mark := e.tap.mark()
				r := e.post(t, "/api/v1/mcp", tc.token, callBody(1, "echo", map[string]string{"text": "x"}), map[string]string{"Mcp-Session-Id": tc.id})
				if r.status != http.StatusNotFound || r.code != -32600 {
					t.Fatalf("status %d code %d, want 404 -32600: %.300s", r.status, r.code, r.raw)
				}
				e.tap.quiet(t, mark)
			})
		}
	})

	t.Run("requests before initialize", func(t *testing.T) {
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
			callBody(1, "echo", map[string]string{"text": "x"}),
			callBody(1, "platform_whoami", nil),
			`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}`,
			`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`,
		} {
			t.Run(clipName(body), func(t *testing.T) {
				mark := e.tap.mark()
				r := e.post(t, "/api/v1/mcp", e.tok, body, nil)
				if r.status != http.StatusBadRequest || r.code != -32600 {
					t.Fatalf("status %d code %d, want 400 -32600: %.300s", r.status, r.code, r.raw)
				}
				e.tap.quiet(t, mark)
			})
		}
	})

	t.Run("a read-only token and a duplicated tool name", func(t *testing.T) {
		// The session declares capabilities, which the gateway adds to the
		// params it forwards: that re-encoding must not let the agent see
		// another name than the one the gateway checked.
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"h","version":"1"}}}`
		r := e.post(t, "/api/v1/mcp", e.ro, body, nil)
		capSID := r.header.Get("Mcp-Session-Id")
		if capSID == "" {
			t.Fatalf("initialize: %d %s", r.status, r.raw)
		}
		before := e.spy.n.Load()
		for _, params := range []string{
			`{"name":"delete_all","Name":"echo","arguments":{"text":"x"}}`,
			`{"Name":"echo","name":"delete_all","arguments":{"text":"x"}}`,
			`{"name":"delete_all","NAME":"echo","arguments":{"text":"x"}}`,
		} {
			r := e.post(t, "/api/v1/mcp", e.ro, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+params+`}`, map[string]string{"Mcp-Session-Id": capSID})
			if strings.Contains(string(r.raw), "deleted") {
				t.Fatalf("a read-only token ran delete_all with %s", params)
			}
			if r.status != http.StatusBadRequest || r.code != -32602 {
				t.Errorf("%s: status %d code %d, want 400 -32602: %.300s", params, r.status, r.code, r.raw)
			}
		}
		e.spy.barrier(t)
		if n := e.spy.n.Load() - before; n != 0 {
			t.Errorf("%d call(s) reached the agents", n)
		}
	})

	e.healthy(t)
	settled(t, e, base)
}

// TestHostileSessionExpiry: an expired session is refused like an unknown one.
func TestHostileSessionExpiry(t *testing.T) {
	srv := startServer(t, server.Config{SessionTTL: 300 * time.Millisecond, Logger: testenv.LoggerAt(t, "", logrus.WarnLevel)})
	e := &hostileEnv{srv: srv, addr: srv.HTTPAddr().String(), client: newHTTPClient(t)}
	e.base = "http://" + e.addr
	tok, _, err := srv.Store().CreateToken(testCtx(t, 5*time.Second), store.TokenSpec{UserID: "hank"})
	if err != nil {
		t.Fatal(err)
	}
	sid := e.session(t, tok)
	// Expiry is by the clock: the session must have been idle for longer
	// than its TTL, so this waits out the TTL once rather than polling
	// (each request would use the session and so keep it alive).
	time.Sleep(600 * time.Millisecond)
	r := e.post(t, "/api/v1/mcp", tok, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Mcp-Session-Id": sid})
	if r.status != http.StatusNotFound || r.code != -32600 {
		t.Fatalf("status %d code %d, want 404 -32600: %s", r.status, r.code, r.raw)
	}
}

// mqttClient connects a paho client to the embedded broker.
func mqttClient(t *testing.T, srv *server.Server, user, pass, clientID string, opt func(*paho.ClientOptions)) (paho.Client, error) {
	t.Helper()
	return mqttClientAt(t, srv.MQTTAddr().String(), user, pass, clientID, opt)
}

// suback subscribes to filters (QoS 1) and returns the granted QoS or
// refusal code of each.
func suback(t *testing.T, c paho.Client, filters []string, h paho.MessageHandler) map[string]byte {
	t.Helper()
	m := make(map[string]byte, len(filters))
	for _, f := range filters {
		m[f] = 1
	}
	tok := c.SubscribeMultiple(m, h)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return tok.(*paho.SubscribeToken).Result()
}

// barrier publishes a marker from c and waits until the wiretap has it: the
// broker handles one client's packets in order, so whatever c published
// before has been routed (or refused) by then. The marker goes to c's own
// probe topic, which every identity may use, whatever its role.
func barrier(t *testing.T, e *hostileEnv, c paho.Client) {
	t.Helper()
	marker := fmt.Sprintf("barrier-%d", e.seq.Add(1))
	opts := c.OptionsReader()
	topic := acl.ProbeTopic(opts.Username(), barrierLevel)
	mark := e.tap.mark()
	if tok := c.Publish(topic, 0, false, marker); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("barrier publish: %v", tok.Error())
	}
	poll(t, 10*time.Second, "the barrier through the broker", func() bool {
		for _, m := range e.tap.since(mark) {
			if m.topic == topic && string(m.payload) == marker {
				return true
			}
		}
		return false
	})
}

// barrierLevel is the last level of the barriers' probe topics.
const barrierLevel = "barrier"

// isBarrier reports whether topic is a barrier's.
func isBarrier(topic string) bool {
	return strings.HasPrefix(topic, "ff/v2/probe/") && strings.HasSuffix(topic, "/"+barrierLevel)
}

// TestHostileMQTT: hostile MQTT clients against a running gateway: forged
// client IDs, forged presence, subscription floods, retained messages on
// the contract's topics, $SYS and $share abuse, wildcard filters.
func TestHostileMQTT(t *testing.T) {
	e := startHostile(t, server.Config{})
	e.healthy(t)
	ctx := testCtx(t, 10*time.Second)
	const pass = "mallory-password-1"
	for _, id := range []struct {
		name string
		role acl.Role
	}{{"mallory", acl.RoleExpertAgent}, {"pat", acl.RolePlatform}} {
		if _, err := e.srv.Store().AddIdentity(ctx, id.name, id.role, []byte(pass)); err != nil {
			t.Fatal(err)
		}
	}
	base := goroutines(e)
	agentID := hostileAgentName + "-1"

	t.Run("forged client IDs", func(t *testing.T) {
		for _, tc := range []struct{ user, pass, clientID string }{
			{"mallory", pass, "inline"},                 // the gateway's own in-process client
			{"pat", pass, "inline"},                     // a platform identity, same
			{hostileAgentName, agentPassword, "inline"}, // the agent's own credentials
			{"mallory", pass, agentID},                  // the expert agent's
			{"mallory", pass, "spy-1"},                  // another agent identity's
			{"pat", pass, agentID},                      // a platform identity taking an agent's
			{"nobody", pass, "mallory-new"},             // no such identity
			{"mallory", "wrong-password-1", "mallory-x"},
		} {
			t.Run(tc.user+" as "+tc.clientID, func(t *testing.T) {
				if _, err := mqttClient(t, e.srv, tc.user, tc.pass, tc.clientID, nil); err == nil {
					t.Fatalf("%s connected as %s", tc.user, tc.clientID)
				}
				if !agentOnline(e.srv, agentID) {
					t.Fatal("the agent was cut off")
				}
				if !e.spy.client.IsConnected() {
					t.Fatal("the spy was cut off")
				}
			})
		}
		e.healthy(t)
	})

	t.Run("forged presence", func(t *testing.T) {
		// A Will on any presence topic but the client's own is refused at
		// login: the agent's, one under mallory's name with another client
		// ID, one under the agent's name with mallory's client ID, or one
		// in the retired v1 tree.
		for _, will := range []string{
			contract.PresenceTopic(hostileAgentName, agentID),
			contract.PresenceTopic("mallory", agentID),
			contract.PresenceTopic(hostileAgentName, "mallory-w"),
			"ff/v1/mcp/agents/" + agentID + "/status",
			"ff/v1/mcp/agents/mallory-w/status",
		} {
			if _, err := mqttClient(t, e.srv, "mallory", pass, "mallory-w", func(o *paho.ClientOptions) {
				o.SetWill(will, `{"status":"offline"}`, 1, true)
			}); err == nil {
				t.Fatalf("a Will on %s was accepted", will)
			}
		}
		c, err := mqttClient(t, e.srv, "mallory", pass, "mallory-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		own := contract.PresenceTopic("mallory", "mallory-1")
		mark := e.tap.mark()
		for _, p := range []struct {
			topic, payload string
			retain         bool
		}{
			{contract.PresenceTopic(hostileAgentName, agentID), `{"status":"offline","clientId":"` + agentID + `"}`, true},
			{contract.PresenceTopic(hostileAgentName, agentID), ``, true},                                          // clearing the retained status
			{contract.PresenceTopic(hostileAgentName, "mallory-1"), `{"status":"offline"}`, true},                  // the agent's name, its own client ID
			{contract.PresenceTopic("mallory", agentID), `{"status":"offline"}`, true},                             // its own name, the agent's client ID
			{contract.PresenceTopic("mallory", "mallory-2"), `{"status":"online"}`, true},                          // another instance of its own name
			{own + "/x", `{"status":"online"}`, true},                                                              // below its own
			{"ff/v1/mcp/agents/" + agentID + "/status", `{"status":"offline","clientId":"` + agentID + `"}`, true}, // the retired tree
			{"ff/v1/mcp/agents/mallory-1/status", `{"status":"online","clientId":"mallory-1"}`, true},
		} {
			c.Publish(p.topic, 0, p.retain, p.payload)
		}
		// Its own presence topic is allowed, but what it says is about itself
		// only, whatever the payload claims.
		c.Publish(own, 0, true, `{"status":"offline","clientId":"`+agentID+`","name":"`+hostileAgentName+`"}`)
		c.Publish(own, 0, false, strings.Repeat("{", 100000))
		barrier(t, e, c)
		for _, m := range e.tap.since(mark) {
			if m.topic != own && !isBarrier(m.topic) {
				t.Errorf("forged publish delivered on %s: %.100s", m.topic, m.payload)
			}
		}
		if !agentOnline(e.srv, agentID) {
			t.Fatal("the agent looks offline after forged presence")
		}
		for _, a := range e.srv.Requester().Agents() {
			if a.ClientID == agentID && a.Agent != hostileAgentName || a.Agent == hostileAgentName && a.ClientID != agentID {
				t.Errorf("the gateway knows an instance %s of %s", a.ClientID, a.Agent)
			}
		}
		// Clear mallory's retained status again.
		c.Publish(own, 1, true, "").WaitTimeout(5 * time.Second)
		e.healthy(t)
	})

	t.Run("subscription flood", func(t *testing.T) {
		clients := e.srv.Broker().ClientCount()
		const flooder = "mallory-flood"
		c, err := mqttClient(t, e.srv, "mallory", pass, flooder, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wrong atomic.Value
		// paho hands a message to the handler of every filter it subscribed
		// that matches the topic, refused ones included: one delivery may
		// come here many times.
		markers := make(chan string, 1024)
		h := func(_ paho.Client, m paho.Message) {
			rt, err := contract.ParseTopic(m.Topic())
			if err != nil || rt.Kind != contract.Request || rt.Agent != "mallory" {
				wrong.Store(m.Topic())
				return
			}
			if rt.Context.PlatformID == "flood" {
				select {
				case markers <- rt.Instance + " " + rt.Context.SessionID:
				default:
				}
			}
		}
		granted, refused := 0, 0
		for p := range 10 {
			want := map[string]bool{}
			var filters []string
			for i := range 100 {
				n := p*100 + i
				var f string
				switch n % 10 {
				// Granted: its own requests, each filter another context.
				case 0:
					f = fmt.Sprintf("$share/mallory/ff/v2/mcp/mallory/_/+/+/%d/+/+/req", n)
				case 1:
					f = fmt.Sprintf("ff/v2/mcp/mallory/_/+/+/%d/+/+/req", n)
				case 2:
					f = fmt.Sprintf("ff/v2/mcp/mallory/%s/+/+/%d/+/+/req", flooder, n)
				// Refused.
				case 3:
					f = fmt.Sprintf("$share/flood%d/ff/v2/mcp/mallory/_/+/+/+/+/+/req", n) // a group not its name
				case 4:
					f = fmt.Sprintf("$share/%s/ff/v2/mcp/%s/_/+/+/%d/+/+/req", hostileAgentName, hostileAgentName, n) // the agent's pool
				case 5:
					f = fmt.Sprintf("ff/v2/mcp/%s/_/+/+/%d/+/+/req", hostileAgentName, n) // the agent's requests
				case 6:
					f = fmt.Sprintf("ff/v2/mcp/+/+/+/+/%d/+/+/res", n) // replies
				case 7:
					f = fmt.Sprintf("ff/v1/mcp/%d/#", n) // the retired tree
				case 8:
					f = fmt.Sprintf("$SYS/%d/#", n)
				default:
					f = fmt.Sprintf("elsewhere/%d/#", n) // no operator rule grants it
				}
				want[f] = n%10 < 3
				filters = append(filters, f)
			}
			for f, code := range suback(t, c, filters, h) {
				if code == 0x80 {
					refused++
				} else {
					granted++
				}
				if (code != 0x80) != want[f] {
					t.Errorf("subscribing to %s: code %#x", f, code)
				}
			}
		}
		if granted != 300 || refused != 700 {
			t.Errorf("granted %d, refused %d; want 300 and 700", granted, refused)
		}
		e.healthy(t)
		// The flooder's filters cover its own requests only: the gateway's
		// requests for the agent reached none of them. Requests for
		// mallory, published after those as the gateway publishes, come
		// through: by then anything else would have.
		bus := e.srv.Broker().Bus()
		for _, m := range []struct{ instance, session string }{{"_", "0"}, {"_", "1"}, {flooder, "2"}} {
			c := contract.Context{PlatformID: "flood", UserID: "u", SessionID: m.session, EntityType: contract.NoEntity, EntityID: contract.NoEntity}
			payload := `{"v":2,"correlationId":"c-flood","message":{"jsonrpc":"2.0","id":"c-flood","method":"ping"}}`
			if err := bus.Publish(testCtx(t, 5*time.Second), c.RequestTopic("mallory", m.instance), []byte(payload)); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for len(seen) < 3 {
			select {
			case m := <-markers:
				seen[m] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("the flooder got %v of its three requests", seen)
			}
		}
		if !seen["_ 0"] || !seen["_ 1"] || !seen[flooder+" 2"] {
			t.Errorf("the flooder got %v", seen)
		}
		if w := wrong.Load(); w != nil {
			t.Errorf("the flooder received %s", w)
		}
		c.Disconnect(100)
		poll(t, 10*time.Second, "the flooder gone", func() bool { return e.srv.Broker().ClientCount() <= clients })
		e.healthy(t)
	})

	t.Run("retained messages on the contract's topics", func(t *testing.T) {
		c, err := mqttClient(t, e.srv, "mallory", pass, "mallory-r", nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := mqttClient(t, e.srv, "pat", pass, "pat-r", nil)
		if err != nil {
			t.Fatal(err)
		}
		sid := e.session(t, e.tok)
		own := e.ownContext(t, sid)
		mark := e.tap.mark()
		// Retained replies waiting in the caller's context before its first
		// call (under mallory's own name, where it may publish but not
		// retain, and under the agent's), and retained requests for every
		// agent instance that comes: from mallory, and from a platform
		// identity, which may publish requests but not retain them.
		reply := `{"v":2,"correlationId":"c-forged","message":{"jsonrpc":"2.0","id":"c-forged","result":{"content":[{"type":"text","text":"forged"}]}}}`
		request := `{"v":2,"correlationId":"c-x","message":{"jsonrpc":"2.0","id":"c-x","method":"tools/call","params":{"name":"delete_all"}}}`
		c.Publish(own.ReplyTopic("mallory", "mallory-r"), 0, true, reply)
		c.Publish(own.ReplyTopic("mallory", "mallory-r"), 1, true, reply).WaitTimeout(5 * time.Second)
		c.Publish(own.ReplyTopic(hostileAgentName, agentID), 0, true, reply)
		c.Publish(own.RequestTopic(hostileAgentName, contract.AnyInstance), 0, true, request)
		p.Publish(own.RequestTopic(hostileAgentName, contract.AnyInstance), 0, true, request)
		p.Publish(own.RequestTopic(hostileAgentName, contract.AnyInstance), 1, true, request).WaitTimeout(5 * time.Second)
		p.Publish(own.RequestTopic(hostileAgentName, agentID), 1, true, request).WaitTimeout(5 * time.Second)
		p.Publish(own.RequestTopic("mallory", contract.AnyInstance), 1, true, request).WaitTimeout(5 * time.Second)
		barrier(t, e, c)
		barrier(t, e, p)
		for _, m := range e.tap.since(mark) {
			if !isBarrier(m.topic) {
				t.Errorf("delivered on %s: %.100s", m.topic, m.payload)
			}
		}
		// What a new subscriber of the whole tree is sent: presence only;
		// of the retired tree, nothing.
		bus := e.srv.Broker().Bus()
		for _, tree := range []string{contract.TopicPrefix + "#", "ff/v1/mcp/#"} {
			var retained []string
			var mu sync.Mutex
			if err := bus.Subscribe(testCtx(t, 5*time.Second), tree, func(topic string, _ []byte) {
				mu.Lock()
				retained = append(retained, topic)
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
			_ = bus.Unsubscribe(testCtx(t, 5*time.Second), tree)
			mu.Lock()
			for _, topic := range retained {
				if _, _, ok := contract.ParsePresenceTopic(topic); !ok {
					t.Errorf("retained message on %s", topic)
				}
			}
			mu.Unlock()
		}
		// The caller's first call gets the agent's answer.
		defer e.tap.replied(t, e.tap.mark())
		r := e.post(t, "/api/v1/mcp", e.tok, callBody(1, "echo", map[string]string{"text": "genuine"}), map[string]string{"Mcp-Session-Id": sid})
		if !strings.Contains(string(r.result), "genuine") {
			t.Fatalf("call after retained forgeries: %d %s", r.status, r.raw)
		}
	})

	t.Run("filters", func(t *testing.T) {
		const malloryID = "mallory-f"
		c, err := mqttClient(t, e.srv, "mallory", pass, malloryID, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := mqttClient(t, e.srv, "pat", pass, "pat-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		plat := e.srv.PlatformID()
		// The context whose replies pat may read.
		patCtx := contract.Context{PlatformID: plat, UserID: "pat-user", SessionID: "pat-session", EntityType: contract.NoEntity, EntityID: contract.NoEntity}
		// What the granted filters may bring: requests for mallory to
		// mallory; presence and patCtx's replies to pat. Anything else came
		// through a filter that should have been refused.
		var leaks sync.Map
		hAgent := func(_ paho.Client, m paho.Message) {
			if rt, err := contract.ParseTopic(m.Topic()); err != nil || rt.Kind != contract.Request || rt.Agent != "mallory" {
				leaks.Store("mallory: "+m.Topic(), true)
			}
		}
		hPlatform := func(_ paho.Client, m paho.Message) {
			if _, _, ok := contract.ParsePresenceTopic(m.Topic()); ok {
				return
			}
			if rt, err := contract.ParseTopic(m.Topic()); err == nil && rt.Kind == contract.Reply && rt.Context == patCtx {
				return
			}
			leaks.Store("pat: "+m.Topic(), true)
		}
		ownPool := contract.RequestFilter("mallory", contract.AnyInstance)
		for _, tc := range []struct {
			who     string
			filters []string
			granted bool
		}{
			{"agent", []string{
				// Whole trees.
				"#", "+", "+/#", "ff/#", "ff/v2/#", "ff/v2/mcp/#", "ff/+/mcp/#", "ff/v2/+/#", "+/v2/mcp/+/+/+/+/+/+/+/req",
				// Every agent's requests, replies and presence.
				allRequests, "ff/v2/mcp/+/+/+/+/+/+/+/res", "ff/v2/mcp/+/+/+/+/+/+/+/+", "ff/v2/mcp/+/+/+/+/+/+/+/#", "ff/v2/mcp/+/+/+/#",
				contract.PresenceFilter, "ff/v2/mcp/mallory/+/status", contract.PresenceTopic("mallory", malloryID),
				// Another agent's requests, plain or by joining its pool.
				contract.RequestFilter(hostileAgentName, contract.AnyInstance), contract.RequestFilter(hostileAgentName, agentID),
				contract.RequestFilter(hostileAgentName, "+"), contract.SharedRequestFilter(hostileAgentName),
				"$share/mallory/" + contract.RequestFilter(hostileAgentName, contract.AnyInstance),
				"$share/" + hostileAgentName + "/" + ownPool,
				"ff/v2/mcp/+/_/+/+/+/+/+/req", "ff/v2/mcp/+/" + malloryID + "/+/+/+/+/+/req",
				// Its own requests, but for any instance or another
				// instance, or with more than the requests.
				contract.RequestFilter("mallory", "+"), contract.RequestFilter("mallory", "mallory-other"),
				"ff/v2/mcp/mallory/#", "ff/v2/mcp/mallory/_/#", ownPool + "/#", "ff/v2/mcp/mallory/_/+/+/+/+/#",
				"ff/v2/mcp/mallory/_/+/+/+/+/+/+", "ff/v2/mcp/mallory/_/+/+/+/+/+/res",
				contract.TopicPrefix + "mallory/" + malloryID + "/+/+/+/+/+/res",
				// Foreign or malformed $share.
				"$share/g/" + ownPool, "$share/+/" + ownPool, "$share//" + ownPool, "$share/mallory", "$share/mallory/",
				"$SHARE/mallory/" + ownPool, "$share/mallory/" + ownPool + "/#", "$share/mallory/#",
				// $SYS.
				"$SYS/#", "$SYS/broker/clients/connected", "$share/g/$SYS/#", "$share/mallory/$SYS/#",
				// Probe topics other than its own, exact ones.
				"ff/v2/probe/#", "ff/v2/probe/+/+", acl.ProbeTopic(hostileAgentName, "x"), acl.ProbeTopic("mallory", "+"), "ff/v2/probe/mallory/#",
				// The retired v1 tree, the filters it granted agents included.
				"ff/v1/#", "ff/v1/mcp/#", "ff/v1/mcp/+/+/+/+/+/req", "$share/mallory/ff/v1/mcp/+/+/+/+/+/req", "$share/g/ff/v1/mcp/+/+/+/+/+/req",
				"ff/v1/mcp/+/+/+/+/+/res", "ff/v1/mcp/agents/+/status",
			}, false},
			{"agent", []string{
				ownPool, contract.SharedRequestFilter("mallory"), contract.RequestFilter("mallory", malloryID),
				"$share/mallory/" + contract.RequestFilter("mallory", malloryID),
				"ff/v2/mcp/mallory/_/" + plat + "/+/+/_/_/req", acl.ProbeTopic("mallory", "x"),
			}, true},
			{"platform", []string{
				"#", "ff/#", "ff/v2/mcp/#", allRequests, "ff/v2/mcp/+/+/+/+/+/+/+/res", "ff/v2/mcp/+/+/+/+/+/+/+/#",
				// Replies of more than one context, or shared, or with more
				// than the replies.
				"ff/v2/mcp/+/+/" + plat + "/+/+/_/_/res", "ff/v2/mcp/+/+/" + plat + "/pat-user/+/_/_/res",
				"ff/v2/mcp/" + hostileAgentName + "/+/" + plat + "/+/+/_/_/res",
				"$share/pat/" + patCtx.ReplyFilter(), "$share/g/" + patCtx.ReplyFilter(), patCtx.ReplyFilter() + "/#",
				"ff/v2/mcp/+/+/" + patCtx.Levels() + "/+",
				// Requests.
				contract.RequestFilter(hostileAgentName, contract.AnyInstance), contract.SharedRequestFilter(hostileAgentName),
				patCtx.RequestTopic(hostileAgentName, contract.AnyInstance),
				// Presence in other shapes.
				"ff/v2/mcp/+/" + agentID + "/status", "ff/v2/mcp/+/+/status/#", "$share/pat/" + contract.PresenceFilter,
				"$SYS/#", acl.ProbeTopic(hostileAgentName, "x"),
				// The retired v1 tree.
				"ff/v1/mcp/#", "ff/v1/mcp/+/+/+/+/+/res", "ff/v1/mcp/" + plat + "/pat-user/pat-session/_/_/res", "ff/v1/mcp/agents/+/status",
			}, false},
			{"platform", []string{
				// One context's replies: from any agent (the filter
				// gateways use), or narrowed to one agent or instance.
				patCtx.ReplyFilter(), "ff/v2/mcp/" + hostileAgentName + "/+/" + patCtx.Levels() + "/res",
				patCtx.ReplyTopic(hostileAgentName, agentID),
				contract.PresenceFilter, "ff/v2/mcp/" + hostileAgentName + "/+/status",
				contract.PresenceTopic(hostileAgentName, agentID), acl.ProbeTopic("pat", "x"),
			}, true},
		} {
			cl, h := c, paho.MessageHandler(hAgent)
			if tc.who == "platform" {
				cl, h = p, hPlatform
			}
			for f, code := range suback(t, cl, tc.filters, h) {
				if (code != 0x80) != tc.granted {
					t.Errorf("%s subscribing to %q: code %#x", tc.who, f, code)
				}
			}
		}
		// Forged requests, replies and presence, and wildcard publishes,
		// reach nobody.
		mark := e.tap.mark()
		spyBefore := e.spy.n.Load()
		sid := e.session(t, e.tok)
		own := e.ownContext(t, sid)
		forged := `{"v":2,"correlationId":"c-x","message":{"jsonrpc":"2.0","id":"c-x","method":"tools/call","params":{"name":"delete_all"}}}`
		for _, topic := range []string{
			// An agent publishes no requests, not even its own.
			own.RequestTopic(hostileAgentName, contract.AnyInstance), own.RequestTopic(hostileAgentName, agentID),
			own.RequestTopic("mallory", contract.AnyInstance), own.RequestTopic("mallory", malloryID),
			// Nor replies under another name or another client ID.
			own.ReplyTopic(hostileAgentName, agentID), own.ReplyTopic(hostileAgentName, malloryID), own.ReplyTopic("mallory", agentID),
			// Nor anything else under the tree.
			contract.PresenceTopic("mallory", malloryID) + "/x", "ff/v2/mcp/mallory/" + malloryID + "/x", "ff/v2/other/x",
			acl.ProbeTopic(hostileAgentName, "x"), "ff/v2/probe/mallory", "ff/v2/probe/mallory/x/y",
			"$SYS/broker/uptime", "$share/g/" + own.RequestTopic(hostileAgentName, contract.AnyInstance),
			"$share/mallory/" + own.ReplyTopic("mallory", malloryID),
			// Nor in the retired tree.
			"ff/v1/mcp/" + own.Levels() + "/req", "ff/v1/mcp/" + own.Levels() + "/res", "ff/v1/mcp/agents/" + malloryID + "/status",
		} {
			c.Publish(topic, 0, false, forged)
		}
		// A platform identity publishes requests, but neither replies nor
		// presence, in nobody's name; nor v1 requests.
		for _, topic := range []string{
			own.ReplyTopic(hostileAgentName, agentID), own.ReplyTopic("pat", "pat-1"),
			contract.PresenceTopic(hostileAgentName, agentID), contract.PresenceTopic("pat", "pat-1"),
			"ff/v1/mcp/" + own.Levels() + "/req", acl.ProbeTopic("mallory", "x"),
		} {
			p.Publish(topic, 0, false, forged)
		}
		barrier(t, e, c)
		barrier(t, e, p)
		// A topic name with a wildcard is a protocol violation: the broker
		// drops the connection.
		c.Publish(allRequests, 0, false, forged)
		poll(t, 10*time.Second, "the broker to drop a client publishing to a wildcard", func() bool { return !c.IsConnected() })
		for _, m := range e.tap.since(mark) {
			if !isBarrier(m.topic) {
				t.Errorf("forged publish delivered on %s", m.topic)
			}
		}
		e.spy.barrier(t)
		if n := e.spy.n.Load() - spyBefore; n != 0 {
			t.Errorf("%d forged request(s) reached the agents", n)
		}
		e.healthy(t)
		leaks.Range(func(k, _ any) bool {
			t.Errorf("a refused filter received %s", k)
			return true
		})
	})

	e.healthy(t)
	settled(t, e, base)
}

// clipName makes a subtest name of a hostile value.
func clipName(s string) string {
	s = strconv.QuoteToASCII(s)
	if len(s) > 40 {
		s = s[:40] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}

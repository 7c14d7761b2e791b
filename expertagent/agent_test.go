package expertagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// agServeTools are the tools of the dispatch tests.
func agServeTools() []expertagent.Tool {
	return []expertagent.Tool{
		agEchoTool(),
		{
			Tool: mcp.Tool{
				Name:         "stats",
				Title:        "Stats",
				Description:  "Structured only.",
				OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
				Annotations:  &mcp.ToolAnnotations{Title: "Stats", ReadOnlyHint: new(true), IdempotentHint: new(true), OpenWorldHint: new(false)},
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{StructuredContent: map[string]int{"n": 3}}, nil
			},
		},
		{
			Tool: mcp.Tool{
				Name: "fail",
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return nil, fmt.Errorf("cannot write report: %w", errAgTest)
			},
		},
		{
			Tool: mcp.Tool{
				Name: "panic",
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				panic("boom")
			},
		},
		{
			Tool: mcp.Tool{
				Name: "rpc_error",
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return nil, &jsonrpc.Error{Code: -32042, Message: "needs elicitation"}
			},
		},
		{
			Tool: mcp.Tool{
				Name: "nothing",
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return nil, nil
			},
		},
		{
			Tool: mcp.Tool{
				Name:        "whoami",
				Annotations: &mcp.ToolAnnotations{ReadOnlyHint: new(true)},
			},
			Handler: func(_ context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return mcp.TextResult(req.Caller.UserID + " " + req.Context.SessionID + " " + req.CorrelationID), nil
			},
		},
		{
			Tool: mcp.Tool{
				Name:        "write",
				Annotations: &mcp.ToolAnnotations{ReadOnlyHint: new(false), DestructiveHint: new(true)},
			},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return mcp.TextResult("written"), nil
			},
		},
	}
}

func TestAgentToolsList(t *testing.T) {
	e := agStartBroker(t)
	e.startAgent(t, expertagent.AgentOptions{Name: "lister"}, agServeTools()...)
	c := e.newCaller(t)

	var list struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(c.call(t, "tools/list", map[string]any{}), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		var n string
		_ = json.Unmarshal(tool["name"], &n)
		names = append(names, n)
		if len(tool["inputSchema"]) == 0 {
			t.Errorf("tool %s has no inputSchema", n)
		}
	}
	if got, want := strings.Join(names, ","), "echo,stats,fail,panic,rpc_error,nothing,whoami,write"; got != want {
		t.Fatalf("tools = %s, want %s (in AddTool order)", got, want)
	}
	tests := []struct {
		tool, field, want string
	}{
		{"echo", "inputSchema", `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`},
		{"echo", "description", `"Echoes text."`},
		{"echo", "annotations", `{"readOnlyHint":true}`},
		{"stats", "title", `"Stats"`},
		{"stats", "inputSchema", `{"type":"object"}`},
		{"stats", "outputSchema", `{"type":"object","properties":{"n":{"type":"integer"}}}`},
		{"stats", "annotations", `{"title":"Stats","readOnlyHint":true,"idempotentHint":true,"openWorldHint":false}`},
		{"fail", "title", ``},
		{"fail", "description", ``},
		{"fail", "outputSchema", ``},
		{"fail", "annotations", ``},
		{"write", "annotations", `{"readOnlyHint":false,"destructiveHint":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.tool+"/"+tc.field, func(t *testing.T) {
			for i, n := range names {
				if n == tc.tool {
					if got := string(list.Tools[i][tc.field]); got != tc.want {
						t.Errorf("%s.%s = %s, want %s", tc.tool, tc.field, got, tc.want)
					}
					return
				}
			}
			t.Fatalf("no tool %s", tc.tool)
		})
	}
}

func TestAgentMethods(t *testing.T) {
	e := agStartBroker(t)
	e.startAgent(t, expertagent.AgentOptions{Name: "methods", Version: "1.2.3"}, agServeTools()...)
	c := e.newCaller(t)

	tests := []struct {
		name       string
		method     string
		params     any
		wantResult string // exact JSON, if no error
		wantCode   int
		wantMsg    string // substring of the error message
	}{
		{name: "initialize", method: "initialize",
			params:     map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "0"}},
			wantResult: `{"capabilities":{"tools":{"listChanged":false}},"protocolVersion":"2025-06-18","serverInfo":{"name":"methods","version":"1.2.3"}}`},
		{name: "initialize unknown version gets the newest", method: "initialize", params: map[string]any{"protocolVersion": "1999-01-01"},
			wantResult: `{"capabilities":{"tools":{"listChanged":false}},"protocolVersion":"2026-07-28","serverInfo":{"name":"methods","version":"1.2.3"}}`},
		{name: "ping", method: "ping", wantResult: `{}`},
		{name: "unknown method", method: "resources/list", wantCode: jsonrpc.CodeMethodNotFound, wantMsg: "resources/list"},
		{name: "unknown tool", method: "tools/call", params: agCallParams("nope", map[string]any{}, nil), wantCode: jsonrpc.CodeInvalidParams, wantMsg: `unknown tool: "nope"`},
		{name: "no tool name", method: "tools/call", params: map[string]any{"arguments": map[string]any{}}, wantCode: jsonrpc.CodeInvalidParams, wantMsg: "name is required"},
		{name: "params not an object", method: "tools/call", params: []string{"echo"}, wantCode: jsonrpc.CodeInvalidParams, wantMsg: "params must be an object"},
		{name: "arguments not an object", method: "tools/call", params: agCallParams("echo", []int{1}, nil), wantCode: jsonrpc.CodeInvalidParams, wantMsg: "arguments must be a JSON object"},
		{name: "tool returns a JSON-RPC error", method: "tools/call", params: agCallParams("rpc_error", nil, nil), wantCode: -32042, wantMsg: "needs elicitation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := c.response(t, c.send(t, tc.method, tc.params, agSendOpts{}))
			if tc.wantCode != 0 {
				if r.msg.Error == nil || r.msg.Error.Code != tc.wantCode || !strings.Contains(r.msg.Error.Message, tc.wantMsg) {
					t.Fatalf("reply %s: want error %d containing %q", r.raw, tc.wantCode, tc.wantMsg)
				}
				if r.msg.Result != nil {
					t.Errorf("error reply also has a result: %s", r.raw)
				}
				return
			}
			if r.msg.Error != nil {
				t.Fatalf("error %v", r.msg.Error)
			}
			if got := string(r.msg.Result); got != tc.wantResult {
				t.Errorf("result = %s, want %s", got, tc.wantResult)
			}
		})
	}
}

func TestAgentToolsCall(t *testing.T) {
	e := agStartBroker(t)
	a := e.startAgent(t, expertagent.AgentOptions{Name: "caller"}, agServeTools()...)
	c := e.newCaller(t)

	tests := []struct {
		name       string
		tool       string
		args       any
		caller     *contract.Caller
		wantError  bool
		wantText   string // text of the single content; "*" = any
		wantStruct string
	}{
		{name: "text result", tool: "echo", args: map[string]any{"text": "hi there"}, wantText: "hi there"},
		{name: "structured only gets a text copy", tool: "stats", wantText: `{"n":3}`, wantStruct: `{"n":3}`},
		{name: "handler error is isError", tool: "fail", wantError: true, wantText: "cannot write report: disk on fire"},
		{name: "panic is isError", tool: "panic", wantError: true, wantText: `tool "panic" failed with an internal error`},
		{name: "bind refuses unknown field", tool: "echo", args: map[string]any{"text": "a", "colour": "red"}, wantError: true,
			wantText: `invalid arguments: unknown field "colour"`},
		{name: "bind names a mistyped field", tool: "echo", args: map[string]any{"text": 5}, wantError: true,
			wantText: `invalid arguments: field "text": want string, got number`},
		{name: "nil result is empty content", tool: "nothing"},
		{name: "request carries caller, context and correlation", tool: "whoami", caller: &contract.Caller{UserID: "alice"}, wantText: "*"},
		{name: "read-only caller may call a read-only tool", tool: "echo", args: map[string]any{"text": "ro"},
			caller: &contract.Caller{UserID: "u", ReadOnly: true}, wantText: "ro"},
		{name: "read-only caller may not call a writing tool", tool: "write", caller: &contract.Caller{UserID: "u", ReadOnly: true},
			wantError: true, wantText: `tool "write" changes state and the caller's token is read-only; use a token without --read-only`},
		{name: "writing tool for a normal caller", tool: "write", wantText: "written"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			corrID := c.send(t, "tools/call", agCallParams(tc.tool, tc.args, nil), agSendOpts{caller: tc.caller})
			r := c.response(t, corrID)
			if r.msg.Error != nil {
				t.Fatalf("JSON-RPC error %v, want a result", r.msg.Error)
			}
			res := agDecodeResult(t, r.msg.Result)
			if res.IsError != tc.wantError {
				t.Errorf("isError = %v, want %v (%s)", res.IsError, tc.wantError, r.msg.Result)
			}
			switch {
			case tc.tool == "nothing":
				if len(res.Content) != 0 || string(r.msg.Result) != `{"content":[]}` {
					t.Errorf("result = %s, want {\"content\":[]}", r.msg.Result)
				}
			case tc.tool == "whoami":
				want := fmt.Sprintf("alice %s %s", c.ctx.SessionID, corrID)
				if len(res.Content) != 1 || res.Content[0]["text"] != want {
					t.Errorf("content = %v, want text %q", res.Content, want)
				}
			default:
				if len(res.Content) != 1 || res.Content[0]["type"] != "text" || res.Content[0]["text"] != tc.wantText {
					t.Errorf("content = %v, want one text %q", res.Content, tc.wantText)
				}
			}
			if string(res.StructuredContent) != tc.wantStruct {
				t.Errorf("structuredContent = %s, want %s", res.StructuredContent, tc.wantStruct)
			}
		})
	}
	if st := a.Stats(); st.Panics != 1 {
		t.Errorf("Stats().Panics = %d, want 1", st.Panics)
	}
}

func TestAgentProgressBeforeResponse(t *testing.T) {
	e := agStartBroker(t)
	const steps = 5
	tool := expertagent.Tool{
		Tool: mcp.Tool{
			Name: "steps",
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			if err := req.Log(ctx, "info", map[string]any{"starting": steps}); err != nil {
				return nil, err
			}
			for i := 1; i <= steps; i++ {
				if err := req.Progress(ctx, float64(i), steps, fmt.Sprintf("step %d", i)); err != nil {
					return nil, err
				}
			}
			if err := req.Log(ctx, "loud", nil); !errors.Is(err, expertagent.ErrInvalidLogLevel) {
				return nil, fmt.Errorf("Log with a bad level = %v, want ErrInvalidLogLevel", err)
			}
			return mcp.TextResult("done"), nil
		},
	}
	a := e.startAgent(t, expertagent.AgentOptions{Name: "progress"}, tool)
	c := e.newCaller(t)

	tests := []struct {
		name  string
		token any
		want  string // progressToken as it must come back
	}{
		{name: "string token", token: "tok-1", want: `"tok-1"`},
		{name: "number token", token: 42, want: `42`},
		{name: "no token: no progress", token: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			corrID := c.send(t, "tools/call", agCallParams("steps", nil, tc.token), agSendOpts{})
			r := c.next(t)
			if r.env.CorrelationID != corrID || r.msg.Method != "notifications/message" || r.msg.ID != nil {
				t.Fatalf("first reply = %s, want notifications/message for %s", r.raw, corrID)
			}
			var logMsg struct {
				Level, Logger string
				Data          map[string]int
			}
			if err := json.Unmarshal(r.msg.Params, &logMsg); err != nil || logMsg.Level != "info" || logMsg.Logger != "progress" || logMsg.Data["starting"] != steps {
				t.Errorf("log params = %s (%v)", r.msg.Params, err)
			}
			if tc.token != nil {
				for i := 1; i <= steps; i++ {
					r := c.next(t)
					if r.env.CorrelationID != corrID || r.msg.Method != "notifications/progress" {
						t.Fatalf("reply %d = %s, want notifications/progress", i, r.raw)
					}
					want := fmt.Sprintf(`{"progressToken":%s,"progress":%d,"total":%d,"message":"step %d"}`, tc.want, i, steps, i)
					if string(r.msg.Params) != want {
						t.Errorf("progress params = %s, want %s", r.msg.Params, want)
					}
				}
			}
			res := agDecodeResult(t, c.response(t, corrID).msg.Result)
			if res.IsError || res.Content[0]["text"] != "done" {
				t.Fatalf("result = %+v", res)
			}
		})
	}
	if st := a.Stats(); st.Notifications != 2*steps+3 {
		t.Errorf("Stats().Notifications = %d, want %d", st.Notifications, 2*steps+3)
	}
}

func TestAgentCancellation(t *testing.T) {
	e := agStartBroker(t)
	b := newAgBlockingTool()
	a := e.startAgent(t, expertagent.AgentOptions{Name: "cancel"}, b.tool())
	c := e.newCaller(t)

	tests := []struct {
		name   string
		params func(corrID string) any
		reason string
	}{
		{name: "by requestId", params: func(id string) any { return map[string]any{"requestId": id, "reason": "user pressed stop"} },
			reason: "user pressed stop"},
		{name: "by correlation ID alone", params: func(string) any { return map[string]any{} }, reason: "no reason given"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			corrID := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
			if got := agRecv(t, b.started, "handler start"); got != corrID {
				t.Fatalf("started %s, want %s", got, corrID)
			}
			c.sendAs(t, corrID, "notifications/cancelled", tc.params(corrID), agSendOpts{noID: true})
			cause := agRecv(t, b.ended, "handler end")
			if cause == nil || !strings.Contains(cause.Error(), "cancelled by the caller: "+tc.reason) {
				t.Fatalf("handler context ended with %v, want the caller's cancellation (%s)", cause, tc.reason)
			}
			agPoll(t, "Stats().Cancelled", func() bool { return a.Stats().Cancelled == uint64(i+1) })
			c.expectNoReply(t) // a cancelled call gets no response
		})
	}
	// The gateway sends a cancel to the instance that claimed the call,
	// although it asked the pool ("_").
	t.Run("addressed to the instance that took it", func(t *testing.T) {
		corrID := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
		agRecv(t, b.started, "handler start")
		c.sendAs(t, corrID, "notifications/cancelled", map[string]any{"requestId": corrID}, agSendOpts{noID: true, to: a.ClientID()})
		if cause := agRecv(t, b.ended, "handler end"); cause == nil || !strings.Contains(cause.Error(), "cancelled by the caller") {
			t.Fatalf("handler context ended with %v, want the caller's cancellation", cause)
		}
		agPoll(t, "Stats().Cancelled", func() bool { return a.Stats().Cancelled == uint64(len(tests)+1) })
		c.expectNoReply(t)
	})
	t.Run("cancel of another context is ignored", func(t *testing.T) {
		corrID := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
		agRecv(t, b.started, "handler start")
		other := e.newCaller(t)
		other.sendAs(t, corrID, "notifications/cancelled", map[string]any{"requestId": corrID}, agSendOpts{noID: true})
		other.expectNoReply(t) // the cancel was processed (in order) before this ping
		select {
		case cause := <-b.ended:
			t.Fatalf("handler ended (%v) on another context's cancel", cause)
		default:
		}
		b.release <- struct{}{} // unblock by hand: release is not closed
	})
}

func TestAgentDeadline(t *testing.T) {
	e := agStartBroker(t)
	b := newAgBlockingTool()
	a := e.startAgent(t, expertagent.AgentOptions{Name: "deadline"}, b.tool())
	c := e.newCaller(t)

	t.Run("deadline passes while running", func(t *testing.T) {
		c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{deadline: time.Now().Add(time.Second)})
		agPoll(t, "Stats().Expired", func() bool { return a.Stats().Expired == 1 })
		// Expired counts after the handler returned, so if it ran its start is queued by now.
		select {
		case <-b.started:
			if cause := agRecv(t, b.ended, "handler end"); !errors.Is(cause, context.DeadlineExceeded) {
				t.Fatalf("handler context ended with %v, want DeadlineExceeded", cause)
			}
		default:
			t.Log("the deadline passed before a worker took the request (slow machine)")
		}
		c.expectNoReply(t)
	})
	t.Run("deadline passed before arrival", func(t *testing.T) {
		c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{deadline: time.Now().Add(-time.Second)})
		agPoll(t, "Stats().Expired", func() bool { return a.Stats().Expired == 2 })
		c.expectNoReply(t)
		select {
		case id := <-b.started:
			t.Fatalf("handler ran for expired request %s", id)
		default:
		}
	})
}

func TestAgentIgnoresBadMessages(t *testing.T) {
	e := agStartBroker(t)
	a := e.startAgent(t, expertagent.AgentOptions{Name: "sturdy"}, agEchoTool())
	c := e.newCaller(t)
	req := c.requestTopic(contract.AnyInstance)

	bad := []struct {
		name, topic, payload string
	}{
		{"not JSON", req, `hello`},
		{"empty", req, ``},
		{"JSON array", req, `[1,2]`},
		{"contract v1 envelope", req, `{"v":1,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`},
		{"to this instance, bad envelope", c.requestTopic(a.ClientID()), `{"v":3,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`},
		{"no correlationId", req, `{"v":2,"message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`},
		{"message not an object", req, `{"v":2,"correlationId":"x","message":"ping"}`},
		{"message not JSON-RPC 2.0", req, `{"v":2,"correlationId":"x","message":{"jsonrpc":"1.0","id":1,"method":"ping"}}`},
		{"message with bad field types", req, `{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":1,"method":7}}`},
		{"a response", req, `{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","result":{}}}`},
		{"deep JSON", req, strings.Repeat("[", 20000)},
	}
	for _, d := range bad {
		c.publishRaw(t, d.topic, []byte(d.payload))
	}
	// The broker does not even deliver these to the agent: a topic with a
	// level the contract forbids (its ACL checks every delivery), one of
	// contract v1, and requests for another agent or another instance (no
	// filter of the agent's matches them). The agent would drop them too
	// (TestAgentDecodeDropsForeignTopics).
	ping := []byte(`{"v":2,"correlationId":"x","message":{"jsonrpc":"2.0","id":"x","method":"ping"}}`)
	for _, topic := range []string{
		contract.TopicPrefix + e.AgentUser + "/_/pl.at/user1/s/_/_/req",
		contract.V1Prefix + "plat/user1/s/_/_/req",
		c.ctx.RequestTopic("other-agent", contract.AnyInstance),
		c.requestTopic("other-instance"),
	} {
		c.publishRaw(t, topic, ping)
	}
	// Ignored without counting: notifications nobody handles.
	c.send(t, "notifications/initialized", nil, agSendOpts{noID: true})
	c.send(t, "notifications/cancelled", map[string]any{"requestId": "nobody"}, agSendOpts{noID: true})

	if res := agDecodeResult(t, c.call(t, "tools/call", agCallParams("echo", map[string]any{"text": "still here"}, nil))); res.Content[0]["text"] != "still here" {
		t.Fatalf("echo after bad messages = %+v", res)
	}
	agPoll(t, "the echo response counted", func() bool { return a.Stats().Responses == 1 })
	if st := a.Stats(); st.Dropped != uint64(len(bad)) || st.Panics != 0 {
		t.Errorf("Stats() = %+v, want Dropped %d, Panics 0", st, len(bad))
	}
	if n := c.bad.Load(); n != 0 {
		t.Errorf("%d undecodable replies", n)
	}
}

func TestAgentBusyRefusesBeyondQueue(t *testing.T) {
	e := agStartBroker(t)
	b := newAgBlockingTool()
	a := e.startAgent(t, expertagent.AgentOptions{Name: "busy", Concurrency: 1}, b.tool())
	c := e.newCaller(t)

	running := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
	agRecv(t, b.started, "first handler")
	queued := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
	agPoll(t, "two in flight", func() bool { return a.Stats().InFlight == 2 })
	refused := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
	refusedList := c.send(t, "tools/list", nil, agSendOpts{})

	r := c.response(t, refused)
	if res := agDecodeResult(t, r.msg.Result); !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]["text"]), "is busy") {
		t.Fatalf("refused call = %s, want an isError busy result", r.raw)
	}
	r = c.response(t, refusedList)
	if r.msg.Error == nil || r.msg.Error.Code != jsonrpc.CodeInternalError || !strings.Contains(r.msg.Error.Message, "is busy") {
		t.Fatalf("refused tools/list = %s, want a -32603 busy error", r.raw)
	}
	// Cancel the queued call before it runs: it must never start. The busy
	// answer to the ping behind the cancel proves the cancel was handled.
	c.sendAs(t, queued, "notifications/cancelled", map[string]any{"requestId": queued}, agSendOpts{noID: true})
	if r := c.response(t, c.send(t, "ping", nil, agSendOpts{})); r.msg.Error == nil || !strings.Contains(r.msg.Error.Message, "is busy") {
		t.Fatalf("ping while full = %s, want a busy error", r.raw)
	}
	b.release <- struct{}{}
	c.response(t, running)
	agPoll(t, "queued call cancelled", func() bool { return a.Stats().Cancelled == 1 })
	select {
	case id := <-b.started:
		t.Fatalf("cancelled queued call %s started", id)
	default:
	}
	c.expectNoReply(t)
	if st := a.Stats(); st.Rejected != 3 {
		t.Errorf("Stats().Rejected = %d, want 3", st.Rejected)
	}
}

// agCountingTool answers with the index of its instance and counts its
// calls in served[i].
func agCountingTool(served []atomic.Int64, i int) expertagent.Tool {
	return expertagent.Tool{
		Tool: mcp.Tool{
			Name: "count",
		},
		Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			served[i].Add(1)
			return mcp.TextResult(fmt.Sprint(i)), nil
		},
	}
}

// TestAgentPoolServesOnce: two instances of one username share the
// requests for any instance ("_"): each is answered once, by whichever
// instance took it, on that instance's own reply topic.
func TestAgentPoolServesOnce(t *testing.T) {
	e := agStartBroker(t)
	served := make([]atomic.Int64, 2)
	ids := []string{"twin-a", "twin-b"}
	for i, id := range ids {
		e.startAgent(t, expertagent.AgentOptions{Name: "twin", ClientID: id}, agCountingTool(served, i))
	}
	c := e.newCaller(t)

	const n = 40
	want := map[string]bool{}
	for range n {
		want[c.send(t, "tools/call", agCallParams("count", nil, nil), agSendOpts{})] = true
	}
	got := map[string]int{}
	for range n {
		r := c.next(t)
		if !r.msg.IsResponse() || !want[r.env.CorrelationID] {
			t.Fatalf("unexpected reply %s", r.raw)
		}
		got[r.env.CorrelationID]++
		if got[r.env.CorrelationID] > 1 {
			t.Fatalf("request %s answered twice", r.env.CorrelationID)
		}
		res := agDecodeResult(t, r.msg.Result)
		var i int
		if _, err := fmt.Sscan(fmt.Sprint(res.Content[0]["text"]), &i); err != nil || i < 0 || i >= len(ids) {
			t.Fatalf("result %s names no instance", r.msg.Result)
		}
		if r.topic != c.replyTopic(ids[i]) {
			t.Fatalf("instance %s answered on %s, want %s", ids[i], r.topic, c.replyTopic(ids[i]))
		}
	}
	c.expectNoReplyFrom(t, ids...)
	if total := served[0].Load() + served[1].Load(); total != n {
		t.Fatalf("handlers ran %d times for %d requests", total, n)
	}
	t.Logf("instance a served %d, instance b %d", served[0].Load(), served[1].Load())
}

// TestAgentRequestToOneInstance: a request addressed to one instance's
// client ID reaches that instance alone, whose reply names it; the
// instance answers a request for any instance ("_") on the same topic.
func TestAgentRequestToOneInstance(t *testing.T) {
	e := agStartBroker(t)
	served := make([]atomic.Int64, 2)
	ids := []string{"solo-a", "solo-b"}
	for i, id := range ids {
		e.startAgent(t, expertagent.AgentOptions{Name: "solo", ClientID: id}, agCountingTool(served, i))
	}
	c := e.newCaller(t)

	for i, id := range ids {
		t.Run(id, func(t *testing.T) {
			before := [2]int64{served[0].Load(), served[1].Load()}
			const n = 10 // the shared subscription would have sent some to the other
			for range n {
				r := c.response(t, c.send(t, "tools/call", agCallParams("count", nil, nil), agSendOpts{to: id}))
				if r.topic != c.replyTopic(id) {
					t.Fatalf("reply on %s, want %s", r.topic, c.replyTopic(id))
				}
				if res := agDecodeResult(t, r.msg.Result); res.Content[0]["text"] != fmt.Sprint(i) {
					t.Fatalf("answered by instance %v, want %d", res.Content[0]["text"], i)
				}
			}
			if got := served[i].Load() - before[i]; got != n {
				t.Errorf("instance %s served %d of its %d requests", id, got, n)
			}
			if other := 1 - i; served[other].Load() != before[other] {
				t.Errorf("instance %s served requests addressed to %s", ids[other], id)
			}
		})
	}
	t.Run("any instance", func(t *testing.T) {
		r := c.response(t, c.send(t, "ping", nil, agSendOpts{}))
		if r.topic != c.replyTopic(ids[0]) && r.topic != c.replyTopic(ids[1]) {
			t.Fatalf("reply to a request for any instance on %s, want one instance's reply topic", r.topic)
		}
	})
}

// TestAgentExclusiveEveryInstanceAnswers: without $share, every instance
// of the username gets each request for any instance, and answers it on
// its own reply topic.
func TestAgentExclusiveEveryInstanceAnswers(t *testing.T) {
	e := agStartBroker(t)
	ids := []string{"excl-a", "excl-b"}
	for _, id := range ids {
		e.startAgent(t, expertagent.AgentOptions{Name: "excl", ClientID: id, Exclusive: true}, agEchoTool())
	}
	c := e.newCaller(t)
	corrID := c.send(t, "ping", nil, agSendOpts{})
	topics := map[string]bool{}
	for range ids {
		topics[c.response(t, corrID).topic] = true
	}
	for _, id := range ids {
		if !topics[c.replyTopic(id)] {
			t.Errorf("no answer from %s (replies on %v)", id, topics)
		}
	}
	// A request addressed to one instance still reaches it alone.
	c.expectNoReplyFrom(t, ids...)
}

// TestAgentOverTCPWithPlatformClient drives the agent with a paho client
// that logs in with the platform role, so every step passes the real ACL.
func TestAgentOverTCPWithPlatformClient(t *testing.T) {
	e := agStartBroker(t)
	a := e.startAgent(t, expertagent.AgentOptions{Name: "tcp"}, agEchoTool())

	// Presence and replies arrive on channels of their own: a presence
	// may come twice, as shown below.
	presence := make(chan paho.Message, 16)
	replies := make(chan paho.Message, 16)
	o := paho.NewClientOptions().AddBroker(e.URL).SetClientID("plat1-gw").SetUsername(e.PlatformUser).SetPassword(e.PlatformPassword).
		SetAutoReconnect(false).SetConnectTimeout(agWait)
	cl := paho.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(agWait) || tok.Error() != nil {
		t.Fatalf("platform connect: %v", tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(100) })

	// Presence is retained: a gateway that subscribes later still sees it.
	// mochi stores the retained message, acknowledges the publish and only
	// then routes it (docs/upstream.md, mochi 10), so a subscription made
	// in between gets the message twice: retained, and live without the
	// flag, in either order.
	if tok := cl.Subscribe(contract.PresenceFilter, 1, func(_ paho.Client, m paho.Message) { presence <- m }); !tok.WaitTimeout(agWait) || tok.Error() != nil {
		t.Fatalf("subscribe presence: %v", tok.Error())
	}
	m := agRecv(t, presence, "retained presence")
	if !m.Retained() {
		m = agRecv(t, presence, "retained presence after the live one")
	}
	var p contract.Presence
	presenceTopic := contract.PresenceTopic(e.AgentUser, a.ClientID())
	if err := json.Unmarshal(m.Payload(), &p); err != nil || m.Topic() != presenceTopic || !m.Retained() ||
		p.Status != contract.StatusOnline || p.ClientID != a.ClientID() || p.Name != "tcp" || p.Version != "dev" || p.Since == 0 {
		t.Fatalf("presence %s %s (retained %v), want retained online for %s", m.Topic(), m.Payload(), m.Retained(), a.ClientID())
	}

	ctx := contract.Context{PlatformID: "plat1gw", UserID: "u1", SessionID: "s1", EntityType: "project", EntityID: "p-7"}
	if tok := cl.Subscribe(ctx.ReplyFilter(), 1, func(_ paho.Client, m paho.Message) { replies <- m }); !tok.WaitTimeout(agWait) || tok.Error() != nil {
		t.Fatalf("subscribe reply filter: %v", tok.Error())
	}
	env := contract.Envelope{CorrelationID: "tcp-1", Deadline: time.Now().Add(agWait).UnixMilli(), Caller: &contract.Caller{UserID: "u1"},
		Message: json.RawMessage(`{"jsonrpc":"2.0","id":"tcp-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"over tcp"}}}`)}
	payload, _ := env.Encode()
	if tok := cl.Publish(ctx.RequestTopic(e.AgentUser, contract.AnyInstance), 1, false, payload); !tok.WaitTimeout(agWait) || tok.Error() != nil {
		t.Fatalf("publish request: %v", tok.Error())
	}
	m = agRecv(t, replies, "response")
	got, err := contract.DecodeEnvelope(m.Payload())
	if err != nil || m.Topic() != ctx.ReplyTopic(e.AgentUser, a.ClientID()) || got.CorrelationID != "tcp-1" {
		t.Fatalf("reply %s %s: %v", m.Topic(), m.Payload(), err)
	}
	if want := `{"jsonrpc":"2.0","id":"tcp-1","result":{"content":[{"type":"text","text":"over tcp"}]}}`; string(got.Message) != want {
		t.Fatalf("message = %s, want %s", got.Message, want)
	}
}

func TestAgentRunStopsCleanlyAndGoesOffline(t *testing.T) {
	e := agStartBroker(t)
	ignore := goleak.IgnoreCurrent() // the broker's goroutines: it outlives this check
	presence := make(chan contract.Presence, 16)
	const clientID = "stopper-1"
	if err := e.Broker.Bus().Subscribe(agContext(t), contract.PresenceTopic(e.AgentUser, clientID), func(_ string, b []byte) {
		var p contract.Presence
		if json.Unmarshal(b, &p) == nil {
			presence <- p
		}
	}); err != nil {
		t.Fatal(err)
	}

	b := newAgBlockingTool()
	a := expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{Name: "stopper", ClientID: clientID, ShutdownTimeout: agWait}))
	if err := a.AddTool(b.tool()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	agRecv(t, a.Ready(), "Ready")
	if p := agRecv(t, presence, "online presence"); p.Status != contract.StatusOnline {
		t.Fatalf("presence = %+v, want online", p)
	}
	// A call in flight when ctx ends is finished and answered before Run returns.
	c := e.newCaller(t)
	corrID := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
	agRecv(t, b.started, "handler start")
	cancel()
	if p := agRecv(t, presence, "offline presence"); p.Status != contract.StatusOffline || p.ClientID != clientID {
		t.Fatalf("presence = %+v, want offline", p)
	}
	close(b.release)
	if res := agDecodeResult(t, c.response(t, corrID).msg.Result); res.Content[0]["text"] != "released" {
		t.Fatalf("in-flight call result = %+v", res)
	}
	if err := agRecv(t, done, "Run to return"); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	// The offline status stays retained for gateways that come later.
	late := make(chan contract.Presence, 1)
	if err := e.Broker.Bus().Subscribe(agContext(t), contract.PresenceFilter, func(_ string, b []byte) {
		var p contract.Presence
		if json.Unmarshal(b, &p) == nil {
			late <- p
		}
	}); err != nil {
		t.Fatal(err)
	}
	if p := agRecv(t, late, "retained presence"); p.Status != contract.StatusOffline {
		t.Fatalf("retained presence = %+v, want offline", p)
	}
	if err := a.Run(context.Background()); !errors.Is(err, expertagent.ErrAgentStarted) {
		t.Errorf("second Run = %v, want ErrAgentStarted", err)
	}
	goleak.VerifyNone(t, ignore)
}

func TestAgentShutdownCancelsStuckHandlers(t *testing.T) {
	e := agStartBroker(t)
	b := newAgBlockingTool()
	a := expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{Name: "stuck", ShutdownTimeout: 100 * time.Millisecond}))
	if err := a.AddTool(b.tool()); err != nil {
		t.Fatal(err)
	}
	r := agRun(t, a)
	c := e.newCaller(t)
	corrID := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
	agRecv(t, b.started, "handler start")
	if err := r.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if cause := agRecv(t, b.ended, "handler end"); cause == nil || !strings.Contains(cause.Error(), "stopping") {
		t.Fatalf("handler context ended with %v, want the agent's stop", cause)
	}
	res := agDecodeResult(t, c.response(t, corrID).msg.Result)
	if !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]["text"]), "retry") {
		t.Fatalf("result = %+v, want an isError that says to retry", res)
	}
}

func TestAgentRunErrors(t *testing.T) {
	e := agStartBroker(t)
	// A broker that refuses the second failed login from an address at
	// once, for an hour, without checking the password.
	throttled := &agEnv{testenv.StartBroker(t, testenv.WithReadyCheck(), testenv.WithOptions(func(o *broker.Options) {
		o.MaxFailedLogins, o.FailedLoginRefill = 1, time.Hour
	}))}
	tests := []struct {
		name   string
		env    *agEnv
		before func(t *testing.T) // makes the broker refuse
		opts   expertagent.AgentOptions
		want   error
		cause  error  // what the broker said, when it said something
		words  string // what the error says of it
	}{
		{name: "wrong password", opts: expertagent.AgentOptions{Username: e.AgentUser, Password: "nope"}, want: expertagent.ErrAgentConnect,
			cause: packets.ErrorRefusedBadUsernameOrPassword, words: "the broker refused the login: bad user name or password: check Username and Password"},
		{name: "nothing listening", opts: expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1"}, want: expertagent.ErrAgentConnect},
		// The broker refuses a platform login whose Will is on a presence
		// topic, so the role check bites at CONNECT, before any SUBSCRIBE.
		{name: "platform identity may not act as an agent", opts: expertagent.AgentOptions{Username: e.PlatformUser, Password: e.PlatformPassword},
			want: expertagent.ErrAgentConnect, cause: packets.ErrorRefusedNotAuthorised, words: "the broker refused the login: not authorised"},
		// MQTT 3.1.1 has no code for it: "server unavailable" (3), which
		// the agent must not read as a wrong password.
		{name: "too many failed logins", env: throttled, before: func(t *testing.T) {
			o := throttled.agentOptions(t, expertagent.AgentOptions{Username: throttled.AgentUser, Password: "nope"})
			o.ConnectTimeout, o.ConnectRetry = agWait, -1
			if err := expertagent.NewAgent(o).Run(agContext(t)); !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
				t.Fatalf("first login with a wrong password: %v", err)
			}
		}, want: expertagent.ErrAgentConnect, cause: packets.ErrorRefusedServerUnavailable,
			words: "the broker refused the login: server unavailable: too many failed logins from this address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := e
			if tc.env != nil {
				env = tc.env
			}
			if tc.before != nil {
				tc.before(t)
			}
			o := env.agentOptions(t, tc.opts)
			o.ConnectTimeout, o.ConnectRetry = agWait, -1
			a := expertagent.NewAgent(o)
			ctx, cancel := context.WithTimeout(context.Background(), 3*agWait)
			defer cancel()
			err := a.Run(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v, want %v", err, tc.want)
			}
			if tc.cause != nil && (!errors.Is(err, tc.cause) || !errors.Is(err, expertagent.ErrLoginRefused)) {
				t.Errorf("Run = %v, want it to be ErrLoginRefused and %v: a wrong password and a refused login read apart", err, tc.cause)
			}
			if tc.words != "" && !strings.Contains(err.Error(), tc.words) {
				t.Errorf("Run = %q, want it to say %q", err, tc.words)
			}
			select {
			case <-a.Ready():
				t.Error("Ready closed although Run failed")
			default:
			}
		})
	}
}

// TestAgentRunBadOptions: Run refuses options it cannot run with before it
// dials: nothing listens at the broker URL.
func TestAgentRunBadOptions(t *testing.T) {
	const url = "tcp://127.0.0.1:1"
	tests := []struct {
		name string
		opts expertagent.AgentOptions
		want string // in the error
	}{
		{name: "no broker URL", opts: expertagent.AgentOptions{Username: "agent1"}, want: "BrokerURL"},
		{name: "no username", opts: expertagent.AgentOptions{BrokerURL: url}, want: "Username is required"},
		{name: "username with a slash", opts: expertagent.AgentOptions{BrokerURL: url, Username: "a/b"}, want: "Username"},
		{name: "username a wildcard", opts: expertagent.AgentOptions{BrokerURL: url, Username: "+"}, want: "Username"},
		{name: "username with a space", opts: expertagent.AgentOptions{BrokerURL: url, Username: "my agent"}, want: "Username"},
		{name: "username too long", opts: expertagent.AgentOptions{BrokerURL: url, Username: strings.Repeat("u", 129)}, want: "Username"},
		{name: "client ID not a topic level", opts: expertagent.AgentOptions{BrokerURL: url, Username: "agent1", ClientID: "a/b"}, want: "ClientID"},
		{name: "client ID is the pool's level", opts: expertagent.AgentOptions{BrokerURL: url, Username: "agent1", ClientID: "_"}, want: "ClientID"},
		// Name is for people: "my agent" is no bad option
		// (TestAgentNameForPeople).
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := expertagent.NewAgent(tc.opts).Run(agContext(t))
			if !errors.Is(err, expertagent.ErrAgentOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want ErrAgentOptions about %s", err, tc.want)
			}
		})
	}
}

func TestAgentAddTool(t *testing.T) {
	ok := func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) { return nil, nil }
	tests := []struct {
		name string
		tool expertagent.Tool
		want error
	}{
		{name: "valid", tool: expertagent.Tool{Tool: mcp.Tool{Name: "a.b-c_d"}, Handler: ok}},
		{name: "duplicate", tool: expertagent.Tool{Tool: mcp.Tool{Name: "a.b-c_d"}, Handler: ok}, want: expertagent.ErrDuplicateTool},
		{name: "empty name", tool: expertagent.Tool{Tool: mcp.Tool{}, Handler: ok}, want: expertagent.ErrInvalidTool},
		{name: "name with a space", tool: expertagent.Tool{Tool: mcp.Tool{Name: "a b"}, Handler: ok}, want: expertagent.ErrInvalidTool},
		{name: "name too long", tool: expertagent.Tool{Tool: mcp.Tool{Name: strings.Repeat("x", 129)}, Handler: ok}, want: expertagent.ErrInvalidTool},
		{name: "no handler", tool: expertagent.Tool{Tool: mcp.Tool{Name: "h"}}, want: expertagent.ErrInvalidTool},
		{name: "schema not an object", tool: expertagent.Tool{Tool: mcp.Tool{Name: "s1", InputSchema: json.RawMessage(`[]`)}, Handler: ok}, want: expertagent.ErrInvalidTool},
		{name: "schema of another type", tool: expertagent.Tool{Tool: mcp.Tool{Name: "s2", InputSchema: json.RawMessage(`{"type":"string"}`)}, Handler: ok}, want: expertagent.ErrInvalidTool},
		{name: "output schema null", tool: expertagent.Tool{Tool: mcp.Tool{Name: "s3", OutputSchema: json.RawMessage(`null`)}, Handler: ok}, want: expertagent.ErrInvalidTool},
		{name: "schema without type", tool: expertagent.Tool{Tool: mcp.Tool{Name: "s4", InputSchema: json.RawMessage(`{"properties":{}}`)}, Handler: ok}},
	}
	a := expertagent.NewAgent(expertagent.AgentOptions{BrokerURL: "tcp://127.0.0.1:1", Username: "agent1", ConnectRetry: -1})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.AddTool(tc.tool); !errors.Is(err, tc.want) {
				t.Fatalf("AddTool = %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("after Run", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), agWait)
		defer cancel()
		_ = a.Run(ctx) // fails to connect; the agent is started all the same
		if err := a.AddTool(expertagent.Tool{Tool: mcp.Tool{Name: "late"}, Handler: ok}); !errors.Is(err, expertagent.ErrAgentStarted) {
			t.Fatalf("AddTool after Run = %v, want ErrAgentStarted", err)
		}
	})
}

func TestAgentHandleExtension(t *testing.T) {
	e := agStartBroker(t)
	a := expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{Name: "ext"}))
	a.Handle("resources/list", func(_ context.Context, req *expertagent.MethodRequest) (any, error) {
		return map[string]any{"resources": []any{}, "for": req.Caller.UserID}, nil
	})
	a.Handle("prompts/get", func(context.Context, *expertagent.MethodRequest) (any, error) {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "no such prompt")
	})
	a.Handle("prompts/list", func(context.Context, *expertagent.MethodRequest) (any, error) {
		return nil, errAgTest
	})
	a.Handle("notifications/roots/list_changed", func(context.Context, *expertagent.MethodRequest) (any, error) {
		panic("must not break the agent")
	})
	agRun(t, a)
	c := e.newCaller(t)

	if got := string(c.call(t, "resources/list", nil)); got != `{"for":"user1","resources":[]}` {
		t.Errorf("resources/list = %s", got)
	}
	r := c.response(t, c.send(t, "prompts/get", nil, agSendOpts{}))
	if r.msg.Error == nil || r.msg.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("prompts/get = %s, want -32602", r.raw)
	}
	r = c.response(t, c.send(t, "prompts/list", nil, agSendOpts{}))
	if r.msg.Error == nil || r.msg.Error.Code != jsonrpc.CodeInternalError || !strings.Contains(r.msg.Error.Message, "disk on fire") {
		t.Errorf("prompts/list = %s, want -32603 with the error", r.raw)
	}
	c.send(t, "notifications/roots/list_changed", nil, agSendOpts{noID: true})
	agPoll(t, "notification handler panic", func() bool { return a.Stats().Panics == 1 })
	var init struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(c.call(t, "initialize", map[string]any{"protocolVersion": "2025-11-25"}), &init); err != nil {
		t.Fatal(err)
	}
	for _, cap := range []string{"tools", "resources", "prompts"} {
		if _, ok := init.Capabilities[cap]; !ok {
			t.Errorf("initialize capabilities %v lack %s", init.Capabilities, cap)
		}
	}
}

// While connected, the agent says it is online again every PresenceEvery,
// with the since of its announce and the interval, so that a gateway can
// forget it should its broker node die without sending its Will.
func TestAgentRepeatsPresence(t *testing.T) {
	e := agStartBroker(t)
	statuses := make(chan contract.Presence, 16)
	if err := e.Broker.Bus().Subscribe(agContext(t), contract.PresenceFilter, func(_ string, b []byte) {
		var p contract.Presence
		if json.Unmarshal(b, &p) == nil {
			select {
			case statuses <- p:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	e.startAgent(t, expertagent.AgentOptions{PresenceEvery: 50 * time.Millisecond}, agEchoTool())
	first := agRecv(t, statuses, "the announce")
	for i := range 2 {
		again := agRecv(t, statuses, "a repeat")
		if again.Status != contract.StatusOnline || again.Since != first.Since || again.Interval != 50 {
			t.Fatalf("repeat %d = %+v, want online since %d every 50 ms (announce %+v)", i, again, first.Since, first)
		}
	}
}

package expertagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

func TestAgentDefaultMaxPacketSizeIsTheBrokers(t *testing.T) {
	if expertagent.DefaultAgentMaxPacketSize != broker.DefaultMaxPacketSize {
		t.Fatalf("DefaultAgentMaxPacketSize = %d, broker.DefaultMaxPacketSize = %d", expertagent.DefaultAgentMaxPacketSize, broker.DefaultMaxPacketSize)
	}
}

// A reply over the broker's packet limit would make the broker drop the
// agent's connection, and every call in flight with it. The agent answers
// an error instead: the call that asked gets it, the call in flight
// meanwhile and the calls after it are answered on the same connection.
func TestAgentReplyTooLarge(t *testing.T) {
	tests := []struct {
		name string
		// broker and agent limits; 0 = their defaults
		brokerMax uint32
		agentMax  int
		size      int // of the large result's text
	}{
		{name: "default limits", size: broker.DefaultMaxPacketSize + 1<<20},
		{name: "configured limits", brokerMax: 64 << 10, agentMax: 64 << 10, size: 100 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &agEnv{testenv.StartBroker(t, testenv.WithReadyCheck(), testenv.WithOptions(func(o *broker.Options) {
				o.InlineQoS = 1
				o.MaxPacketSize = tt.brokerMax
			}))}
			large := strings.Repeat("x", tt.size)
			logErr := make(chan error, 1)
			blocking := newAgBlockingTool()
			a := expertagent.NewAgent(e.agentOptions(t, expertagent.AgentOptions{MaxPacketSize: tt.agentMax}))
			for _, tool := range []expertagent.Tool{agEchoTool(), blocking.tool(), {
				Tool: mcp.Tool{Name: "large"},
				Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
					logErr <- req.Log(ctx, "info", large)
					return mcp.TextResult(large), nil
				},
			}} {
				if err := a.AddTool(tool); err != nil {
					t.Fatal(err)
				}
			}
			a.Handle("resources/read", func(context.Context, *expertagent.MethodRequest) (any, error) {
				return map[string]any{"contents": []map[string]string{{"uri": "file:///large", "text": large}}}, nil
			})
			agRun(t, a)
			c := e.newCaller(t)

			inFlight := c.send(t, "tools/call", agCallParams("block", nil, nil), agSendOpts{})
			agRecv(t, blocking.started, "the blocking call's start")

			r := c.response(t, c.send(t, "tools/call", agCallParams("large", nil, nil), agSendOpts{}))
			if r.msg.Error != nil {
				t.Fatalf("tools/call large: JSON-RPC error %v, want an isError result", r.msg.Error)
			}
			res := agDecodeResult(t, r.msg.Result)
			if text, _ := res.Content[0]["text"].(string); !res.IsError || !strings.Contains(text, "too large") {
				t.Fatalf("tools/call large = %s, want an isError result saying it is too large", r.raw)
			}
			if err := agRecv(t, logErr, "the large log's error"); !errors.Is(err, expertagent.ErrReplyTooLarge) {
				t.Errorf("Log(large) = %v, want ErrReplyTooLarge", err)
			}

			r = c.response(t, c.send(t, "resources/read", map[string]string{"uri": "file:///large"}, agSendOpts{}))
			if r.msg.Error == nil || r.msg.Error.Code != jsonrpc.CodeInternalError || !strings.Contains(r.msg.Error.Message, "too large") {
				t.Fatalf("resources/read large = %s, want a -32603 error saying it is too large", r.raw)
			}

			close(blocking.release)
			if r := c.response(t, inFlight); r.msg.Error != nil || agDecodeResult(t, r.msg.Result).IsError {
				t.Fatalf("the call in flight meanwhile = %s, want its result", r.raw)
			}
			var echo agToolResult
			if err := json.Unmarshal(c.call(t, "tools/call", agCallParams("echo", map[string]string{"text": "still here"}, nil)), &echo); err != nil ||
				echo.IsError || echo.Content[0]["text"] != "still here" {
				t.Fatalf("echo after the large results = %+v, %v", echo, err)
			}
			if st := a.Stats(); st.TooLarge != 2 || st.PublishErrors != 0 {
				t.Errorf("stats = %+v, want TooLarge 2 and no publish errors", st)
			}
		})
	}
}

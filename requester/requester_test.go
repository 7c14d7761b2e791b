package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/requester"
)

// Many concurrent calls across many contexts, with an LRU smaller than the
// number of contexts (so contexts are evicted and come back under load):
// each call gets its own answer and nothing else, over both buses.
func TestRequesterManyCallsManyContexts(t *testing.T) {
	for _, tc := range []struct {
		kind        busKind
		maxContexts int
	}{
		{busInline, 0}, {busInline, 3}, {busPaho, 0}, {busPaho, 3},
	} {
		t.Run(fmt.Sprintf("%s/max%d", tc.kind, tc.maxContexts), func(t *testing.T) {
			e := rqStartBroker(t)
			e.startAgent(t, "echoer", rqEchoTool())
			r := rqRequester(t, e.bus(t, tc.kind), requester.Options{MaxContexts: tc.maxContexts})
			const contexts, callsPer = 12, 20
			var wg sync.WaitGroup
			for i := range contexts {
				for j := range callsPer {
					wg.Go(func() {
						want := fmt.Sprintf("ctx %d call %d", i, j)
						args, _ := json.Marshal(map[string]string{"text": want})
						res, err := r.CallTool(rqContext(t), rqCtx(i), e.AgentUser, &contract.Caller{UserID: rqCtx(i).UserID}, "echo", args, nil)
						if err != nil {
							t.Errorf("%s: %v", want, err)
							return
						}
						if got := rqText(t, res); got != want {
							t.Errorf("got %q, want %q", got, want)
						}
					})
				}
			}
			wg.Wait()
			s := r.Stats()
			if s.Pending != 0 || s.Late != 0 || s.Mismatched != 0 || s.Dropped != 0 || s.Duplicates != 0 {
				t.Errorf("stats %+v", s)
			}
			if tc.maxContexts > 0 && (s.Evictions == 0 || s.Contexts > tc.maxContexts) {
				t.Errorf("LRU not exercised or over its bound: %+v", s)
			}
		})
	}
}

// A responder that never answers: the call fails with ErrTimeout at its
// deadline, each online instance of the agent's pool is told
// notifications/cancelled (no instance claimed the call), the pending table is empty and the call left no
// goroutine behind.
func TestRequesterTimeout(t *testing.T) {
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			e := rqStartBroker(t)
			silent := e.raw(t, rqRawOpts{clientID: "silent"})
			silent.serve(t)
			silent.announce(t, contract.StatusOnline)
			r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: 300 * time.Millisecond})
			c := rqCtx(1)
			// Warm the context up, so that its subscription is not counted as
			// a goroutine-free leak below.
			warm := rqGo(func() error { _, err := r.ListTools(rqContext(t), c, e.AgentUser, nil); return err })
			q0 := silent.nextRequest(t)
			silent.reply(t, q0.topic, q0.env.CorrelationID, rqResult(q0.env.CorrelationID, `{"tools":[]}`))
			if err := rqRecv(t, warm); err != nil {
				t.Fatal(err)
			}
			baseline := runtime.NumGoroutine()

			start := time.Now()
			_, err := r.CallTool(rqContext(t), c, e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
			if !errors.Is(err, requester.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			if el := time.Since(start); el < 300*time.Millisecond {
				t.Fatalf("returned after %v, before the deadline", el)
			}
			q := silent.nextRequest(t)
			if q.msg.Method != "tools/call" || q.env.Deadline == 0 || q.topic != c.RequestTopic(e.AgentUser, contract.AnyInstance) {
				t.Fatalf("request %+v", q)
			}
			cancel := silent.nextRequest(t)
			var p struct {
				RequestID string `json:"requestId"`
				Reason    string `json:"reason"`
			}
			if err := json.Unmarshal(cancel.msg.Params, &p); err != nil || cancel.msg.Method != "notifications/cancelled" ||
				p.RequestID != q.env.CorrelationID || cancel.env.CorrelationID != q.env.CorrelationID || p.Reason != "deadline exceeded" ||
				// Unclaimed, the cancel goes to each online instance of the
				// pool: the pool's own topic might hand it to another.
				cancel.topic != c.RequestTopic(e.AgentUser, "silent") {
				t.Fatalf("after the timeout: %s %+v on %s (%v)", cancel.msg.Method, p, cancel.topic, err)
			}
			if s := r.Stats(); s.Pending != 0 {
				t.Fatalf("pending %d after the timeout", s.Pending)
			}
			rqPoll(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseline })
			// An answer after the deadline is late, and harmless.
			silent.reply(t, q.topic, q.env.CorrelationID, rqResult(q.env.CorrelationID, `{}`))
			rqPoll(t, "late answer counted", func() bool { return r.Stats().Late == 1 })
		})
	}
}

// The caller's cancellation returns ctx.Err() (not ErrTimeout) and
// cancels the tool on the agent.
func TestRequesterCancel(t *testing.T) {
	e := rqStartBroker(t)
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	agent := e.startAgent(t, "blocker", expertagent.Tool{
		Tool: mcp.Tool{
			Name: "block",
		},
		Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			started <- struct{}{}
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		},
	})
	r := rqRequester(t, e.Broker.Bus(), requester.Options{})
	ctx, cancel := context.WithCancel(rqContext(t))
	errc := make(chan error, 1)
	go func() {
		_, err := r.CallTool(ctx, rqCtx(1), e.AgentUser, nil, "block", nil, nil)
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(rqWait):
		t.Fatal("tool did not start")
	}
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || errors.Is(err, requester.ErrTimeout) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("tool context not done")
		}
	case <-time.After(rqWait):
		t.Fatal("the agent did not cancel the tool")
	}
	rqPoll(t, "agent counted the cancellation", func() bool { return agent.agent.Stats().Cancelled == 1 })
}

// Replies that must not complete a call: garbage, a wrong or foreign
// correlationId, the agent's reply topic of another context, unknown
// versions (v1 included), oversize envelopes, responses to another id.
// Each is dropped and counted, and the call still gets its real answer.
func TestRequesterDropsBadReplies(t *testing.T) {
	e := rqStartBroker(t, func(o *broker.Options) { o.MaxPacketSize = contract.MaxEnvelopeSize + 1<<20 })
	rogue := e.raw(t, rqRawOpts{clientID: "rogue"})
	rogue.serve(t)
	rogue.announce(t, contract.StatusOnline)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{})
	a, b := rqCtx(1), rqCtx(2)

	// Context b is subscribed (a finished call), so a reply on its topic
	// reaches the requester.
	warm := rqGo(func() error { _, err := r.ListTools(rqContext(t), b, e.AgentUser, nil); return err })
	q0 := rogue.nextRequest(t)
	rogue.reply(t, q0.topic, q0.env.CorrelationID, rqResult(q0.env.CorrelationID, `{"tools":[]}`))
	if err := rqRecv(t, warm); err != nil {
		t.Fatal(err)
	}

	type result struct {
		res json.RawMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := r.CallTool(rqContext(t), a, e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		done <- result{res, err}
	}()
	q := rogue.nextRequest(t)
	id := q.env.CorrelationID
	resA := rogue.replyTopic(t, q.topic)
	if resA != a.ReplyTopic(e.AgentUser, "rogue") {
		t.Fatalf("request on %s", q.topic)
	}
	good := rqResult(id, `{"content":[{"type":"text","text":"the real answer"}]}`)
	envelope := func(v int, corr, msg string) []byte {
		p, _ := json.Marshal(map[string]any{"v": v, "correlationId": corr, "message": json.RawMessage(msg)})
		return p
	}
	oversize := envelope(2, id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"pad":"%s"}}`, id, strings.Repeat("x", contract.MaxEnvelopeSize)))
	for _, bad := range []struct {
		name    string
		topic   string
		payload []byte
	}{
		{"not json", resA, []byte("garbage")},
		{"no correlationId", resA, envelope(2, "", good)},
		{"contract v1", resA, envelope(1, id, good)},
		{"unknown version", resA, envelope(3, id, good)},
		{"message not an object", resA, envelope(2, id, `"hello"`)},
		{"oversize", resA, oversize},
		{"not JSON-RPC 2.0", resA, envelope(2, id, fmt.Sprintf(`{"jsonrpc":"1.0","id":%q,"result":{}}`, id))},
		{"response to another id", resA, envelope(2, id, rqResult("c-someone-else", `{}`))},
		{"response with neither result nor error", resA, envelope(2, id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q}`, id))},
	} {
		rogue.publish(t, bad.topic, false, bad.payload)
	}
	const dropped = 9
	rogue.publish(t, resA, false, envelope(2, "c-forged-or-old", good))                // late
	rogue.publish(t, b.ReplyTopic(e.AgentUser, "rogue"), false, envelope(2, id, good)) // mismatched
	rogue.publish(t, resA, false, envelope(2, id, rqResult(id, `{"content":[{"type":"text","text":"the real answer"}]}`)))
	rogue.publish(t, resA, false, envelope(2, id, rqResult(id, `{"content":[{"type":"text","text":"second"}]}`))) // duplicate

	got := rqRecv(t, done)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if text := rqText(t, got.res); text != "the real answer" {
		t.Fatalf("completed with %q", text)
	}
	rqPoll(t, "counters", func() bool {
		s := r.Stats()
		return s.Dropped == dropped && s.Late == 1 && s.Mismatched == 1 && s.Duplicates == 1
	})
	if s := r.Stats(); s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Progress and log notifications reach interim in order, before the result.
func TestRequesterInterimInOrder(t *testing.T) {
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			e := rqStartBroker(t)
			const steps = 20
			e.startAgent(t, "counter", expertagent.Tool{
				Tool: mcp.Tool{
					Name: "count",
				},
				Handler: func(ctx context.Context, req *expertagent.CallRequest) (*mcp.CallToolResult, error) {
					for i := range steps {
						if err := req.Progress(ctx, float64(i+1), steps, fmt.Sprintf("step %d", i+1)); err != nil {
							return nil, err
						}
					}
					return mcp.TextResult("done"), nil
				},
			})
			r := rqRequester(t, e.bus(t, kind), requester.Options{})
			var mu sync.Mutex
			var got []float64
			var ids []string
			params := json.RawMessage(`{"name":"count","arguments":{},"_meta":{"progressToken":"tok-1"}}`)
			m, err := r.Request(rqContext(t), rqCtx(1), e.AgentUser, nil, "tools/call", params, func(corrID string, msg *jsonrpc.Message) {
				mu.Lock()
				defer mu.Unlock()
				var p struct {
					ProgressToken string  `json:"progressToken"`
					Progress      float64 `json:"progress"`
				}
				if msg.Method != "notifications/progress" || json.Unmarshal(msg.Params, &p) != nil || p.ProgressToken != "tok-1" {
					t.Errorf("interim %s %s", msg.Method, msg.Params)
				}
				got = append(got, p.Progress)
				ids = append(ids, corrID)
			})
			if err != nil {
				t.Fatal(err)
			}
			if m.Error != nil || rqText(t, m.Result) != "done" {
				t.Fatalf("final %+v", m)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != steps {
				t.Fatalf("%d progress notifications, want %d", len(got), steps)
			}
			for i, p := range got {
				if p != float64(i+1) || ids[i] != ids[0] {
					t.Fatalf("progress %v: out of order", got)
				}
			}
		})
	}
}

// A JSON-RPC error from the agent comes back as *jsonrpc.Error.
func TestRequesterJSONRPCError(t *testing.T) {
	e := rqStartBroker(t)
	e.startAgent(t, "echoer", rqEchoTool())
	r := rqRequester(t, e.Broker.Bus(), requester.Options{})
	_, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "no-such-tool", nil, nil)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("got %v, want a -32602 *jsonrpc.Error", err)
	}
	tools, err := r.ListTools(rqContext(t), rqCtx(1), e.AgentUser, nil)
	if err != nil || !strings.Contains(string(tools), `"echo"`) {
		t.Fatalf("tools/list: %s %v", tools, err)
	}
}

// No instance of the agent online: a call fails with ErrNoAgent at once
// (not at its deadline), whether no instance ever came or the last one
// stopped.
func TestRequesterNoAgent(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute})
	ctx := rqContext(t)
	if _, err := r.ListTools(ctx, rqCtx(1), e.AgentUser, nil); !errors.Is(err, requester.ErrNoAgent) {
		t.Fatalf("no agent yet: got %v, want ErrNoAgent", err)
	}
	agent := e.startAgent(t, "echoer", rqEchoTool())
	rqPoll(t, "agent seen online", func() bool { a := r.Agents(); return len(a) == 1 && a[0].Online })
	if got := r.OnlineAgents(ctx); len(got) != 1 || got[0] != e.AgentUser {
		t.Fatalf("OnlineAgents = %v, want [%s]", got, e.AgentUser)
	}
	if _, err := r.CallTool(ctx, rqCtx(1), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := agent.stop(t); err != nil {
		t.Fatal(err)
	}
	rqPoll(t, "agent seen offline", func() bool { a := r.Agents(); return len(a) == 1 && !a[0].Online })
	if a := r.Agents()[0]; a.Agent != e.AgentUser || a.ClientID != agent.agent.ClientID() || a.Name != "echoer" || a.Version != "test" {
		t.Errorf("agent status %+v", a)
	}
	if got := r.OnlineAgents(ctx); len(got) != 0 {
		t.Errorf("OnlineAgents = %v after the agent stopped", got)
	}
	if _, err := r.CallTool(ctx, rqCtx(1), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil); !errors.Is(err, requester.ErrNoAgent) {
		t.Fatalf("agent gone: got %v, want ErrNoAgent", err)
	}
	// IgnorePresence sends anyway (and so times out here).
	r2 := rqRequester(t, e.Broker.Bus(), requester.Options{IgnorePresence: true, CallTimeout: 50 * time.Millisecond})
	if _, err := r2.ListTools(ctx, rqCtx(9), e.AgentUser, nil); !errors.Is(err, requester.ErrTimeout) {
		t.Fatalf("IgnorePresence: got %v, want ErrTimeout", err)
	}
}

// Two agents online under two names: a call to one is answered by it
// alone; a call to a name with no instance online fails with ErrNoAgent at
// once, and so do calls to an agent once its last instance stops, while
// the other agent stays online and keeps answering.
func TestRequesterTwoAgents(t *testing.T) {
	e := rqStartBroker(t)
	const second = "agent2"
	pw2 := e.addAgentIdentity(t, second)
	whoami := func(name string) expertagent.Tool {
		return expertagent.Tool{
			Tool: mcp.Tool{Name: "whoami", Description: "Says which agent answers."},
			Handler: func(context.Context, *expertagent.CallRequest) (*mcp.CallToolResult, error) {
				return mcp.TextResult(name), nil
			},
		}
	}
	agents := map[string]*rqRunning{
		e.AgentUser: e.startAgentAs(t, e.AgentUser, e.AgentPassword, "first", whoami(e.AgentUser)),
		second:      e.startAgentAs(t, second, pw2, "second", whoami(second)),
	}
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: time.Minute})
			ctx := rqContext(t)
			rqPoll(t, "both agents online", func() bool { return strings.Join(r.OnlineAgents(ctx), ",") == e.AgentUser+","+second })

			before := map[string]uint64{}
			for name, a := range agents {
				before[name] = a.agent.Stats().Received
			}
			// Alternating: each agent's last request comes after any
			// request of the other agent's that it could have been given.
			const rounds = 3
			for i := range rounds {
				for _, name := range []string{e.AgentUser, second} {
					res, err := r.CallTool(ctx, rqCtx(i), name, nil, "whoami", nil, nil)
					if err != nil {
						t.Fatalf("call to %s: %v", name, err)
					}
					if got := rqText(t, res); got != name {
						t.Fatalf("call to %s answered by %s", name, got)
					}
				}
			}
			for name, a := range agents {
				if got := a.agent.Stats().Received - before[name]; got != rounds {
					t.Errorf("%s received %d messages, want its own %d requests", name, got, rounds)
				}
			}
			if s := r.Stats(); s.Mismatched != 0 || s.Duplicates != 0 || s.Late != 0 {
				t.Errorf("stats %+v", s)
			}

			start := time.Now()
			if _, err := r.CallTool(ctx, rqCtx(1), "agent3", nil, "whoami", nil, nil); !errors.Is(err, requester.ErrNoAgent) {
				t.Fatalf("call to an agent never online: %v, want ErrNoAgent", err)
			}
			if el := time.Since(start); el > rqWait {
				t.Fatalf("ErrNoAgent after %v", el)
			}
			if got := r.OnlineAgents(ctx); strings.Join(got, ",") != e.AgentUser+","+second {
				t.Fatalf("OnlineAgents = %v after a call to an agent not online", got)
			}
		})
	}

	t.Run("one stops", func(t *testing.T) {
		r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute})
		ctx := rqContext(t)
		rqPoll(t, "both agents online", func() bool { return len(r.OnlineAgents(ctx)) == 2 })
		if err := agents[second].stop(t); err != nil {
			t.Fatal(err)
		}
		rqPoll(t, second+" seen offline", func() bool { return strings.Join(r.OnlineAgents(ctx), ",") == e.AgentUser })
		for _, a := range r.Agents() {
			if a.Online != (a.Agent == e.AgentUser) {
				t.Errorf("agent status %+v", a)
			}
		}
		if _, err := r.CallTool(ctx, rqCtx(1), second, nil, "whoami", nil, nil); !errors.Is(err, requester.ErrNoAgent) {
			t.Fatalf("call to the stopped agent: %v, want ErrNoAgent", err)
		}
		res, err := r.CallTool(ctx, rqCtx(1), e.AgentUser, nil, "whoami", nil, nil)
		if err != nil || rqText(t, res) != e.AgentUser {
			t.Fatalf("call to the agent still online: %s %v", res, err)
		}
	})
}

// An agent's instance killed without DISCONNECT: the broker publishes its
// Will (offline), and the calls waiting for that agent, its last instance
// gone, fail with ErrNoAgent at once. A call to another agent, online
// under another name, keeps waiting and gets its answer.
func TestRequesterAgentKilledWillFailsPending(t *testing.T) {
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			e := rqStartBroker(t)
			const id = "doomed"
			doomed := e.raw(t, rqRawOpts{clientID: id, will: &contract.Presence{Status: contract.StatusOffline, ClientID: id}})
			doomed.serve(t)
			doomed.announce(t, contract.StatusOnline)
			const other = "agent2"
			steady := e.raw(t, rqRawOpts{clientID: "steady", username: other, password: e.addAgentIdentity(t, other)})
			steady.serve(t)
			steady.announce(t, contract.StatusOnline)
			r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: time.Minute})
			ctx := rqContext(t)
			rqPoll(t, "agents online", func() bool { return len(r.OnlineAgents(ctx)) == 2 })

			const calls = 5
			errc := make(chan error, calls)
			for i := range calls {
				go func() {
					_, err := r.CallTool(ctx, rqCtx(i), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
					errc <- err
				}()
			}
			for range calls {
				doomed.nextRequest(t) // every call is out, waiting
			}
			kept := rqGo(func() error {
				_, err := r.CallTool(ctx, rqCtx(1), other, nil, "echo", json.RawMessage(`{"text":"y"}`), nil)
				return err
			})
			q := steady.nextRequest(t)

			start := time.Now()
			doomed.kill()
			for range calls {
				select {
				case err := <-errc:
					if !errors.Is(err, requester.ErrNoAgent) {
						t.Fatalf("got %v, want ErrNoAgent", err)
					}
				case <-time.After(rqWait):
					t.Fatal("pending calls not failed after the Will")
				}
			}
			t.Logf("failed %d calls %v after the kill", calls, time.Since(start))
			if got := r.OnlineAgents(ctx); len(got) != 1 || got[0] != other {
				t.Fatalf("OnlineAgents = %v, want [%s]", got, other)
			}
			steady.reply(t, q.topic, q.env.CorrelationID, rqResult(q.env.CorrelationID, `{"content":[]}`))
			if err := rqRecv(t, kept); err != nil {
				t.Fatalf("the call to %s: %v", other, err)
			}
			if s := r.Stats(); s.Pending != 0 {
				t.Fatalf("pending %d", s.Pending)
			}
		})
	}
}

// Send carries the client's answer to an agent's own request (here
// sampling/createMessage) back to the instance that asked, tied to the
// call: on the request topic that names it (its request claimed the call).
func TestRequesterSendAnswersAgentRequest(t *testing.T) {
	e := rqStartBroker(t)
	agent := e.raw(t, rqRawOpts{clientID: "sampler"})
	agent.serve(t)
	agent.announce(t, contract.StatusOnline)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{})
	c := rqCtx(1)

	if err := r.Send(rqContext(t), c, "c-nope", &jsonrpc.Message{JSONRPC: jsonrpc.Version}); !errors.Is(err, requester.ErrNoCall) {
		t.Fatalf("Send without a call: %v", err)
	}
	ctx := rqContext(t)
	type result struct {
		res json.RawMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := r.CallTool(ctx, c, e.AgentUser, nil, "ask", nil, func(corrID string, m *jsonrpc.Message) {
			if m.Method != "sampling/createMessage" {
				t.Errorf("interim %s", m.Method)
				return
			}
			// The interim callback runs on the waiting goroutine, so it may
			// publish.
			err := r.Send(ctx, c, corrID, &jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: m.ID, Result: json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"hi"}}`)})
			if err != nil {
				t.Error(err)
			}
			// The same call is not open in another context.
			if err := r.Send(ctx, rqCtx(2), corrID, &jsonrpc.Message{JSONRPC: jsonrpc.Version}); !errors.Is(err, requester.ErrNoCall) {
				t.Errorf("Send in another context: %v", err)
			}
		})
		done <- result{res, err}
	}()
	q := agent.nextRequest(t)
	if q.topic != c.RequestTopic(e.AgentUser, contract.AnyInstance) {
		t.Fatalf("request on %s, want the pool's topic", q.topic)
	}
	id := q.env.CorrelationID
	agent.reply(t, q.topic, id, `{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"maxTokens":5}}`)
	a := agent.nextRequest(t)
	if a.env.CorrelationID != id || string(a.msg.ID) != `"s-1"` || a.topic != c.RequestTopic(e.AgentUser, "sampler") {
		t.Fatalf("answer to the agent's request: %+v", a)
	}
	var ans struct {
		Result struct {
			Content struct{ Text string } `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(a.env.Message, &ans); err != nil {
		t.Fatal(err)
	}
	agent.reply(t, q.topic, id, rqResult(id, fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, "model said "+ans.Result.Content.Text)))
	got := rqRecv(t, done)
	res, err := got.res, got.err
	if err != nil {
		t.Fatal(err)
	}
	if got := rqText(t, res); got != "model said hi" {
		t.Fatalf("got %q", got)
	}
}

// Contexts leave the broker when the LRU overflows and when they expire.
func TestRequesterContextsLeaveTheBroker(t *testing.T) {
	e := rqStartBroker(t)
	e.startAgent(t, "echoer", rqEchoTool())
	call := func(r *requester.Requester, i int) {
		t.Helper()
		if _, err := r.CallTool(rqContext(t), rqCtx(i), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("overflow", func(t *testing.T) {
		r := rqRequester(t, e.Broker.Bus(), requester.Options{MaxContexts: 2})
		call(r, 1)
		call(r, 2)
		call(r, 3)
		rqPoll(t, "context 1 unsubscribed", func() bool { return !e.Broker.InlineSubscribed(rqCtx(1).ReplyFilter()) })
		for _, i := range []int{2, 3} {
			if !e.Broker.InlineSubscribed(rqCtx(i).ReplyFilter()) {
				t.Errorf("context %d not subscribed", i)
			}
		}
		call(r, 1) // comes back
		if s := r.Stats(); s.Evictions != 2 || s.Unsubscribes < 1 || s.Subscribes != 4 || s.Contexts != 2 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		r := rqRequester(t, e.Broker.Bus(), requester.Options{ContextTTL: 100 * time.Millisecond})
		call(r, 4)
		if !e.Broker.InlineSubscribed(rqCtx(4).ReplyFilter()) {
			t.Fatal("not subscribed")
		}
		rqPoll(t, "context 4 expired", func() bool { return !e.Broker.InlineSubscribed(rqCtx(4).ReplyFilter()) })
		// The counter moves once Unsubscribe has returned, just after the
		// broker dropped the subscription.
		rqPoll(t, "the unsubscribe counted", func() bool { return r.Stats().Unsubscribes > 0 })
		if s := r.Stats(); s.Expired != 1 || s.Unsubscribes != 1 || s.Contexts != 0 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("close", func(t *testing.T) {
		r := requester.New(e.Broker.Bus(), requester.Options{})
		if err := r.Start(rqContext(t)); err != nil {
			t.Fatal(err)
		}
		call(r, 5)
		call(r, 6)
		if err := r.Close(rqContext(t)); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{rqCtx(5).ReplyFilter(), rqCtx(6).ReplyFilter(), contract.PresenceFilter} {
			if e.Broker.InlineSubscribed(f) {
				t.Errorf("%s still subscribed after Close", f)
			}
		}
		if _, err := r.ListTools(rqContext(t), rqCtx(5), e.AgentUser, nil); !errors.Is(err, requester.ErrClosed) {
			t.Errorf("after Close: %v", err)
		}
	})
}

// Close fails waiting calls with ErrClosed and leaves no goroutine.
func TestRequesterCloseFailsPending(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // registered first: runs last
	e := rqStartBroker(t)
	silent := e.raw(t, rqRawOpts{clientID: "silent"})
	silent.serve(t)
	silent.announce(t, contract.StatusOnline)
	for _, kind := range []busKind{busInline, busPaho} {
		r := requester.New(e.bus(t, kind), requester.Options{Logger: rqLogger(t, "requester")})
		if err := r.Start(rqContext(t)); err != nil {
			t.Fatal(err)
		}
		errc := rqGo(func() error { _, err := r.ListTools(rqContext(t), rqCtx(1), e.AgentUser, nil); return err })
		silent.nextRequest(t)
		if err := r.Close(rqContext(t)); err != nil {
			t.Fatal(err)
		}
		if err := rqRecv(t, errc); !errors.Is(err, requester.ErrClosed) {
			t.Fatalf("%s: got %v, want ErrClosed", kind, err)
		}
		if err := r.Close(rqContext(t)); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

func TestRequesterRejectsBadInput(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{IgnorePresence: true})
	bad := rqCtx(1)
	bad.UserID = "a/b"
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"context with a bad level", func() error {
			_, err := r.Request(rqContext(t), bad, e.AgentUser, nil, "ping", nil, nil)
			return err
		}},
		{"empty agent", func() error { _, err := r.Request(rqContext(t), rqCtx(1), "", nil, "ping", nil, nil); return err }},
		{"agent with a /", func() error { _, err := r.Request(rqContext(t), rqCtx(1), "a/b", nil, "ping", nil, nil); return err }},
		{"wildcard agent", func() error { _, err := r.Request(rqContext(t), rqCtx(1), "+", nil, "ping", nil, nil); return err }},
		{"empty method", func() error { _, err := r.Request(rqContext(t), rqCtx(1), e.AgentUser, nil, "", nil, nil); return err }},
		{"invalid params", func() error {
			_, err := r.Request(rqContext(t), rqCtx(1), e.AgentUser, nil, "ping", json.RawMessage(`{bad`), nil)
			return err
		}},
		{"invalid arguments", func() error {
			_, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "x", json.RawMessage(`nope`), nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil {
				t.Error("accepted")
			}
		})
	}
	if s := r.Stats(); s.Pending != 0 || s.Subscribes != 0 {
		t.Errorf("a refused call left a trace: %+v", s)
	}
	unstarted := requester.New(e.Broker.Bus(), requester.Options{})
	if _, err := unstarted.Request(rqContext(t), rqCtx(1), e.AgentUser, nil, "ping", nil, nil); !errors.Is(err, requester.ErrNotStarted) {
		t.Errorf("before Start: %v", err)
	}
	if err := unstarted.Close(rqContext(t)); err != nil {
		t.Error(err)
	}
}

// A reply in the call's context under another agent's name, from an
// identity that may publish there (a second expert-agent identity, replying
// as itself; or the inline client, which the ACL does not check), never
// completes the call nor reaches its interim callback: the requester
// counts it Mismatched, and the call still gets its own agent's answer.
func TestRequesterReplyFromAnotherAgent(t *testing.T) {
	e := rqStartBroker(t)
	const other = "agent2"
	target := e.raw(t, rqRawOpts{clientID: "target"})
	target.serve(t)
	target.announce(t, contract.StatusOnline)
	impostor := e.raw(t, rqRawOpts{clientID: "impostor", username: other, password: e.addAgentIdentity(t, other)})
	impostor.announce(t, contract.StatusOnline) // an agent of its own, online
	bus := e.Broker.Bus()
	r := rqRequester(t, bus, requester.Options{CallTimeout: time.Minute})
	c := rqCtx(1)

	for i, tc := range []struct {
		name  string
		topic string
		send  func(t *testing.T, topic string, payload []byte)
	}{
		{"another agent identity", c.ReplyTopic(other, "impostor"), func(t *testing.T, topic string, payload []byte) {
			impostor.publish(t, topic, false, payload)
		}},
		{"inline client as another agent", c.ReplyTopic("agent3", "x"), func(t *testing.T, topic string, payload []byte) {
			if err := bus.Publish(rqContext(t), topic, payload); err != nil {
				t.Fatal(err)
			}
		}},
		{"inline client as another agent, the target's instance", c.ReplyTopic(other, "target"), func(t *testing.T, topic string, payload []byte) {
			if err := bus.Publish(rqContext(t), topic, payload); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var interims []string
			type result struct {
				res json.RawMessage
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := r.CallTool(rqContext(t), c, e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), func(_ string, m *jsonrpc.Message) {
					interims = append(interims, m.Method)
				})
				done <- result{res, err}
			}()
			q := target.nextRequest(t)
			id := q.env.CorrelationID
			tc.send(t, tc.topic, rqEnvelope(t, id, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"forged"}}`))
			tc.send(t, tc.topic, rqEnvelope(t, id, rqResult(id, `{"content":[{"type":"text","text":"forged"}]}`)))
			want := uint64(2 * (i + 1))
			rqPoll(t, "the forged replies counted", func() bool { return r.Stats().Mismatched == want })
			select {
			case got := <-done:
				t.Fatalf("the call ended on a forged reply: %s %v", got.res, got.err)
			default:
			}

			target.reply(t, q.topic, id, rqResult(id, `{"content":[{"type":"text","text":"the real answer"}]}`))
			got := rqRecv(t, done)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if text := rqText(t, got.res); text != "the real answer" {
				t.Fatalf("completed with %q", text)
			}
			if len(interims) != 0 {
				t.Fatalf("forged interim messages %v reached the caller", interims)
			}
			if s := r.Stats(); s.Mismatched != want || s.Claims != uint64(i+1) || s.Dropped != 0 || s.Late != 0 || s.Duplicates != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// Once an instance has claimed a call (its first message on its reply
// topic), what the gateway sends for the call goes to that instance alone:
// here the notifications/cancelled of a cancelled call, on the request
// topic that names the instance rather than the pool's.
func TestRequesterCancelGoesToClaimingInstance(t *testing.T) {
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			e := rqStartBroker(t)
			worker := e.raw(t, rqRawOpts{clientID: "worker"})
			worker.serve(t)
			worker.announce(t, contract.StatusOnline)
			r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: time.Minute})
			c := rqCtx(1)

			ctx, cancel := context.WithCancel(rqContext(t))
			defer cancel()
			errc := rqGo(func() error {
				_, err := r.CallTool(ctx, c, e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
				return err
			})
			q := worker.nextRequest(t)
			if q.topic != c.RequestTopic(e.AgentUser, contract.AnyInstance) {
				t.Fatalf("request on %s, want the pool's topic", q.topic)
			}
			worker.reply(t, q.topic, q.env.CorrelationID, `{"jsonrpc":"2.0","method":"`+contract.ClaimMethod+`"}`)
			rqPoll(t, "the call claimed", func() bool { return r.Stats().Claims == 1 })
			cancel()
			if err := rqRecv(t, errc); !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			n := worker.nextRequest(t)
			var p struct {
				RequestID string `json:"requestId"`
				Reason    string `json:"reason"`
			}
			if err := json.Unmarshal(n.msg.Params, &p); err != nil || n.msg.Method != "notifications/cancelled" ||
				p.RequestID != q.env.CorrelationID || p.Reason != "cancelled by the client" || n.topic != c.RequestTopic(e.AgentUser, "worker") {
				t.Fatalf("after the cancel: %s %+v on %s (%v)", n.msg.Method, p, n.topic, err)
			}
		})
	}
}

// A round whose requestState names the instance that holds the request
// (contract.HoldState) goes to that instance alone, whichever the pool
// would pick; one naming an instance that is not online fails at once.
func TestRequesterHeldRound(t *testing.T) {
	e := rqStartBroker(t)
	var insts []*rqRaw
	for _, id := range []string{"a1", "a2"} {
		in := e.raw(t, rqRawOpts{clientID: id})
		in.serve(t)
		in.announce(t, contract.StatusOnline)
		insts = append(insts, in)
	}
	r := rqRequester(t, e.bus(t, busInline), requester.Options{CallTimeout: time.Minute})
	c := rqCtx(1)
	rqPoll(t, "both instances online", func() bool { return len(r.Agents()) == 2 })
	for i := range 4 {
		params, _ := json.Marshal(map[string]any{"name": "x", "requestState": contract.HoldState("a2", fmt.Sprint("state-", i))})
		got := rqGo(func() error {
			m, err := r.Request(rqContext(t), c, e.AgentUser, nil, "tools/call", params, nil)
			if err == nil && string(m.Result) != `{"n":1}` {
				err = fmt.Errorf("result %s", m.Result)
			}
			return err
		})
		q := insts[1].nextRequest(t)
		if q.topic != c.RequestTopic(e.AgentUser, "a2") {
			t.Fatalf("round %d went to %s, want instance a2's own topic", i, q.topic)
		}
		insts[1].reply(t, q.topic, q.env.CorrelationID, rqResult(q.env.CorrelationID, `{"n":1}`))
		if err := rqRecv(t, got); err != nil {
			t.Fatal(err)
		}
	}

	params, _ := json.Marshal(map[string]any{"name": "x", "requestState": contract.HoldState("a9", "s")})
	if _, err := r.Request(rqContext(t), c, e.AgentUser, nil, "tools/call", params, nil); !errors.Is(err, requester.ErrAgentGone) {
		t.Errorf("a round held by an instance not online: %v, want ErrAgentGone", err)
	}
}

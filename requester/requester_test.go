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
						res, err := r.CallTool(rqContext(t), rqCtx(i), &contract.Caller{UserID: rqCtx(i).UserID}, "echo", args, nil)
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
// deadline, the agent is told notifications/cancelled, the pending table is
// empty and the call left no goroutine behind.
func TestRequesterTimeout(t *testing.T) {
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			e := rqStartBroker(t)
			silent := e.raw(t, rqRawOpts{clientID: "silent"})
			silent.subscribe(t, contract.RequestFilter)
			silent.announce(t, "silent", contract.StatusOnline)
			r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: 300 * time.Millisecond})
			c := rqCtx(1)
			// Warm the context up, so that its subscription is not counted as
			// a goroutine-free leak below.
			warm := rqGo(func() error { _, err := r.ListTools(rqContext(t), c, nil); return err })
			q0 := silent.nextRequest(t)
			silent.reply(t, q0.topic, q0.env.CorrelationID, rqResult(q0.env.CorrelationID, `{"tools":[]}`))
			if err := rqRecv(t, warm); err != nil {
				t.Fatal(err)
			}
			baseline := runtime.NumGoroutine()

			start := time.Now()
			_, err := r.CallTool(rqContext(t), c, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
			if !errors.Is(err, requester.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			if el := time.Since(start); el < 300*time.Millisecond {
				t.Fatalf("returned after %v, before the deadline", el)
			}
			q := silent.nextRequest(t)
			if q.msg.Method != "tools/call" || q.env.Deadline == 0 {
				t.Fatalf("request %+v", q)
			}
			cancel := silent.nextRequest(t)
			var p struct {
				RequestID string `json:"requestId"`
				Reason    string `json:"reason"`
			}
			if err := json.Unmarshal(cancel.msg.Params, &p); err != nil || cancel.msg.Method != "notifications/cancelled" ||
				p.RequestID != q.env.CorrelationID || cancel.env.CorrelationID != q.env.CorrelationID || cancel.topic != c.RequestTopic() {
				t.Fatalf("after the timeout: %s %+v (%v)", cancel.msg.Method, p, err)
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
		_, err := r.CallTool(ctx, rqCtx(1), nil, "block", nil, nil)
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
// correlationId, another context's topic, unknown versions, oversize
// envelopes, responses to another id. Each is dropped and counted, and the
// call still gets its real answer.
func TestRequesterDropsBadReplies(t *testing.T) {
	e := rqStartBroker(t, func(o *broker.Options) { o.MaxPacketSize = contract.MaxEnvelopeSize + 1<<20 })
	rogue := e.raw(t, rqRawOpts{clientID: "rogue"})
	rogue.subscribe(t, contract.RequestFilter)
	rogue.announce(t, "rogue", contract.StatusOnline)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{})
	a, b := rqCtx(1), rqCtx(2)

	// Context b is subscribed (a finished call), so a reply on its topic
	// reaches the requester.
	warm := rqGo(func() error { _, err := r.ListTools(rqContext(t), b, nil); return err })
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
		res, err := r.CallTool(rqContext(t), a, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		done <- result{res, err}
	}()
	q := rogue.nextRequest(t)
	id := q.env.CorrelationID
	resA := a.ResponseTopic()
	good := rqResult(id, `{"content":[{"type":"text","text":"the real answer"}]}`)
	envelope := func(v int, corr, msg string) []byte {
		p, _ := json.Marshal(map[string]any{"v": v, "correlationId": corr, "message": json.RawMessage(msg)})
		return p
	}
	oversize := envelope(1, id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"pad":"%s"}}`, id, strings.Repeat("x", contract.MaxEnvelopeSize)))
	for _, bad := range []struct {
		name    string
		topic   string
		payload []byte
	}{
		{"not json", resA, []byte("garbage")},
		{"no correlationId", resA, envelope(1, "", good)},
		{"unknown version", resA, envelope(2, id, good)},
		{"message not an object", resA, envelope(1, id, `"hello"`)},
		{"oversize", resA, oversize},
		{"not JSON-RPC 2.0", resA, envelope(1, id, fmt.Sprintf(`{"jsonrpc":"1.0","id":%q,"result":{}}`, id))},
		{"response to another id", resA, envelope(1, id, rqResult("c-someone-else", `{}`))},
		{"response with neither result nor error", resA, envelope(1, id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q}`, id))},
	} {
		rogue.publish(t, bad.topic, false, bad.payload)
	}
	const dropped = 8
	rogue.publish(t, resA, false, envelope(1, "c-forged-or-old", good)) // late
	rogue.publish(t, b.ResponseTopic(), false, envelope(1, id, good))   // mismatched
	rogue.publish(t, resA, false, envelope(1, id, rqResult(id, `{"content":[{"type":"text","text":"the real answer"}]}`)))
	rogue.publish(t, resA, false, envelope(1, id, rqResult(id, `{"content":[{"type":"text","text":"second"}]}`))) // duplicate

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
			m, err := r.Request(rqContext(t), rqCtx(1), nil, "tools/call", params, func(corrID string, msg *jsonrpc.Message) {
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
	_, err := r.CallTool(rqContext(t), rqCtx(1), nil, "no-such-tool", nil, nil)
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("got %v, want a -32602 *jsonrpc.Error", err)
	}
	tools, err := r.ListTools(rqContext(t), rqCtx(1), nil)
	if err != nil || !strings.Contains(string(tools), `"echo"`) {
		t.Fatalf("tools/list: %s %v", tools, err)
	}
}

// No agent online: a call fails with ErrNoAgent at once (not at its
// deadline), whether no agent ever came or the last one stopped.
func TestRequesterNoAgent(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute})
	ctx := rqContext(t)
	if _, err := r.ListTools(ctx, rqCtx(1), nil); !errors.Is(err, requester.ErrNoAgent) {
		t.Fatalf("no agent yet: got %v, want ErrNoAgent", err)
	}
	agent := e.startAgent(t, "echoer", rqEchoTool())
	rqPoll(t, "agent seen online", func() bool { a := r.Agents(); return len(a) == 1 && a[0].Online })
	if _, err := r.CallTool(ctx, rqCtx(1), nil, "echo", json.RawMessage(`{"text":"x"}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := agent.stop(t); err != nil {
		t.Fatal(err)
	}
	rqPoll(t, "agent seen offline", func() bool { a := r.Agents(); return len(a) == 1 && !a[0].Online })
	if a := r.Agents()[0]; a.ClientID != agent.agent.ClientID() || a.Name != "echoer" || a.Version != "test" {
		t.Errorf("agent status %+v", a)
	}
	if _, err := r.CallTool(ctx, rqCtx(1), nil, "echo", json.RawMessage(`{"text":"x"}`), nil); !errors.Is(err, requester.ErrNoAgent) {
		t.Fatalf("agent gone: got %v, want ErrNoAgent", err)
	}
	// IgnorePresence sends anyway (and so times out here).
	r2 := rqRequester(t, e.Broker.Bus(), requester.Options{IgnorePresence: true, CallTimeout: 50 * time.Millisecond})
	if _, err := r2.ListTools(ctx, rqCtx(9), nil); !errors.Is(err, requester.ErrTimeout) {
		t.Fatalf("IgnorePresence: got %v, want ErrTimeout", err)
	}
}

// An agent killed without DISCONNECT: the broker publishes its Will
// (offline), and calls waiting for it fail with ErrNoAgent at once.
func TestRequesterAgentKilledWillFailsPending(t *testing.T) {
	for _, kind := range []busKind{busInline, busPaho} {
		t.Run(string(kind), func(t *testing.T) {
			e := rqStartBroker(t)
			const id = "doomed"
			doomed := e.raw(t, rqRawOpts{clientID: id, will: &contract.Presence{Status: contract.StatusOffline, ClientID: id}})
			doomed.subscribe(t, contract.RequestFilter)
			doomed.announce(t, id, contract.StatusOnline)
			r := rqRequester(t, e.bus(t, kind), requester.Options{CallTimeout: time.Minute})
			rqPoll(t, "agent online", func() bool { a := r.Agents(); return len(a) == 1 && a[0].Online })

			const calls = 5
			errc := make(chan error, calls)
			for i := range calls {
				go func() {
					_, err := r.CallTool(rqContext(t), rqCtx(i), nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
					errc <- err
				}()
			}
			for range calls {
				doomed.nextRequest(t) // every call is out, waiting
			}
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
			if s := r.Stats(); s.Pending != 0 {
				t.Fatalf("pending %d", s.Pending)
			}
		})
	}
}

// Send carries the client's answer to an agent's own request (here
// sampling/createMessage) back on the request topic, tied to the call.
func TestRequesterSendAnswersAgentRequest(t *testing.T) {
	e := rqStartBroker(t)
	agent := e.raw(t, rqRawOpts{clientID: "sampler"})
	agent.subscribe(t, contract.RequestFilter)
	agent.announce(t, "sampler", contract.StatusOnline)
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
		res, err := r.CallTool(ctx, c, nil, "ask", nil, func(corrID string, m *jsonrpc.Message) {
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
	id := q.env.CorrelationID
	agent.reply(t, q.topic, id, `{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"maxTokens":5}}`)
	a := agent.nextRequest(t)
	if a.env.CorrelationID != id || string(a.msg.ID) != `"s-1"` || a.topic != c.RequestTopic() {
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
		if _, err := r.CallTool(rqContext(t), rqCtx(i), nil, "echo", json.RawMessage(`{"text":"x"}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("overflow", func(t *testing.T) {
		r := rqRequester(t, e.Broker.Bus(), requester.Options{MaxContexts: 2})
		call(r, 1)
		call(r, 2)
		call(r, 3)
		rqPoll(t, "context 1 unsubscribed", func() bool { return !e.Broker.InlineSubscribed(rqCtx(1).ResponseTopic()) })
		for _, i := range []int{2, 3} {
			if !e.Broker.InlineSubscribed(rqCtx(i).ResponseTopic()) {
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
		if !e.Broker.InlineSubscribed(rqCtx(4).ResponseTopic()) {
			t.Fatal("not subscribed")
		}
		rqPoll(t, "context 4 expired", func() bool { return !e.Broker.InlineSubscribed(rqCtx(4).ResponseTopic()) })
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
		for _, f := range []string{rqCtx(5).ResponseTopic(), rqCtx(6).ResponseTopic(), contract.PresenceFilter} {
			if e.Broker.InlineSubscribed(f) {
				t.Errorf("%s still subscribed after Close", f)
			}
		}
		if _, err := r.ListTools(rqContext(t), rqCtx(5), nil); !errors.Is(err, requester.ErrClosed) {
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
	silent.subscribe(t, contract.RequestFilter)
	silent.announce(t, "silent", contract.StatusOnline)
	for _, kind := range []busKind{busInline, busPaho} {
		r := requester.New(e.bus(t, kind), requester.Options{Logger: rqLogger(t, "requester")})
		if err := r.Start(rqContext(t)); err != nil {
			t.Fatal(err)
		}
		errc := rqGo(func() error { _, err := r.ListTools(rqContext(t), rqCtx(1), nil); return err })
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
	if _, err := r.Request(rqContext(t), bad, nil, "ping", nil, nil); err == nil {
		t.Error("context with a bad level accepted")
	}
	if _, err := r.Request(rqContext(t), rqCtx(1), nil, "ping", json.RawMessage(`{bad`), nil); err == nil {
		t.Error("invalid params accepted")
	}
	if _, err := r.CallTool(rqContext(t), rqCtx(1), nil, "x", json.RawMessage(`nope`), nil); err == nil {
		t.Error("invalid arguments accepted")
	}
	unstarted := requester.New(e.Broker.Bus(), requester.Options{})
	if _, err := unstarted.Request(rqContext(t), rqCtx(1), nil, "ping", nil, nil); !errors.Is(err, requester.ErrNotStarted) {
		t.Errorf("before Start: %v", err)
	}
	if err := unstarted.Close(rqContext(t)); err != nil {
		t.Error(err)
	}
}

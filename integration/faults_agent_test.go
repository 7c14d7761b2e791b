package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// The fault suite: an expert agent or the broker misbehaves while an
// official MCP client calls through the gateway. Each case checks what the
// client sees, that the gateway recovers by itself (a later call works),
// and, through assertSettled, that nothing is left behind.

// faultEnv is a running toolbus without an agent: each case brings its own,
// a misbehaving fakeAgent (paho) or the SDK test agent.
type faultEnv struct {
	*gwEnv
	reqs *reqTopics
	// baseline is the goroutine count assertSettled comes back to.
	baseline int
}

// goroutineSlack is how far above the baseline assertSettled accepts the
// goroutine count: a connection the HTTP client or the broker is still
// tearing down, a paho reconnect timer.
const goroutineSlack = 10

// startFaults starts toolbus for a fault test. When the test ends (after
// every cleanup registered later, servers and agents included), no
// goroutine it started may be left.
func startFaults(t *testing.T, cfg server.Config) *faultEnv {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { // registered first: runs last
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
	srv := startServer(t, cfg)
	e := &faultEnv{gwEnv: &gwEnv{srv: srv, base: "http://" + srv.HTTPAddr().String()}}
	e.reqs = watchReqTopics(t, srv)
	return e
}

// markBaseline takes the goroutine count that assertSettled expects back:
// call it once the case's agents and clients are up.
func (e *faultEnv) markBaseline() {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	e.baseline = runtime.NumGoroutine()
}

// assertSettled waits (bounded) until the gateway is back at rest after a
// fault: no call pending, every context the requester holds subscribed on
// the broker with its reply filter, no reply filter subscribed that the
// requester does not hold, and the goroutine count back near the baseline.
func assertSettled(t *testing.T, e *faultEnv) {
	t.Helper()
	rq, br := e.srv.Requester(), e.srv.Broker()
	why := ""
	settled := func() bool {
		st := rq.Stats()
		if st.Pending != 0 {
			why = fmt.Sprintf("%d calls pending", st.Pending)
			return false
		}
		held := map[string]bool{}
		for _, c := range rq.Contexts("") {
			filter := c.Context.ReplyFilter()
			held[filter] = true
			if !br.InlineSubscribed(filter) {
				why = "context held without its subscription: " + filter
				return false
			}
		}
		if len(held) != st.Contexts {
			why = fmt.Sprintf("Contexts lists %d, Stats counts %d", len(held), st.Contexts)
			return false
		}
		for _, filter := range e.reqs.replyFilters() {
			if !held[filter] && br.InlineSubscribed(filter) {
				why = "stale subscription: " + filter
				return false
			}
		}
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if n := runtime.NumGoroutine(); n > e.baseline+goroutineSlack {
			why = fmt.Sprintf("%d goroutines, baseline %d", n, e.baseline)
			return false
		}
		return true
	}
	deadline := time.Now().Add(15 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatalf("not settled after the fault: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reqTopics records the contexts of the requests the gateway publishes (an
// inline subscription to every agent's requests: it sees the gateway's own
// publishes before Publish returns), as the reply filters the gateway may
// have subscribed.
type reqTopics struct {
	mu     sync.Mutex
	topics map[string]bool // reply filters
}

func watchReqTopics(t *testing.T, srv *server.Server) *reqTopics {
	t.Helper()
	w := &reqTopics{topics: map[string]bool{}}
	bus := srv.Broker().Bus()
	if err := bus.Subscribe(testCtx(t, 5*time.Second), allRequests, func(topic string, _ []byte) {
		rt, err := contract.ParseTopic(topic)
		if err != nil {
			t.Errorf("request on %s: %v", topic, err)
			return
		}
		w.mu.Lock()
		w.topics[rt.Context.ReplyFilter()] = true
		w.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = bus.Unsubscribe(ctx, allRequests)
	})
	return w
}

func (w *reqTopics) replyFilters() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.topics))
	for topic := range w.topics {
		out = append(out, topic)
	}
	sort.Strings(out)
	return out
}

// fakeAgent is a misbehaving expert agent: a plain paho client logged in
// with the expert-agent identity fakeAgentName (every fake agent is an
// instance of that one agent, with its own client ID). It subscribes to
// the agent's requests without $share (each instance gets every request
// for any instance) and to its own instance's, keeps its presence like a
// real agent (retained online status, Last Will offline) and answers
// tools/list with one tool, "fault"; every tools/call goes to calls, and
// the test decides what to do with it. It publishes from its own
// goroutine, never from paho's handler.
type fakeAgent struct {
	t        *testing.T
	clientID string
	client   paho.Client
	kill     func() // closes the TCP connection without DISCONNECT: a crash
	in       chan paho.Message
	calls    chan fakeCall
	cancels  chan fakeCall // notifications/cancelled
	done     chan struct{}
	wg       sync.WaitGroup
}

// fakeCall is one request the fake agent received.
type fakeCall struct {
	reqTopic string
	replyTo  string // the reply topic of the request's context, as the instance that got it
	env      contract.Envelope
	msg      jsonrpc.Message
	text     string // the "text" argument of a tools/call
}

func (c fakeCall) resTopic() string { return c.replyTo }

const (
	fakeAgentName = "fake"
	fakePassword  = "fake-agent-password-1"
)

// fakeToolList is the fake agent's tools/list result.
const fakeToolList = `{"tools":[{"name":"fault","description":"Misbehaves as the test says.",` +
	`"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}},"annotations":{"readOnlyHint":true}}]}`

// startFakeAgent connects a fake agent with client ID clientID and waits
// until the gateway sees it online. The test's cleanup takes it offline
// (unless it crashed) and disconnects it.
func startFakeAgent(t *testing.T, e *faultEnv, clientID string) *fakeAgent {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if _, err := e.srv.Store().Identity(ctx, fakeAgentName); err != nil {
		if _, err := e.srv.Store().AddIdentity(ctx, fakeAgentName, acl.RoleExpertAgent, []byte(fakePassword)); err != nil {
			t.Fatal(err)
		}
	}
	a := &fakeAgent{t: t, clientID: clientID, in: make(chan paho.Message, 4096),
		calls: make(chan fakeCall, 64), cancels: make(chan fakeCall, 64), done: make(chan struct{})}
	open, kill := testenv.KillableConn()
	a.kill = kill
	will, _ := json.Marshal(contract.Presence{Status: contract.StatusOffline, ClientID: clientID, Name: "fake"})
	opts := paho.NewClientOptions().AddBroker("tcp://"+e.srv.MQTTAddr().String()).
		SetClientID(clientID).SetUsername(fakeAgentName).SetPassword(fakePassword).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5*time.Second).SetCleanSession(true).
		SetCustomOpenConnectionFn(open).
		SetBinaryWill(contract.PresenceTopic(fakeAgentName, clientID), will, 1, true)
	a.client = paho.NewClient(opts)
	if tok := a.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("fake agent connect: %v", tok.Error())
	}
	a.wg.Add(1)
	go a.serve()
	t.Cleanup(a.stop)
	tok := a.client.SubscribeMultiple(map[string]byte{
		contract.RequestFilter(fakeAgentName, contract.AnyInstance): 1,
		contract.RequestFilter(fakeAgentName, clientID):             1,
	}, func(_ paho.Client, m paho.Message) {
		select {
		case a.in <- m:
		case <-a.done:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("fake agent subscribe: %v", tok.Error())
	}
	for f, code := range tok.(*paho.SubscribeToken).Result() {
		if code == 0x80 {
			t.Fatalf("fake agent subscribe %s: refused", f)
		}
	}
	online, _ := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: clientID, Name: "fake"})
	a.publish(contract.PresenceTopic(fakeAgentName, clientID), online, true)
	poll(t, 10*time.Second, "fake agent "+clientID+" online", func() bool { return agentOnline(e.srv, clientID) })
	return a
}

// serve answers tools/list and hands the rest to the test.
func (a *fakeAgent) serve() {
	defer a.wg.Done()
	for {
		var m paho.Message
		select {
		case m = <-a.in:
		case <-a.done:
			return
		}
		c := fakeCall{reqTopic: m.Topic()}
		rt, err := contract.ParseTopic(m.Topic())
		if err != nil || rt.Kind != contract.Request || rt.Agent != fakeAgentName {
			a.t.Errorf("fake agent: a request on %s", m.Topic())
			continue
		}
		c.replyTo = rt.Context.ReplyTopic(fakeAgentName, a.clientID)
		if c.env, err = contract.DecodeEnvelope(m.Payload()); err != nil {
			a.t.Errorf("fake agent: bad request envelope: %v", err)
			continue
		}
		if err := json.Unmarshal(c.env.Message, &c.msg); err != nil {
			a.t.Errorf("fake agent: bad request message: %v", err)
			continue
		}
		switch c.msg.Method {
		case "tools/list":
			a.reply(c, json.RawMessage(fakeToolList))
		case "tools/call":
			var p struct {
				Arguments struct {
					Text string `json:"text"`
				} `json:"arguments"`
			}
			_ = json.Unmarshal(c.msg.Params, &p)
			c.text = p.Arguments.Text
			a.calls <- c
		case "notifications/cancelled":
			a.cancels <- c
		}
	}
}

// stop takes the agent offline and disconnects it.
func (a *fakeAgent) stop() {
	if a.client.IsConnectionOpen() {
		offline, _ := json.Marshal(contract.Presence{Status: contract.StatusOffline, ClientID: a.clientID, Name: "fake"})
		a.client.Publish(contract.PresenceTopic(fakeAgentName, a.clientID), 1, true, offline).WaitTimeout(5 * time.Second)
	}
	a.client.Disconnect(100)
	close(a.done)
	a.wg.Wait()
}

// publish sends payload at QoS 1 and waits for the broker's PUBACK.
func (a *fakeAgent) publish(topic string, payload []byte, retained bool) {
	if tok := a.client.Publish(topic, 1, retained, payload); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		a.t.Errorf("fake agent publish on %s: %v", topic, tok.Error())
	}
}

// replyOn publishes a final response for correlationID on topic.
func (a *fakeAgent) replyOn(topic, correlationID string, result json.RawMessage) {
	id, _ := json.Marshal(correlationID)
	msg, _ := json.Marshal(jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: id, Result: result})
	env := contract.Envelope{CorrelationID: correlationID, Message: msg}
	payload, err := env.Encode()
	if err != nil {
		a.t.Fatal(err)
	}
	a.publish(topic, payload, false)
}

func (a *fakeAgent) reply(c fakeCall, result json.RawMessage) {
	a.replyOn(c.resTopic(), c.env.CorrelationID, result)
}

// textResult is a tools/call result with one text content.
func textResult(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	return b
}

// next waits for the next tools/call.
func (a *fakeAgent) next(t *testing.T) fakeCall {
	t.Helper()
	select {
	case c := <-a.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the fake agent got no tools/call")
		return fakeCall{}
	}
}

// works checks that a normal call goes through: the client calls "fault"
// with text, the agent answers text, the client gets it.
func (a *fakeAgent) works(t *testing.T, cs *mcp.ClientSession, text string) {
	t.Helper()
	ch := callAsync(t, cs, "fault", text)
	a.reply(a.next(t), textResult(text))
	wantText(t, await(t, ch), text)
}

// nextCancel waits for the notifications/cancelled of correlationID.
func (a *fakeAgent) nextCancel(t *testing.T, correlationID string) fakeCall {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-a.cancels:
			var p struct {
				RequestID string `json:"requestId"`
			}
			_ = json.Unmarshal(c.msg.Params, &p)
			if p.RequestID == correlationID {
				return c
			}
		case <-timeout:
			t.Fatalf("no notifications/cancelled for %s", correlationID)
			return fakeCall{}
		}
	}
}

// outcome is what CallTool returned.
type outcome struct {
	res *mcp.CallToolResult
	err error
}

// callAsync calls tool "fault" (or name) with text on cs in the background.
func callAsync(t *testing.T, cs *mcp.ClientSession, name, text string) <-chan outcome {
	t.Helper()
	ctx := testCtx(t, 25*time.Second)
	ch := make(chan outcome, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": text}})
		ch <- outcome{res, err}
	}()
	return ch
}

// await waits for an outcome and fails the test on a protocol error.
func await(t *testing.T, ch <-chan outcome) *mcp.CallToolResult {
	t.Helper()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("tools/call: %v", o.err)
		}
		return o.res
	case <-time.After(25 * time.Second):
		t.Fatal("tools/call did not return")
		return nil
	}
}

// wantText checks a successful result with exactly text.
func wantText(t *testing.T, res *mcp.CallToolResult, text string) {
	t.Helper()
	if res.IsError {
		t.Fatalf("isError result: %s", clipName(textOf(t, res)))
	}
	if got := textOf(t, res); got != text {
		t.Fatalf("text = %q, want %q", clipName(got), clipName(text))
	}
}

// wantToolError checks an isError result whose text says what happened.
func wantToolError(t *testing.T, res *mcp.CallToolResult, says string) {
	t.Helper()
	if !res.IsError || !strings.Contains(textOf(t, res), says) {
		t.Fatalf("want an isError result saying %q, got isError=%v %q", says, res.IsError, clipName(textOf(t, res)))
	}
}

// Texts of the gateway's tool results for agent failures (gateway.agentFailure).
const (
	saysTimeout = "did not answer fault in time"
	saysNoAgent = "no expert agent is online"
)

// TestFaultAgent: an expert agent that never answers, answers late,
// answers twice, floods its response topic with garbage, or answers on
// another context's topic. A short call deadline (2 s) keeps
// the cases short; an LRU of two contexts makes every case evict.
func TestFaultAgent(t *testing.T) {
	// A small LRU: the contexts of earlier cases are evicted (and must be
	// unsubscribed) as later ones come.
	const maxContexts = 2
	e := startFaults(t, server.Config{CallTimeout: 2 * time.Second, MaxContexts: maxContexts})
	rq := e.srv.Requester()
	tok := e.token(t, store.TokenSpec{UserID: "fiona"})
	n := 0
	// session opens a client session (the versions in turn) and a fake
	// agent, then takes the baseline.
	session := func(t *testing.T) (*mcp.ClientSession, *fakeAgent) {
		t.Helper()
		n++
		a := startFakeAgent(t, e, fmt.Sprintf("fake-%d", n))
		cs := e.connect(t, e.mcpURL(), tok, protocolVersions[n%len(protocolVersions)], nil)
		e.markBaseline()
		return cs, a
	}

	t.Run("never answers", func(t *testing.T) {
		cs, a := session(t)
		ch := callAsync(t, cs, "fault", "hang")
		c := a.next(t)
		wantToolError(t, await(t, ch), saysTimeout)
		// The agent is told to stop working on it.
		cancel := a.nextCancel(t, c.env.CorrelationID)
		if !strings.Contains(string(cancel.msg.Params), "deadline exceeded") {
			t.Errorf("cancellation: %s", cancel.msg.Params)
		}
		assertSettled(t, e)
		a.works(t, cs, "after")
		assertSettled(t, e)
	})

	t.Run("never answers, in more contexts than the LRU holds", func(t *testing.T) {
		_, a := session(t)
		var sessions []*mcp.ClientSession
		for i := range 4 {
			tk := e.token(t, store.TokenSpec{UserID: fmt.Sprintf("many%d", i)})
			sessions = append(sessions, e.connect(t, e.mcpURL(), tk, protocolVersions[i%len(protocolVersions)], nil))
		}
		e.markBaseline()
		var chs []<-chan outcome
		for i, cs := range sessions {
			chs = append(chs, callAsync(t, cs, "fault", fmt.Sprint("hang ", i)))
		}
		for range sessions {
			a.next(t)
		}
		// Calls in flight keep their contexts beyond the bound.
		if st := rq.Stats(); st.Contexts < len(sessions) || st.Pinned == 0 {
			t.Errorf("with %d calls in flight: %d contexts, %d pinned", len(sessions), st.Contexts, st.Pinned)
		}
		for _, ch := range chs {
			wantToolError(t, await(t, ch), saysTimeout)
		}
		assertSettled(t, e)
		if st := rq.Stats(); st.Contexts > maxContexts || st.Pinned != 0 {
			t.Errorf("after the calls: %d contexts (bound %d), %d pinned", st.Contexts, maxContexts, st.Pinned)
		}
	})

	t.Run("answers late", func(t *testing.T) {
		cs, a := session(t)
		late := rq.Stats().Late
		ch := callAsync(t, cs, "fault", "late")
		c := a.next(t)
		wantToolError(t, await(t, ch), saysTimeout)
		a.reply(c, textResult("too late"))
		poll(t, 10*time.Second, "the late answer counted", func() bool { return rq.Stats().Late == late+1 })
		a.works(t, cs, "on time")
		assertSettled(t, e)
	})

	t.Run("answers twice", func(t *testing.T) {
		cs, a := session(t)
		dups := rq.Stats().Duplicates
		ch := callAsync(t, cs, "fault", "twice")
		c := a.next(t)
		a.reply(c, textResult("first"))
		a.reply(c, textResult("second"))
		wantText(t, await(t, ch), "first")
		poll(t, 10*time.Second, "the second answer counted", func() bool { return rq.Stats().Duplicates == dups+1 })
		// The second answer went nowhere: the next call gets its own.
		a.works(t, cs, "next")
		assertSettled(t, e)
	})

	t.Run("floods its response topic with garbage", func(t *testing.T) {
		cs, a := session(t)
		before := rq.Stats()
		ch := callAsync(t, cs, "fault", "flood")
		c := a.next(t)
		id := c.env.CorrelationID
		dropped := []string{
			``, `not json`, `[1,2,3]`, `{"v":2}`, `{"v":2,"correlationId":"` + id + `","message":{}}`,
			strings.Repeat("[", 10000),
			`{"v":2,"correlationId":"` + id + `","message":{"jsonrpc":"1.0","id":"` + id + `","result":{}}}`,
			`{"v":2,"correlationId":"` + id + `","message":{"jsonrpc":"2.0","id":"` + id + `"}}`,
			`{"v":2,"correlationId":"` + id + `","message":{"jsonrpc":"2.0","id":"other","result":{}}}`,
			`{"v":2,"correlationId":"` + id + `","message":"a string"}`,
		}
		late := []string{
			`{"v":2,"correlationId":"c-nobody-1","message":{"jsonrpc":"2.0","id":"c-nobody-1","result":{}}}`,
			`{"v":2,"correlationId":"` + id + `x","message":{"jsonrpc":"2.0","id":"` + id + `x","result":{}}}`,
		}
		const rounds = 50
		for range rounds {
			for _, p := range append(append([]string{}, dropped...), late...) {
				// QoS 0, as a flood would; the broker routes one client's
				// packets in order, so all of them are handled before the
				// real answer below (QoS 1) reaches the gateway.
				a.client.Publish(c.resTopic(), 0, false, []byte(p))
			}
		}
		a.reply(c, textResult("survived"))
		wantText(t, await(t, ch), "survived")
		st := rq.Stats()
		if got, want := st.Dropped-before.Dropped, uint64(rounds*len(dropped)); got != want {
			t.Errorf("dropped %d, want %d", got, want)
		}
		if got, want := st.Late-before.Late, uint64(rounds*len(late)); got != want {
			t.Errorf("late %d, want %d", got, want)
		}
		a.works(t, cs, "still works")
		assertSettled(t, e)
	})

	t.Run("answers on another context's topic, or as another agent", func(t *testing.T) {
		_, a := session(t)
		// Another expert-agent identity, which may publish replies under
		// its own name only. It never says it is online: the calls go to
		// the fake agent alone.
		if _, err := e.srv.Store().AddIdentity(testCtx(t, 5*time.Second), "intruder", acl.RoleExpertAgent, []byte(fakePassword)); err != nil {
			t.Fatal(err)
		}
		intruder, err := mqttClient(t, e.srv, "intruder", fakePassword, "intruder-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		cs1 := e.connect(t, e.mcpURL(), tok, protocolVersions[0], nil)
		cs2 := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "gus"}), protocolVersions[1], nil)
		e.markBaseline()
		mism := rq.Stats().Mismatched
		ch1 := callAsync(t, cs1, "fault", "one")
		ch2 := callAsync(t, cs2, "fault", "two")
		calls := map[string]fakeCall{}
		for range 2 {
			c := a.next(t)
			calls[c.text] = c
		}
		one, two := calls["one"], calls["two"]
		if one.resTopic() == two.resTopic() {
			t.Fatalf("both calls in one context: %s", one.resTopic())
		}
		// Each call's ID answered on the other's topic: neither completes.
		a.replyOn(two.resTopic(), one.env.CorrelationID, textResult("forged one"))
		a.replyOn(one.resTopic(), two.env.CorrelationID, textResult("forged two"))
		// One's ID answered in one's context, under another agent's name:
		// the call went to the fake agent, so that does not complete it
		// either.
		rt, err := contract.ParseTopic(one.reqTopic)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := json.Marshal(one.env.CorrelationID)
		msg, _ := json.Marshal(jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: id, Result: textResult("intruder")})
		env := contract.Envelope{CorrelationID: one.env.CorrelationID, Message: msg}
		forged, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		mustToken(t, intruder.Publish(rt.Context.ReplyTopic("intruder", "intruder-1"), 1, false, forged))
		poll(t, 10*time.Second, "the three forged answers counted", func() bool { return rq.Stats().Mismatched == mism+3 })
		a.reply(two, textResult("two"))
		a.reply(one, textResult("one"))
		wantText(t, await(t, ch1), "one")
		wantText(t, await(t, ch2), "two")
		assertSettled(t, e)
	})
}

// heapAfterGC is the live heap after a full collection (two, so that
// sync.Pool's victim caches are emptied too).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestFaultAgentLongDeadline: the agent faults that must not depend on the
// call deadline, which is long here (20 s). An agent that dies mid-call, or
// that sends a packet over the broker's maximum size (the broker cuts it
// off), takes its calls down at once through its Last Will: the client
// hears that no agent is online, not that the agent was too slow. An agent
// may send 10 MiB. An agent started again serves the next calls.
func TestFaultAgentLongDeadline(t *testing.T) {
	e := startFaults(t, server.Config{CallTimeout: 20 * time.Second})
	rq := e.srv.Requester()
	tok := e.token(t, store.TokenSpec{UserID: "hugo"})

	t.Run("crash mid-call", func(t *testing.T) {
		a := startFakeAgent(t, e, "fake-crash")
		cs := e.connect(t, e.mcpURL(), tok, protocolVersions[0], nil)
		e.markBaseline()
		ch := callAsync(t, cs, "fault", "crash")
		a.next(t)
		a.kill()
		wantToolError(t, await(t, ch), saysNoAgent)
		assertSettled(t, e)
	})

	t.Run("packet over the broker's maximum", func(t *testing.T) {
		a := startFakeAgent(t, e, "fake-huge")
		cs := e.connect(t, e.mcpURL(), tok, protocolVersions[1], nil)
		e.markBaseline()
		dropped := rq.Stats().Dropped
		ch := callAsync(t, cs, "fault", "huge")
		c := a.next(t)
		huge := make([]byte, broker.DefaultMaxPacketSize+1<<20)
		// The broker closes the connection on the packet's header; the
		// publish fails or is never acknowledged.
		tok := a.client.Publish(c.resTopic(), 1, false, huge)
		tok.WaitTimeout(5 * time.Second)
		wantToolError(t, await(t, ch), saysNoAgent)
		if d := rq.Stats().Dropped; d != dropped {
			t.Errorf("the gateway saw %d replies of the oversized packet", d-dropped)
		}
		assertSettled(t, e)
	})

	t.Run("sends 10 MiB", func(t *testing.T) {
		// The broker's maximum packet size (16 MiB) is the bound: 10 MiB
		// under it is a legal answer, passed through whole; 10 MiB of
		// garbage is dropped. Neither is held afterwards. (Over the bound: the case
		// before.)
		a := startFakeAgent(t, e, "fake-big")
		cs := e.connect(t, e.mcpURL(), tok, protocolVersions[2], nil)
		e.markBaseline()
		heap := heapAfterGC()
		big := strings.Repeat("x", 10<<20)
		ch := callAsync(t, cs, "fault", "big")
		c := a.next(t)
		dropped := rq.Stats().Dropped
		a.publish(c.resTopic(), []byte(`{"v":2,"correlationId":"`+c.env.CorrelationID+`","junk":"`+big+`"`), false)
		poll(t, 10*time.Second, "10 MiB of garbage dropped", func() bool { return rq.Stats().Dropped == dropped+1 })
		a.reply(c, textResult(big))
		wantText(t, await(t, ch), big)
		a.works(t, cs, "small")
		big = ""
		assertSettled(t, e)
		// Not held: the heap comes back within 8 MiB of where it was
		// (one copy of the payload is 10 MiB).
		var now uint64
		poll(t, 10*time.Second, "the 10 MiB payloads released", func() bool {
			now = heapAfterGC()
			return now < heap+8<<20
		})
		t.Logf("heap: before %d KiB, after %d KiB", heap>>10, now>>10)
	})

	t.Run("restarts while its old connection lingers", func(t *testing.T) {
		// A restarted agent with the same client ID logs in before the
		// broker has noticed that the old connection is dead: the broker
		// hands the client ID over and drops the old connection. The old
		// connection's Will must not mark the new one offline (mochi sends
		// it from the old connection's goroutine, often after the new
		// agent's online status).
		// The cases before stop their agents without waiting for the
		// broker to let them go (paho's DISCONNECT is fire and forget): one
		// leaving during a round below would lower the count the round
		// waits for, for good.
		poll(t, 10*time.Second, "the earlier cases' agents gone", func() bool { return e.srv.Broker().ClientCount() == 0 })
		old := startFakeAgent(t, e, "fake-again")
		for round := range 10 {
			clients := e.srv.Broker().ClientCount()
			a := startFakeAgent(t, e, "fake-again")
			// The old connection's goroutine is done (its Will, if any, is
			// routed) once the count is back.
			poll(t, 10*time.Second, "the old connection gone", func() bool { return e.srv.Broker().ClientCount() == clients })
			if !agentOnline(e.srv, "fake-again") {
				t.Fatalf("round %d: the restarted agent is offline: the old connection's Will won", round)
			}
			old = a
		}
		cs := e.connect(t, e.mcpURL(), tok, protocolVersions[0], nil)
		e.markBaseline()
		old.works(t, cs, "again")
		assertSettled(t, e)
	})

	t.Run("restarts", func(t *testing.T) {
		stop := startTestAgent(t, e.srv, "tagent")
		cs := e.connect(t, e.mcpURL(), tok, protocolVersions[2], nil)
		e.markBaseline()
		wantText(t, await(t, callAsync(t, cs, "echo", "before")), "before")
		stop()
		poll(t, 10*time.Second, "agent offline", func() bool { return !agentOnline(e.srv, "tagent-1") })
		res := await(t, callAsync(t, cs, "echo", "while down"))
		if !res.IsError || !strings.Contains(textOf(t, res), saysNoAgent) {
			t.Fatalf("call while the agent is down: isError=%v %q", res.IsError, textOf(t, res))
		}
		startTestAgent(t, e.srv, "tagent")
		wantText(t, await(t, callAsync(t, cs, "echo", "after")), "after")
		assertSettled(t, e)
	})
}

package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// saysEchoTimeout is the gateway's text for an echo call past its deadline.
const saysEchoTimeout = "did not answer echo in time"

// TestFaultBrokerListener: the embedded broker's TCP listener goes away and
// comes back on the same port. The agent is cut off (its Will takes the
// call it was serving down at once, and later calls fail fast), the
// gateway says it is not ready, and once the listener is back the agent
// reconnects by itself and calls work again.
func TestFaultBrokerListener(t *testing.T) {
	// The deadline is long enough that only the Will can fail the call in
	// flight, and short enough that the agent's orphaned handler (its
	// connection was cut, the gateway gave up on the call) ends by it.
	e := startFaults(t, server.Config{CallTimeout: 5 * time.Second})
	startTestAgent(t, e.srv, "tagent")
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "ines"}), protocolVersions[1], nil)
	e.markBaseline()
	wantText(t, await(t, callAsync(t, cs, "echo", "before")), "before")

	for len(waitStarted) > 0 {
		<-waitStarted
	}
	inflight := callAsync(t, cs, "wait_cancel", "")
	select {
	case <-waitStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's tool did not start")
	}
	if err := e.srv.Broker().CloseTCP(); err != nil {
		t.Fatal(err)
	}
	wantToolError(t, await(t, inflight), saysNoAgent)
	if got := e.readyz(t); got != http.StatusServiceUnavailable {
		t.Errorf("readyz with the listener closed: %d, want 503", got)
	}
	res := await(t, callAsync(t, cs, "echo", "while closed"))
	wantToolError(t, res, saysNoAgent)

	if err := e.srv.Broker().ReopenTCP(testCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := e.readyz(t); got != http.StatusOK {
		t.Errorf("readyz with the listener back: %d, want 200", got)
	}
	poll(t, 20*time.Second, "the agent back online", func() bool { return agentOnline(e.srv, "tagent-1") })
	wantText(t, await(t, callAsync(t, cs, "echo", "after")), "after")
	assertSettled(t, e)
}

// TestFaultNetworkStall: the network between the agent and the broker
// stops carrying packets (a proxy that stops forwarding) for longer than a
// call's deadline. The call fails clearly at its deadline, the gateway
// keeps serving (a platform tool), and once the network is back later
// calls work. (The stuck request reaches the agent after its deadline: the
// SDK agent drops it unanswered.)
func TestFaultNetworkStall(t *testing.T) {
	e := startFaults(t, server.Config{CallTimeout: 2 * time.Second})
	proxy := testenv.StartStallProxy(t, e.srv.MQTTAddr().String())
	startTestAgentAt(t, e.srv, "tagent", proxy.URL())
	cs := e.connect(t, e.mcpURL(), e.token(t, store.TokenSpec{UserID: "jack"}), protocolVersions[2], nil)
	e.markBaseline()
	wantText(t, await(t, callAsync(t, cs, "echo", "before")), "before")

	proxy.Stall()
	var stalled []<-chan outcome
	for i := range 8 {
		stalled = append(stalled, callAsync(t, cs, "echo", fmt.Sprint("stalled ", i)))
	}
	for _, ch := range stalled {
		wantToolError(t, await(t, ch), saysEchoTimeout)
	}
	who, err := cs.CallTool(testCtx(t, 10*time.Second), &mcp.CallToolParams{Name: "platform_whoami"})
	if err != nil || who.IsError || !strings.Contains(textOf(t, who), "jack") {
		t.Fatalf("platform tool during the stall: %v %+v", err, who)
	}
	if !agentOnline(e.srv, "tagent-1") {
		t.Fatal("a stall shorter than the keepalive took the agent offline")
	}
	assertSettled(t, e) // while still stalled: the gateway does not wait for the network

	proxy.Resume()
	wantText(t, await(t, callAsync(t, cs, "echo", "after")), "after")
	assertSettled(t, e)
}

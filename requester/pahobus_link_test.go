package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/requester"
)

// A call whose request reached the agent when the broker goes away fails
// with ErrLinkLost, not at its deadline; calls made while the link is down
// fail the same way at once; once the broker is back, every context the
// Requester holds (more than one resubscription batch) answers again
// without the Requester subscribing anything itself.
func TestPahoBusLinkLostFailsCallsAndRestoresContexts(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-link")
	r := rqRequester(t, bus, requester.Options{CallTimeout: 40 * time.Second})
	started := make(chan struct{}, 16)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the agent stops
	e.startAgent(t, "echoer", rqEchoTool(), expertagent.Tool{
		Tool: mcp.Tool{
			Name:        "hang",
			Description: "Answers only when the test ends.",
		},
		Handler: func(ctx context.Context, _ *expertagent.CallRequest) (*mcp.CallToolResult, error) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return mcp.TextResult("late"), nil
		},
	})
	rqPoll(t, "the agent online", func() bool { a := r.Agents(); return len(a) > 0 && a[0].Online })

	const contexts = 700 // more than one resubscription batch (500)
	ctx := rqContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, contexts)
	for i := range contexts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.CallTool(ctx, rqCtx(i), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"warm"}`), nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("warm-up call: %v", err)
		}
	}

	const inFlight = 4
	results := make(chan error, inFlight)
	for i := range inFlight {
		go func() {
			_, err := r.CallTool(ctx, rqCtx(i), e.AgentUser, nil, "hang", nil, nil)
			results <- err
		}()
	}
	for range inFlight {
		rqRecv(t, started) // the agent runs the call: now it waits for its answer
	}

	e.Restart(t)
	// Which news reaches the requester first is the broker's order of
	// closing connections: its own link dropping (ErrLinkLost), or the
	// agent's Will, sent as the broker drops the agent (ErrNoAgent). Either
	// fails the call at once; a timeout would be the bug.
	for range inFlight {
		err := rqRecv(t, results)
		if !errors.Is(err, requester.ErrLinkLost) && !errors.Is(err, requester.ErrNoAgent) || errors.Is(err, requester.ErrTimeout) {
			t.Fatalf("call in flight across the restart: %v, want ErrLinkLost or ErrNoAgent", err)
		}
	}

	// Calls succeed again without the Requester's help; those made before
	// the link is back fail fast with ErrLinkLost, and those made before the
	// agent is back with ErrNoAgent, or, sent to it before it subscribed
	// again, with ErrAgentReconnected when it announces itself: never a
	// timeout.
	before := r.Stats().Subscribes
	rqPoll(t, "a call after the restart", func() bool {
		_, err := r.CallTool(ctx, rqCtx(0), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		if err != nil && !errors.Is(err, requester.ErrLinkLost) && !errors.Is(err, requester.ErrNoAgent) && !errors.Is(err, requester.ErrAgentReconnected) {
			t.Fatalf("call while reconnecting: %v", err)
		}
		return err == nil
	})
	for i := range contexts {
		raw, err := r.CallTool(ctx, rqCtx(i), e.AgentUser, nil, "echo", json.RawMessage(fmt.Sprintf(`{"text":"probe %d"}`, i)), nil)
		if err != nil {
			t.Fatalf("probe of context %d: %v", i, err)
		}
		if got := rqText(t, raw); got != fmt.Sprintf("probe %d", i) {
			t.Fatalf("probe of context %d answered %q", i, got)
		}
	}
	if s := r.Stats(); s.Subscribes != before {
		t.Fatalf("the requester subscribed again itself: %d subscribes, %d before", s.Subscribes, before)
	}
}

// OnLink functions run once per loss and once per reconnect, in that
// order, and not after stop.
func TestPahoBusOnLink(t *testing.T) {
	e := rqStartBroker(t)
	bus := e.pahoBus(t, "gw-onlink")
	events := make(chan string, 8)
	stop := bus.OnLink(func(error) { events <- "lost" }, func() { events <- "up" })
	e.Restart(t)
	if first, second := rqRecv(t, events), rqRecv(t, events); first != "lost" || second != "up" {
		t.Fatalf("events %s, %s; want lost, up", first, second)
	}
	rqPoll(t, "the bus reconnects", bus.IsConnected)
	stop()
	e.Restart(t)
	rqPoll(t, "the bus reconnects again", bus.IsConnected)
	select {
	case ev := <-events:
		t.Fatalf("%s after stop (or a second one for one loss)", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

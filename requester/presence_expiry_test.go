package requester_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/requester"
)

// Over the real broker: an instance that promised to repeat its presence
// and fell silent (still connected, so no Will: as when its broker node
// dies) is taken for gone, and the call waiting for it fails with
// ErrNoAgent instead of waiting for its deadline.
func TestRequesterExpiresSilentInstance(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute})
	agent := e.raw(t, rqRawOpts{clientID: "quiet-1"})
	agent.serve(t)
	p, _ := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: "quiet-1", Since: time.Now().UnixMilli(), Interval: 100})
	agent.publish(t, contract.PresenceTopic(e.AgentUser, "quiet-1"), true, p)
	rqPoll(t, "the agent online", func() bool { return slices.Contains(r.OnlineAgents(context.Background()), e.AgentUser) })

	done := rqGo(func() error {
		_, err := r.CallTool(rqContext(t), rqCtx(1), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		return err
	})
	agent.nextRequest(t) // it got the call, and says nothing more
	if err := rqRecv(t, done); !errors.Is(err, requester.ErrNoAgent) {
		t.Fatalf("the call to a silent instance ended with %v, want ErrNoAgent", err)
	}
	if slices.Contains(r.OnlineAgents(context.Background()), e.AgentUser) {
		t.Error("the silent agent is still online")
	}
}

// With AddressInstances, on a broker where the pool has no shared
// subscription (each instance listens to its own client ID only), each
// request goes to one instance, in turn; an instance that dies holding a
// call it has not answered yet fails that call at once.
func TestRequesterAddressesInstances(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute, AddressInstances: true})
	var instances []*rqRaw
	for _, id := range []string{"inst-a", "inst-b"} {
		in := e.raw(t, rqRawOpts{clientID: id, will: &contract.Presence{Status: contract.StatusOffline, ClientID: id}})
		in.subscribe(t, contract.RequestFilter(e.AgentUser, id))
		in.announce(t, contract.StatusOnline)
		instances = append(instances, in)
	}
	rqPoll(t, "both instances online", func() bool {
		n := 0
		for _, a := range r.Agents() {
			if a.Online {
				n++
			}
		}
		return n == 2
	})

	for i := range 4 {
		done := rqGo(func() error {
			raw, err := r.CallTool(rqContext(t), rqCtx(i), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
			if err == nil && rqText(t, raw) != "x" {
				return errors.New("wrong answer")
			}
			return err
		})
		in := instances[i%2] // in turn, by client ID
		q := in.nextRequest(t)
		if tp, _ := contract.ParseTopic(q.topic); tp.Instance != in.clientID {
			t.Fatalf("call %d on %s, want one addressed to %s", i, q.topic, in.clientID)
		}
		in.reply(t, q.topic, q.env.CorrelationID, rqResult(q.env.CorrelationID, `{"content":[{"type":"text","text":"x"}]}`))
		if err := rqRecv(t, done); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}

	done := rqGo(func() error {
		_, err := r.CallTool(rqContext(t), rqCtx(9), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
		return err
	})
	holder := instances[0] // the fifth turn
	holder.nextRequest(t)
	holder.kill()
	if err := rqRecv(t, done); !errors.Is(err, requester.ErrAgentGone) {
		t.Fatalf("the call of a dead instance ended with %v, want ErrAgentGone", err)
	}
}

// With AddressInstances, an instance that says nothing of a call sent to
// it (its node died: no Will, and its presence expires only after three
// intervals) gets no new calls once SuspectAfter has passed: they go to
// the agent's other instance. A status of its own, or a claim of one of
// its calls, makes it an instance like any other again; a call it left
// unheard before its status does not count against it.
func TestRequesterSkipsUnresponsiveInstance(t *testing.T) {
	e := rqStartBroker(t)
	r := rqRequester(t, e.Broker.Bus(), requester.Options{CallTimeout: time.Minute, AddressInstances: true, SuspectAfter: 250 * time.Millisecond})
	ghost := e.raw(t, rqRawOpts{clientID: "inst-a"}) // first in turn, by client ID
	live := e.raw(t, rqRawOpts{clientID: "inst-b"})
	for _, in := range []*rqRaw{ghost, live} {
		in.subscribe(t, contract.RequestFilter(e.AgentUser, in.clientID))
		in.announce(t, contract.StatusOnline)
	}
	rqPoll(t, "both instances online", func() bool { return len(r.Agents()) == 2 && r.Agents()[1].Online })
	call := func(i int) <-chan error {
		return rqGo(func() error {
			_, err := r.CallTool(rqContext(t), rqCtx(i), e.AgentUser, nil, "echo", json.RawMessage(`{"text":"x"}`), nil)
			return err
		})
	}
	answer := func(i int) {
		t.Helper()
		done := call(i)
		q := live.nextRequest(t)
		live.reply(t, q.topic, q.env.CorrelationID, rqResult(q.env.CorrelationID, `{"content":[{"type":"text","text":"x"}]}`))
		if err := rqRecv(t, done); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	unresponsive := func(want bool) func() bool {
		return func() bool {
			a := r.Agents()
			return a[0].ClientID == "inst-a" && a[0].Unresponsive == want && !a[1].Unresponsive
		}
	}
	// oneOfNextTwo makes calls i and i+1: one goes to the ghost, the
	// other to the live instance, which answers it.
	oneOfNextTwo := func(i int) {
		t.Helper()
		call(i)
		call(i + 1)
		q := ghost.nextRequest(t)
		if q.topic != rqCtx(i).RequestTopic(e.AgentUser, "inst-a") && q.topic != rqCtx(i+1).RequestTopic(e.AgentUser, "inst-a") {
			t.Fatalf("the ghost got %s, want call %d or %d", q.topic, i, i+1)
		}
		q = live.nextRequest(t)
		live.reply(t, q.topic, q.env.CorrelationID, rqResult(q.env.CorrelationID, `{"content":[{"type":"text","text":"x"}]}`))
	}

	stuck := call(0) // to the ghost, which does not answer
	first := ghost.nextRequest(t)
	rqPoll(t, "the ghost taken for unresponsive", unresponsive(true))
	for i := 1; i <= 4; i++ { // in turn, two of these would be the ghost's
		answer(i)
	}
	// Nothing reached the ghost meanwhile: the marker is its next message.
	marker := rqCtx(99).RequestTopic(e.AgentUser, "inst-a")
	if err := e.Broker.Bus().Publish(rqContext(t), marker, []byte("marker")); err != nil {
		t.Fatal(err)
	}
	if m := ghost.next(t); m.topic != marker {
		t.Fatalf("the unresponsive instance got %s, want only the marker", m.topic)
	}
	select {
	case err := <-stuck:
		t.Fatalf("the ghost's call ended with %v; it waits for the ghost", err)
	default:
	}

	// A status of its own: call 0, older, no longer counts.
	ghost.announce(t, contract.StatusOnline)
	rqPoll(t, "the ghost heard from again", unresponsive(false))
	oneOfNextTwo(5)
	// That call, unheard, counts; a claim of call 0 says it is alive.
	rqPoll(t, "the ghost unresponsive again", unresponsive(true))
	ghost.reply(t, first.topic, first.env.CorrelationID, `{"jsonrpc":"2.0","method":"`+contract.ClaimMethod+`"}`)
	rqPoll(t, "the ghost alive after its claim", unresponsive(false))
	oneOfNextTwo(7)
}

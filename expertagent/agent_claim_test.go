package expertagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// claimLink is a scripted broker link for the claim loop: up or down, its
// publishes failing or not, and every attempt recorded. A real broker
// cannot be kept unreachable for the agentOpTimeout a lost claim takes.
type claimLink struct {
	agentBenchLink
	mu       sync.Mutex
	open     bool
	fail     bool
	attempts map[string]int // topic -> publishes tried
}

func (l *claimLink) isOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *claimLink) publish(_ context.Context, topic string, _ []byte, _ bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts[topic]++
	if l.fail {
		return errors.New("no acknowledgement from the broker")
	}
	return nil
}

func (l *claimLink) set(open, fail bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open, l.fail = open, fail
}

func (l *claimLink) tried(topic string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attempts[topic]
}

// TestClaimLoopWaitsForTheLink: claims due while the link is down are not
// tried (each would wait agentOpTimeout, one after another); they all go
// once it is back. A claim that fails is tried again, and one that went
// is not sent twice. Ticks are claimDue calls at a time of the test's.
func TestClaimLoopWaitsForTheLink(t *testing.T) {
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", ClientID: "claimer", ClaimAfter: 200 * time.Millisecond})
	link := &claimLink{attempts: map[string]int{}}
	a.link = link
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	topics := []string{"t/1", "t/2", "t/3"}
	var calls []*agentCall
	a.flightMu.Lock()
	for _, topic := range topics {
		c := &agentCall{agent: a, topic: topic, corrID: "c" + topic, started: start}
		c.key = agentCallKey{topic, c.corrID}
		a.inflight[c.key] = c
		calls = append(calls, c)
	}
	a.flightMu.Unlock()
	ctx := context.Background()
	tick := func(after time.Duration) { a.claimDue(ctx, start.Add(after), nil) }

	tick(100 * time.Millisecond) // not due yet
	link.set(true, false)
	tick(199 * time.Millisecond)
	for _, topic := range topics {
		if n := link.tried(topic); n != 0 {
			t.Fatalf("claim on %s tried %d times before ClaimAfter", topic, n)
		}
	}
	link.set(false, false)
	for range 3 { // three ticks with the link down
		tick(time.Second)
	}
	for _, topic := range topics {
		if n := link.tried(topic); n != 0 {
			t.Fatalf("claim on %s tried %d times while the link was down", topic, n)
		}
	}

	link.set(true, true) // up, but the broker does not acknowledge
	tick(time.Second)
	tick(time.Second)
	if n := link.tried("t/1"); n != 2 {
		t.Fatalf("a failed claim tried %d times in two ticks, want 2", n)
	}
	link.set(true, false)
	tick(time.Second)
	for _, c := range calls {
		if !c.claimed {
			t.Errorf("claim on %s not sent once the broker acknowledges", c.topic)
		}
	}
	before := map[string]int{}
	for _, topic := range topics {
		before[topic] = link.tried(topic)
	}
	tick(time.Second)
	tick(time.Second)
	for _, topic := range topics {
		if n := link.tried(topic); n != before[topic] {
			t.Errorf("claim on %s sent again after it went (%d, then %d tries)", topic, before[topic], n)
		}
	}
}

// TestClaimTriesBounded: a claim the broker keeps refusing is tried
// maxClaimTries times, not at every tick for the call's whole life.
func TestClaimTriesBounded(t *testing.T) {
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", ClientID: "claimer", ClaimAfter: 20 * time.Millisecond})
	link := &claimLink{attempts: map[string]int{}, open: true, fail: true}
	a.link = link
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &agentCall{agent: a, topic: "t/1", corrID: "c1", started: start}
	c.key = agentCallKey{c.topic, c.corrID}
	a.flightMu.Lock()
	a.inflight[c.key] = c
	a.flightMu.Unlock()
	for i := range 3 * maxClaimTries {
		a.claimDue(context.Background(), start.Add(time.Duration(i+1)*time.Second), nil)
	}
	if n := link.tried("t/1"); n != maxClaimTries {
		t.Fatalf("a refused claim tried %d times, want %d", n, maxClaimTries)
	}
}

// TestClaimLoopStops: the loop returns once its context ends.
func TestClaimLoopStops(t *testing.T) {
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", ClientID: "claimer", ClaimAfter: 20 * time.Millisecond})
	a.link = &claimLink{attempts: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.claimLoop(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("claimLoop still runs after its context ended")
	}
}

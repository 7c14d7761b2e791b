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

func pollClaims(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClaimLoopWaitsForTheLink: claims due while the link is down are not
// tried (each would wait agentOpTimeout, one after another); they all go
// once it is back. A claim that fails is tried again, and one that went
// is not sent twice.
func TestClaimLoopWaitsForTheLink(t *testing.T) {
	// Ticks every 100ms: the test turns the failures off between a
	// call's second try and its last.
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", ClientID: "claimer", ClaimAfter: 200 * time.Millisecond})
	link := &claimLink{attempts: map[string]int{}}
	a.link = link
	topics := []string{"t/1", "t/2", "t/3"}
	var calls []*agentCall
	a.flightMu.Lock()
	for _, topic := range topics {
		c := &agentCall{agent: a, topic: topic, corrID: "c" + topic, started: time.Now().Add(-time.Hour)}
		c.key = agentCallKey{topic, c.corrID}
		a.inflight[c.key] = c
		calls = append(calls, c)
	}
	a.flightMu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.claimLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	time.Sleep(350 * time.Millisecond) // three ticks with the link down
	for _, topic := range topics {
		if n := link.tried(topic); n != 0 {
			t.Fatalf("claim on %s tried %d times while the link was down", topic, n)
		}
	}

	link.set(true, true) // up, but the broker does not acknowledge
	pollClaims(t, "a failed claim tried again", func() bool { return link.tried("t/1") >= 2 })
	link.set(true, false)
	pollClaims(t, "every claim sent", func() bool {
		for _, c := range calls {
			c.mu.Lock()
			claimed := c.claimed
			c.mu.Unlock()
			if !claimed {
				return false
			}
		}
		return true
	})
	before := map[string]int{}
	for _, topic := range topics {
		before[topic] = link.tried(topic)
	}
	time.Sleep(250 * time.Millisecond)
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
	c := &agentCall{agent: a, topic: "t/1", corrID: "c1", started: time.Now().Add(-time.Hour)}
	c.key = agentCallKey{c.topic, c.corrID}
	a.flightMu.Lock()
	a.inflight[c.key] = c
	a.flightMu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.claimLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	pollClaims(t, "the claim's tries", func() bool { return link.tried("t/1") == maxClaimTries })
	time.Sleep(100 * time.Millisecond) // ten more ticks
	if n := link.tried("t/1"); n != maxClaimTries {
		t.Fatalf("a refused claim tried %d times, want %d", n, maxClaimTries)
	}
}

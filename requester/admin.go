package requester

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/toolbus/toolbus/contract"
)

var (
	// ErrContextNotFound is returned by Evict for a context the Requester
	// holds no subscription for.
	ErrContextNotFound = errors.New("context not subscribed")
	// ErrContextBusy is returned by Evict for a context with calls in
	// flight: taking its subscription away would lose their answers.
	ErrContextBusy = errors.New("context has calls in flight")
)

// evictAdmin is an operator's eviction: counted neither as overflow nor as
// expiry (the Unsubscribes counter still moves).
const evictAdmin evictCause = 100

// ContextEntry is one subscribed context as operators see it.
type ContextEntry struct {
	contract.Context
	// Subscribed is when the subscription was made, LastUsed when a call
	// last used it (the TTL runs from there).
	Subscribed, LastUsed time.Time
	// InFlight counts the calls holding the subscription now.
	InFlight int
}

// AllContexts lists every subscribed context, most recently used first. It
// walks the whole cache under its lock: for operators, not the hot path.
func (r *Requester) AllContexts() []ContextEntry {
	var out []ContextEntry
	r.cache.eachEntry(func(e *subEntry) {
		c, err := contract.ParseReplyFilter(e.topic)
		if err != nil {
			return
		}
		out = append(out, ContextEntry{Context: c, Subscribed: r.cache.base.Add(e.created),
			LastUsed: r.cache.base.Add(e.lastUse), InFlight: int(e.inflight)})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed) })
	return out
}

// Evict drops the subscription of context c and waits (bounded by ctx) until
// the bus has unsubscribed it. The next call in c subscribes again. A
// context with calls in flight gives ErrContextBusy, one that is not
// subscribed ErrContextNotFound.
func (r *Requester) Evict(ctx context.Context, c contract.Context) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("requester: evict: %w", err)
	}
	done, err := r.cache.evict(c.ReplyFilter())
	if err != nil {
		return fmt.Errorf("requester: evict %s: %w", c.ReplyFilter(), err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("requester: evict %s: waiting for the unsubscribe: %w", c.ReplyFilter(), ctx.Err())
	}
}

// evict takes topic's idle, active subscription out of the LRU and queues
// its unsubscribe; the returned channel closes when that is done.
func (c *subCache) evict(topic string) (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	e, ok := c.lru.Peek(topic) // Peek: an eviction is not a use
	if !ok {
		e = c.aside[topic]
	}
	switch {
	case e == nil || e.state == subGone:
		return nil, ErrContextNotFound
	case e.state == subUnsubscribing:
		return e.done, nil // already on its way out
	case e.inflight > 0 || e.state == subSubscribing:
		return nil, ErrContextBusy
	}
	// Idle and active, so in the LRU (pinned entries have calls in flight):
	// the eviction callback records it and processEvicted queues the
	// unsubscribe, as for any other eviction.
	c.lru.Remove(topic)
	c.processEvicted(evictAdmin)
	if e.state != subUnsubscribing {
		return nil, fmt.Errorf("subscription cache: %s was not queued for unsubscribe (state %d)", topic, e.state)
	}
	return e.done, nil
}

// eachEntry calls f for every active entry (LRU, then pinned) under the
// lock: f must be quick and must not keep e.
func (c *subCache) eachEntry(f func(e *subEntry)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.lru.Keys() {
		if e, ok := c.lru.Peek(k); ok && e.state == subActive {
			f(e)
		}
	}
	for _, e := range c.aside {
		if e.pinned && e.state == subActive {
			f(e)
		}
	}
}

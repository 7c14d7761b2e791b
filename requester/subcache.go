package requester

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
)

// subscriber is what the subscription cache needs from the bus: one
// subscription per context's reply filter. The Requester implements it over a Bus.
type subscriber interface {
	subscribe(ctx context.Context, topic string) error
	unsubscribe(ctx context.Context, topic string) error
}

// subState is where one topic's subscription stands. A topic moves
// subscribing → active → unsubscribing → gone, and a new entry is made only
// once the previous one is gone: that serialisation is what keeps a late
// unsubscribe from undoing a newer subscribe of the same topic.
type subState uint8

const (
	subSubscribing subState = iota + 1
	subActive
	subUnsubscribing
	// subGone: unsubscribed, or the subscribe failed. A gone entry is in no
	// map, so nothing finds it again; releasing it is a no-op.
	subGone
)

// subEntry is one context's reply filter subscription.
type subEntry struct {
	topic string
	state subState
	// inflight counts calls that hold the subscription (between acquire and
	// release). An entry with calls in flight is never unsubscribed.
	inflight int32
	// pinned: evicted from the LRU while calls were in flight; kept in
	// subCache.aside and re-admitted when the last call ends.
	pinned bool
	// lastUse is time since subCache.base (keeps the monotonic clock).
	lastUse time.Duration
	// created is when the entry was made, as lastUse (for operators).
	created time.Duration
	// done is closed when the current transition (subscribing or
	// unsubscribing) ends. nil while active.
	done chan struct{}
	// err is why subscribing failed; written before done is closed.
	err error
}

// evictCause says why entries left the LRU, for the counters.
type evictCause uint8

const (
	evictOverflow evictCause = iota + 1
	evictExpired
	evictClosed
)

// subCacheOptions configures a subCache. maxEntries and ttl have no
// defaults here: the Requester passes its own, already defaulted.
type subCacheOptions struct {
	maxEntries   int
	ttl          time.Duration
	now          func() time.Time // nil = time.Now
	unsubTimeout time.Duration    // bound on one unsubscribe; 0 = 10s
	logger       *logrus.Entry
}

// subCacheStats are the cache's counters.
type subCacheStats struct {
	hits, misses             uint64
	subscribes, subErrors    uint64
	evictions, expired       uint64
	unsubscribes, unsubErrs  uint64
	live, pinned, unsubQueue int
}

// subCache keeps one subscription per context's reply filter in an LRU ordered by
// last use, bounded in size and in idle time. It never does bus I/O under
// its lock: subscribes run on the calling goroutine, unsubscribes on one
// worker goroutine.
type subCache struct {
	sub          subscriber
	maxEntries   int
	ttl          time.Duration
	now          func() time.Time
	base         time.Time
	unsubTimeout time.Duration
	log          *logrus.Entry

	mu  sync.Mutex
	lru *simplelru.LRU[string, *subEntry]
	// aside holds the entries that are out of the LRU but not gone: pinned
	// ones (calls in flight) and unsubscribing ones (a new call must wait).
	aside map[string]*subEntry
	// evicted is filled by the LRU's eviction callback, which runs under mu
	// inside the LRU's own methods: it only records, processEvicted decides.
	evicted []*subEntry
	// queue is the unsubscribe worker's backlog.
	queue      []*subEntry
	closed     bool
	stats      subCacheStats
	started    bool
	reaping    bool
	wake       chan struct{} // cap 1: queue not empty, or closing
	stop       chan struct{} // closed by close: stop the reaper; the worker drains first
	workerDone chan struct{} // closed when the worker has returned
	reaperDone chan struct{} // closed when the reaper has returned (or by close if it never ran)
}

func newSubCache(sub subscriber, opts subCacheOptions) *subCache {
	if opts.now == nil {
		opts.now = time.Now
	}
	if opts.unsubTimeout <= 0 {
		opts.unsubTimeout = 10 * time.Second
	}
	if opts.logger == nil {
		opts.logger = logutil.Component(nil, "subcache")
	}
	c := &subCache{
		sub:          sub,
		maxEntries:   opts.maxEntries,
		ttl:          opts.ttl,
		now:          opts.now,
		base:         opts.now(),
		unsubTimeout: opts.unsubTimeout,
		log:          opts.logger,
		aside:        make(map[string]*subEntry),
		wake:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		workerDone:   make(chan struct{}),
		reaperDone:   make(chan struct{}),
	}
	lru, err := simplelru.NewLRU(opts.maxEntries, func(_ string, e *subEntry) {
		c.evicted = append(c.evicted, e)
	})
	if err != nil {
		panic(fmt.Sprintf("requester: subscription cache size %d: %v", opts.maxEntries, err)) // the Requester defaults it to > 0
	}
	c.lru = lru
	return c
}

// start runs the unsubscribe worker and, if reapEvery > 0, the TTL reaper.
// Both stop in close.
func (c *subCache) start(reapEvery time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.closed {
		return
	}
	c.started = true
	go c.worker()
	if reapEvery > 0 {
		c.reaping = true
		go c.reaper(reapEvery)
	}
}

func (c *subCache) elapsed() time.Duration { return c.now().Sub(c.base) }

// acquire returns the subscription of topic, subscribing first if there is
// none, and holds it until release. Concurrent first acquires of one topic
// subscribe once; an acquire that finds the topic being unsubscribed waits
// for that to finish, then subscribes again.
func (c *subCache) acquire(ctx context.Context, topic string) (*subEntry, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		now := c.elapsed()
		e, ok := c.lru.Get(topic) // moves it to the front: recency is last use
		if !ok {
			e = c.aside[topic]
		}
		if e == nil {
			c.stats.misses++
			e = &subEntry{topic: topic, state: subSubscribing, inflight: 1, lastUse: now, created: now, done: make(chan struct{})}
			c.lru.Add(topic, e)
			c.processEvicted(evictOverflow)
			c.mu.Unlock()
			if err := c.subscribeEntry(ctx, e); err != nil {
				return nil, err
			}
			return e, nil
		}
		switch e.state {
		case subActive:
			c.stats.hits++
			e.inflight++
			e.lastUse = now
			c.mu.Unlock()
			return e, nil
		case subSubscribing:
			c.stats.hits++
			e.inflight++
			e.lastUse = now
			done := e.done
			c.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				c.release(e)
				return nil, ctx.Err()
			}
			if e.err == nil { // safe to read: written before done was closed
				return e, nil
			}
			// The first caller's own deadline or cancellation is not ours:
			// try again (we become the subscriber).
			if ctx.Err() == nil && (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) {
				continue
			}
			return nil, e.err
		default: // subUnsubscribing
			done := e.done
			c.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
}

// acquireActive is acquire's fast path: it holds and returns the
// subscription of topic if it is active, and returns nil otherwise (the
// caller then goes through acquire, which needs a context).
func (c *subCache) acquireActive(topic string) *subEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	e, ok := c.lru.Get(topic) // moves it to the front: recency is last use
	if !ok {
		e = c.aside[topic]
	}
	if e == nil || e.state != subActive {
		return nil
	}
	c.stats.hits++
	e.inflight++
	e.lastUse = c.elapsed()
	return e
}

// subscribeEntry runs the bus subscribe of a new entry on the caller's
// goroutine and publishes the outcome to concurrent waiters.
func (c *subCache) subscribeEntry(ctx context.Context, e *subEntry) error {
	err := c.sub.subscribe(ctx, e.topic)
	c.mu.Lock()
	if err != nil {
		c.stats.subErrors++
		e.err = fmt.Errorf("subscribe %s: %w", e.topic, err)
		c.dropDead(e)
		close(e.done)
		c.mu.Unlock()
		return e.err
	}
	c.stats.subscribes++
	if c.closed {
		// close ran while we subscribed and did not see us as active: undo
		// our own subscription here, nobody else will.
		e.err = ErrClosed
		c.dropDead(e)
		close(e.done)
		c.mu.Unlock()
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.unsubTimeout)
		uerr := c.sub.unsubscribe(uctx, e.topic)
		cancel()
		c.mu.Lock()
		c.stats.unsubscribes++
		if uerr != nil {
			c.stats.unsubErrs++
		}
		c.mu.Unlock()
		return ErrClosed
	}
	e.state = subActive
	close(e.done)
	e.done = nil
	c.mu.Unlock()
	return nil
}

// forget drops topic's entry, if it is subscribed, without unsubscribing:
// the bus no longer holds that subscription. Calls holding the entry keep
// it until they release it; the next acquire subscribes again.
func (c *subCache) forget(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Peek(topic)
	if !ok {
		e, ok = c.aside[topic]
	}
	if ok && e.state == subActive {
		c.dropDead(e)
	}
}

// dropDead removes e from wherever it is, without scheduling an
// unsubscribe. Called with mu held.
func (c *subCache) dropDead(e *subEntry) {
	e.state = subGone
	if cur, ok := c.lru.Peek(e.topic); ok && cur == e {
		c.lru.Remove(e.topic) // the callback records it; processEvicted skips gone entries
	}
	if c.aside[e.topic] == e {
		delete(c.aside, e.topic)
		if e.pinned {
			e.pinned = false
			c.stats.pinned--
		}
	}
	c.processEvicted(evictOverflow)
}

// release ends one call's hold on e. The last call out of a pinned entry
// re-admits it to the LRU; every release counts as a use (extends the TTL).
func (c *subCache) release(e *subEntry) {
	if e == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.state == subGone || e.state == subUnsubscribing {
		return
	}
	e.inflight--
	e.lastUse = c.elapsed()
	if e.inflight > 0 {
		if !e.pinned {
			c.lru.Get(e.topic) // keep LRU order equal to lastUse order
		}
		return
	}
	if e.pinned {
		if c.closed {
			return
		}
		e.pinned = false
		c.stats.pinned--
		delete(c.aside, e.topic)
		c.lru.Add(e.topic, e)
		c.processEvicted(evictOverflow)
		return
	}
	c.lru.Get(e.topic)
}

// processEvicted decides the fate of the entries the LRU just dropped:
// entries with calls in flight are pinned aside, idle ones are queued for
// the unsubscribe worker. Called with mu held, right after every LRU
// operation that can evict.
func (c *subCache) processEvicted(cause evictCause) {
	if len(c.evicted) == 0 {
		return
	}
	queued := false
	for i, e := range c.evicted {
		c.evicted[i] = nil
		switch e.state {
		case subGone, subUnsubscribing:
			continue
		case subSubscribing:
			// Always has a call in flight (its subscriber); on close, the
			// subscriber sees c.closed and undoes its own subscription.
			if cause == evictClosed {
				continue
			}
		}
		if e.inflight > 0 && cause != evictClosed {
			if !e.pinned {
				e.pinned = true
				c.stats.pinned++
			}
			c.aside[e.topic] = e
			continue
		}
		switch cause {
		case evictOverflow:
			c.stats.evictions++
		case evictExpired:
			c.stats.expired++
		}
		if e.pinned {
			e.pinned = false
			c.stats.pinned--
		}
		e.state = subUnsubscribing
		e.done = make(chan struct{})
		c.aside[e.topic] = e
		c.queue = append(c.queue, e)
		queued = true
	}
	c.evicted = c.evicted[:0]
	if queued {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// reapExpired drops every entry idle for ttl or longer. Recency is last
// use, so expired entries are all at the old end of the LRU.
func (c *subCache) reapExpired() int {
	const batch = 1024 // bounds how long one pass holds the lock
	n := 0
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return n
		}
		now := c.elapsed()
		i := 0
		for ; i < batch; i++ {
			_, e, ok := c.lru.GetOldest()
			if !ok || now-e.lastUse < c.ttl {
				break
			}
			c.lru.RemoveOldest()
		}
		n += i
		c.processEvicted(evictExpired)
		c.mu.Unlock()
		if i < batch {
			return n
		}
	}
}

func (c *subCache) reaper(every time.Duration) {
	defer close(c.reaperDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.reapExpired()
		}
	}
}

// worker unsubscribes what processEvicted queued, one topic at a time,
// outside the lock. It exits once close has been called and the queue is
// empty.
func (c *subCache) worker() {
	defer close(c.workerDone)
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		closed := c.closed
		c.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			<-c.wake
			continue
		}
		for _, e := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), c.unsubTimeout)
			err := c.sub.unsubscribe(ctx, e.topic)
			cancel()
			if err != nil {
				c.log.WithError(err).WithField("topic", e.topic).Warn("unsubscribe failed; dropping the entry anyway")
			}
			c.mu.Lock()
			c.stats.unsubscribes++
			if err != nil {
				c.stats.unsubErrs++
			}
			e.state = subGone
			if c.aside[e.topic] == e {
				delete(c.aside, e.topic)
			}
			close(e.done)
			c.mu.Unlock()
		}
	}
}

// close unsubscribes every topic (calls still in flight or not) and stops
// the worker and the reaper. Acquire fails with ErrClosed from then on.
func (c *subCache) close(ctx context.Context) error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
		c.lru.Purge()
		for _, e := range c.aside {
			if e.pinned {
				c.evicted = append(c.evicted, e)
			}
		}
		c.processEvicted(evictClosed)
		if !c.started {
			// No worker to drain the queue: start one just for that.
			c.started = true
			go c.worker()
		}
		if !c.reaping {
			close(c.reaperDone)
		}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	for _, done := range [...]chan struct{}{c.reaperDone, c.workerDone} {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("subscription cache close: %w", ctx.Err())
		}
	}
	return nil
}

// snapshot returns the counters.
func (c *subCache) snapshot() subCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.live = c.lru.Len() + c.stats.pinned
	s.unsubQueue = len(c.queue)
	return s
}

// holds reports whether topic is subscribed (or being subscribed) in the
// cache: for tests and diagnostics.
func (c *subCache) holds(topic string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Peek(topic)
	if !ok {
		e = c.aside[topic]
	}
	return e != nil && (e.state == subActive || e.state == subSubscribing)
}

// each calls f for every subscribed entry (LRU first, then pinned), under
// the lock: f must be quick. For listings, not for the hot path.
func (c *subCache) each(f func(topic string, lastUse time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.lru.Keys() {
		if e, ok := c.lru.Peek(k); ok && e.state == subActive {
			f(k, c.base.Add(e.lastUse))
		}
	}
	for k, e := range c.aside {
		if e.pinned && e.state == subActive {
			f(k, c.base.Add(e.lastUse))
		}
	}
}

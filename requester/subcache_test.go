package requester

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// subRecorder is an in-memory subscriber that records every call and
// checks the protocol the cache promises the bus: no subscribe of a topic
// already subscribed, no unsubscribe of one that is not, and never two
// operations on one topic at once. Hooks may block or fail an operation.
type subRecorder struct {
	mu         sync.Mutex
	subscribed map[string]bool
	busy       map[string]bool
	subs       map[string]int
	unsubs     map[string]int
	violations []string
	// onSub runs outside the lock before a subscribe takes effect; its
	// error fails the subscribe.
	onSub func(ctx context.Context, topic string) error
	// onUnsub runs outside the lock before an unsubscribe takes effect.
	onUnsub func(ctx context.Context, topic string)
}

func newSubRecorder() *subRecorder {
	return &subRecorder{subscribed: map[string]bool{}, busy: map[string]bool{}, subs: map[string]int{}, unsubs: map[string]int{}}
}

func (r *subRecorder) begin(op, topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy[topic] {
		r.violations = append(r.violations, fmt.Sprintf("%s %s while another operation on it runs", op, topic))
	}
	r.busy[topic] = true
}

func (r *subRecorder) subscribe(ctx context.Context, topic string) error {
	r.begin("subscribe", topic)
	r.mu.Lock()
	hook := r.onSub
	r.mu.Unlock()
	var err error
	if hook != nil {
		err = hook(ctx, topic)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy[topic] = false
	if err != nil {
		return err
	}
	if r.subscribed[topic] {
		r.violations = append(r.violations, "subscribe of already subscribed "+topic)
	}
	r.subscribed[topic] = true
	r.subs[topic]++
	return nil
}

func (r *subRecorder) unsubscribe(ctx context.Context, topic string) error {
	r.begin("unsubscribe", topic)
	r.mu.Lock()
	hook := r.onUnsub
	r.mu.Unlock()
	if hook != nil {
		hook(ctx, topic)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy[topic] = false
	if !r.subscribed[topic] {
		r.violations = append(r.violations, "unsubscribe of not subscribed "+topic)
	}
	r.subscribed[topic] = false
	r.unsubs[topic]++
	return nil
}

func (r *subRecorder) setHooks(onSub func(context.Context, string) error, onUnsub func(context.Context, string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onSub, r.onUnsub = onSub, onUnsub
}

func (r *subRecorder) isSubscribed(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subscribed[topic]
}

func (r *subRecorder) counts(topic string) (subs, unsubs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subs[topic], r.unsubs[topic]
}

func (r *subRecorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Error("bus protocol violation:", v)
	}
}

// fakeClock is the cache's injected clock: TTL tests move it instead of
// sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const testTTL = time.Hour

// newTestCache returns a started cache (worker on, reaper off: tests call
// reapExpired themselves) over a fresh recorder, closed at cleanup.
func newTestCache(t *testing.T, maxEntries int) (*subCache, *subRecorder, *fakeClock) {
	t.Helper()
	rec := newSubRecorder()
	clk := newFakeClock()
	c := newSubCache(rec, subCacheOptions{maxEntries: maxEntries, ttl: testTTL, now: clk.now, unsubTimeout: 5 * time.Second})
	c.start(0)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		rec.check(t)
	})
	return c, rec, clk
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// use acquires and releases topic once.
func use(t *testing.T, c *subCache, topic string) {
	t.Helper()
	e, err := c.acquire(testCtx(t), topic)
	if err != nil {
		t.Fatalf("acquire %s: %v", topic, err)
	}
	c.release(e)
}

// settle waits until the unsubscribe worker has nothing queued or running.
func settle(t *testing.T, c *subCache) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		busy := len(c.queue) > 0
		for _, e := range c.aside {
			if e.state == subUnsubscribing {
				busy = true
			}
		}
		c.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("unsubscribe worker did not settle")
		}
		time.Sleep(time.Millisecond)
	}
}

func wantCounts(t *testing.T, rec *subRecorder, topic string, subs, unsubs int) {
	t.Helper()
	if s, u := rec.counts(topic); s != subs || u != unsubs {
		t.Errorf("%s: %d subscribes, %d unsubscribes; want %d, %d", topic, s, u, subs, unsubs)
	}
}

func TestSubCacheOverflowUnsubscribesOnce(t *testing.T) {
	c, rec, _ := newTestCache(t, 2)
	use(t, c, "a")
	use(t, c, "b")
	use(t, c, "a") // a is now the most recent: b is the oldest
	use(t, c, "c") // overflow evicts b
	settle(t, c)
	wantCounts(t, rec, "a", 1, 0)
	wantCounts(t, rec, "b", 1, 1)
	wantCounts(t, rec, "c", 1, 0)
	use(t, c, "d") // evicts a
	settle(t, c)
	wantCounts(t, rec, "a", 1, 1)
	wantCounts(t, rec, "b", 1, 1)
	s := c.snapshot()
	if s.evictions != 2 || s.unsubscribes != 2 || s.live != 2 || s.hits != 1 || s.misses != 4 {
		t.Errorf("stats %+v", s)
	}
	use(t, c, "b") // comes back: a fresh subscribe
	settle(t, c)
	wantCounts(t, rec, "b", 2, 1)
	wantCounts(t, rec, "c", 1, 1)
}

func TestSubCacheTTLExpiryUnsubscribesOnce(t *testing.T) {
	c, rec, clk := newTestCache(t, 10)
	use(t, c, "a")
	clk.advance(testTTL / 2)
	use(t, c, "b")
	clk.advance(testTTL/2 - time.Nanosecond)
	if n := c.reapExpired(); n != 0 {
		t.Fatalf("reaped %d before the TTL", n)
	}
	clk.advance(time.Nanosecond) // a idle for exactly the TTL
	if n := c.reapExpired(); n != 1 {
		t.Fatalf("reaped %d, want 1", n)
	}
	for range 3 {
		c.reapExpired()
	}
	settle(t, c)
	wantCounts(t, rec, "a", 1, 1)
	wantCounts(t, rec, "b", 1, 0)
	clk.advance(testTTL)
	c.reapExpired()
	c.reapExpired()
	settle(t, c)
	wantCounts(t, rec, "b", 1, 1)
	if s := c.snapshot(); s.expired != 2 || s.unsubscribes != 2 || s.live != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestSubCacheReuseExtendsTTL(t *testing.T) {
	tests := []struct {
		name string
		// reuse touches the entry at 3/4 of the TTL.
		reuse func(t *testing.T, c *subCache)
	}{
		{"acquire and release", func(t *testing.T, c *subCache) { use(t, c, "a") }},
		{"release of a long call", nil}, // the call started at 0 and ends at 3/4 TTL
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, rec, clk := newTestCache(t, 10)
			var held *subEntry
			if tc.reuse == nil {
				var err error
				if held, err = c.acquire(testCtx(t), "a"); err != nil {
					t.Fatal(err)
				}
			} else {
				use(t, c, "a")
			}
			clk.advance(testTTL * 3 / 4)
			if tc.reuse == nil {
				c.release(held)
			} else {
				tc.reuse(t, c)
			}
			clk.advance(testTTL / 2) // 1.25 TTL after the first use, 0.5 after the last
			c.reapExpired()
			settle(t, c)
			wantCounts(t, rec, "a", 1, 0)
			clk.advance(testTTL / 2)
			c.reapExpired()
			settle(t, c)
			wantCounts(t, rec, "a", 1, 1)
		})
	}
}

// The expirable LRU's Get does not extend the TTL, and v2.0.7 may replace an
// expired-but-unreaped entry without its eviction callback. Here an entry
// past its TTL that the reaper has not reached yet is still subscribed: a
// call reuses it (no second subscribe, no unsubscribe) and extends it.
func TestSubCacheExpiredButUnreapedIsReused(t *testing.T) {
	c, rec, clk := newTestCache(t, 10)
	use(t, c, "a")
	clk.advance(2 * testTTL)
	use(t, c, "a")
	c.reapExpired()
	settle(t, c)
	wantCounts(t, rec, "a", 1, 0)
	if !c.holds("a") {
		t.Fatal("a dropped")
	}
	clk.advance(testTTL)
	c.reapExpired()
	settle(t, c)
	wantCounts(t, rec, "a", 1, 1)
}

func TestSubCacheInFlightKeepsSubscription(t *testing.T) {
	tests := []struct {
		name  string
		evict func(t *testing.T, c *subCache, clk *fakeClock)
	}{
		{"overflow", func(t *testing.T, c *subCache, clk *fakeClock) {
			for _, k := range []string{"b", "c", "d", "e"} {
				use(t, c, k)
			}
		}},
		{"ttl", func(t *testing.T, c *subCache, clk *fakeClock) {
			clk.advance(3 * testTTL)
			c.reapExpired()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, rec, clk := newTestCache(t, 2)
			held, err := c.acquire(testCtx(t), "a")
			if err != nil {
				t.Fatal(err)
			}
			tc.evict(t, c, clk)
			settle(t, c)
			wantCounts(t, rec, "a", 1, 0)
			if !rec.isSubscribed("a") || !c.holds("a") {
				t.Fatal("a lost its subscription with a call in flight")
			}
			// A second call of the pinned context reuses it.
			use(t, c, "a")
			wantCounts(t, rec, "a", 1, 0)
			if s := c.snapshot(); s.pinned != 1 {
				t.Errorf("pinned = %d, want 1", s.pinned)
			}
			c.release(held) // re-admitted as the most recent entry
			settle(t, c)
			s := c.snapshot()
			if s.pinned != 0 || s.live > 2 {
				t.Errorf("after release: %+v", s)
			}
			wantCounts(t, rec, "a", 1, 0)
			// Once idle it goes like any other, exactly once.
			clk.advance(testTTL)
			c.reapExpired()
			c.reapExpired()
			settle(t, c)
			wantCounts(t, rec, "a", 1, 1)
		})
	}
}

func TestSubCacheConcurrentFirstCallsSubscribeOnce(t *testing.T) {
	c, rec, _ := newTestCache(t, 10)
	gate := make(chan struct{})
	rec.setHooks(func(ctx context.Context, _ string) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil)
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	entries := make(chan *subEntry, n)
	for range n {
		wg.Go(func() {
			e, err := c.acquire(testCtx(t), "a")
			errs <- err
			entries <- e
		})
	}
	// Wait until every caller is in (one subscribing, the rest waiting).
	pollUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, ok := c.lru.Peek("a")
		return ok && e.inflight == n
	})
	close(gate)
	wg.Wait()
	close(errs)
	close(entries)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for e := range entries {
		c.release(e)
	}
	wantCounts(t, rec, "a", 1, 0)
	if s := c.snapshot(); s.misses != 1 || s.hits != n-1 || s.subscribes != 1 {
		t.Errorf("stats %+v", s)
	}
}

func pollUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(time.Millisecond)
	}
}

// A call that comes while its context's unsubscribe is still on the wire
// waits for it and subscribes again: the late unsubscribe cannot undo the
// new subscription.
func TestSubCacheLateUnsubscribeDoesNotUndoNewSubscribe(t *testing.T) {
	c, rec, clk := newTestCache(t, 10)
	use(t, c, "a")
	inUnsub := make(chan struct{})
	gate := make(chan struct{})
	rec.setHooks(nil, func(ctx context.Context, topic string) {
		close(inUnsub)
		select {
		case <-gate:
		case <-ctx.Done():
		}
	})
	clk.advance(testTTL)
	c.reapExpired()
	<-inUnsub // the worker is unsubscribing a, slowly

	got := make(chan error, 1)
	var held *subEntry
	go func() {
		e, err := c.acquire(testCtx(t), "a")
		held = e
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("acquire returned (%v) while the unsubscribe was still running", err)
	case <-time.After(50 * time.Millisecond): // only proves absence of an early return; no timing assertion
	}
	close(gate)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	rec.setHooks(nil, nil)
	settle(t, c)
	wantCounts(t, rec, "a", 2, 1)
	if !rec.isSubscribed("a") || !c.holds("a") {
		t.Fatal("a ends unsubscribed")
	}
	c.release(held)
}

// Many rounds of a call of one context racing its eviction (by overflow and
// by TTL): while a call holds the context the bus has it subscribed, the
// bus sees a clean subscribe/unsubscribe alternation, and when everything
// is quiet the cache and the bus agree. Run with -race.
func TestSubCacheEvictionRacesNewCall(t *testing.T) {
	c, rec, clk := newTestCache(t, 2)
	rec.setHooks(func(context.Context, string) error { runtime.Gosched(); return nil },
		func(context.Context, string) { runtime.Gosched() })
	topics := []string{"a", "b", "c", "d"}
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for _, k := range topics {
			wg.Go(func() {
				for range 3 {
					e, err := c.acquire(testCtx(t), k)
					if err != nil {
						t.Errorf("acquire %s: %v", k, err)
						return
					}
					if !rec.isSubscribed(k) {
						t.Errorf("round %d: %s held but not subscribed", round, k)
					}
					runtime.Gosched()
					if !rec.isSubscribed(k) {
						t.Errorf("round %d: %s lost its subscription while held", round, k)
					}
					c.release(e)
				}
			})
		}
		wg.Go(func() {
			for range 3 {
				clk.advance(testTTL)
				c.reapExpired()
				runtime.Gosched()
			}
		})
		wg.Wait()
		settle(t, c)
		for _, k := range topics {
			if c.holds(k) != rec.isSubscribed(k) {
				t.Fatalf("round %d: cache holds(%s)=%v, bus subscribed=%v", round, k, c.holds(k), rec.isSubscribed(k))
			}
		}
		if t.Failed() {
			return
		}
	}
	if s := c.snapshot(); s.live > 2 || s.pinned != 0 {
		t.Errorf("stats after the rounds: %+v", s)
	}
}

func TestSubCacheSubscribeFailure(t *testing.T) {
	c, rec, _ := newTestCache(t, 10)
	boom := errors.New("broker says no")
	gate := make(chan struct{})
	rec.setHooks(func(ctx context.Context, _ string) error {
		<-gate
		return boom
	}, nil)
	errs := make(chan error, 2)
	go func() { _, err := c.acquire(testCtx(t), "a"); errs <- err }()
	pollUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); _, ok := c.lru.Peek("a"); return ok })
	go func() { _, err := c.acquire(testCtx(t), "a"); errs <- err }()
	pollUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, _ := c.lru.Peek("a")
		return e != nil && e.inflight == 2
	})
	close(gate)
	for range 2 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Fatalf("got %v, want %v", err, boom)
		}
	}
	if c.holds("a") {
		t.Fatal("failed subscription cached")
	}
	rec.setHooks(nil, nil)
	use(t, c, "a")
	wantCounts(t, rec, "a", 1, 0)
	if s := c.snapshot(); s.subErrors != 1 || s.live != 1 {
		t.Errorf("stats %+v", s)
	}
}

// The first caller's own cancellation must not fail the others that wait
// for the same subscription: one of them subscribes instead.
func TestSubCacheSubscriberCancelledOthersRetry(t *testing.T) {
	c, rec, _ := newTestCache(t, 10)
	first := true
	var mu sync.Mutex
	rec.setHooks(func(ctx context.Context, _ string) error {
		mu.Lock()
		f := first
		first = false
		mu.Unlock()
		if f {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, nil)
	ctx1, cancel1 := context.WithCancel(testCtx(t))
	errs := make(chan error, 1)
	go func() { _, err := c.acquire(ctx1, "a"); errs <- err }()
	pollUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); _, ok := c.lru.Peek("a"); return ok })
	got := make(chan *subEntry, 1)
	go func() {
		e, err := c.acquire(testCtx(t), "a")
		if err != nil {
			t.Error(err)
		}
		got <- e
	}()
	pollUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		e, _ := c.lru.Peek("a")
		return e != nil && e.inflight == 2
	})
	cancel1()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v", err)
	}
	e := <-got
	if e == nil || !rec.isSubscribed("a") {
		t.Fatal("second caller did not end subscribed")
	}
	c.release(e)
}

func TestSubCacheWaitersHonourContext(t *testing.T) {
	c, rec, clk := newTestCache(t, 10)
	use(t, c, "a")
	gate := make(chan struct{})
	inUnsub := make(chan struct{})
	rec.setHooks(nil, func(ctx context.Context, _ string) { close(inUnsub); <-gate })
	clk.advance(testTTL)
	c.reapExpired()
	<-inUnsub
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
	defer cancel()
	if _, err := c.acquire(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want deadline exceeded", err)
	}
	close(gate)
	settle(t, c)
	rec.setHooks(nil, nil)
	wantCounts(t, rec, "a", 1, 1)
}

func TestSubCacheClose(t *testing.T) {
	rec := newSubRecorder()
	clk := newFakeClock()
	c := newSubCache(rec, subCacheOptions{maxEntries: 2, ttl: testTTL, now: clk.now})
	c.start(time.Millisecond)
	use(t, c, "a")
	use(t, c, "b")
	held, err := c.acquire(testCtx(t), "c") // a evicted, c held
	if err != nil {
		t.Fatal(err)
	}
	held2, err := c.acquire(testCtx(t), "d") // b evicted
	if err != nil {
		t.Fatal(err)
	}
	use(t, c, "e") // c evicted but pinned: it is held
	settle(t, c)
	if err := c.close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		wantCounts(t, rec, k, 1, 1)
	}
	c.release(held) // after close: no-op, no panic
	c.release(held2)
	if _, err := c.acquire(testCtx(t), "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	if err := c.close(testCtx(t)); err != nil {
		t.Fatalf("second close: %v", err)
	}
	rec.check(t)
}

// A subscribe still on the wire when close runs is undone by its own caller.
func TestSubCacheSubscribeFinishingAfterClose(t *testing.T) {
	rec := newSubRecorder()
	c := newSubCache(rec, subCacheOptions{maxEntries: 2, ttl: testTTL})
	c.start(0)
	inSub := make(chan struct{})
	gate := make(chan struct{})
	rec.setHooks(func(context.Context, string) error { close(inSub); <-gate; return nil }, nil)
	errs := make(chan error, 1)
	go func() { _, err := c.acquire(testCtx(t), "a"); errs <- err }()
	<-inSub
	if err := c.close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	wantCounts(t, rec, "a", 1, 1)
	rec.check(t)
}

// The reaper goroutine does the same as reapExpired, on its own.
func TestSubCacheReaperRuns(t *testing.T) {
	rec := newSubRecorder()
	clk := newFakeClock()
	c := newSubCache(rec, subCacheOptions{maxEntries: 10, ttl: testTTL, now: clk.now})
	c.start(time.Millisecond)
	t.Cleanup(func() { _ = c.close(context.Background()) })
	use(t, c, "a")
	clk.advance(testTTL)
	pollUntil(t, func() bool { _, u := rec.counts("a"); return u == 1 })
	rec.check(t)
}

// TestSubCacheForget: a subscription the bus lost (refused after a
// reconnect) leaves the cache without an unsubscribe, a call that held it
// keeps its entry harmlessly, and the next acquire subscribes again.
func TestSubCacheForget(t *testing.T) {
	c, rec, _ := newTestCache(t, 4)
	ctx := testCtx(t)
	held, err := c.acquire(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	// The broker refused t1 when the bus subscribed it again.
	rec.mu.Lock()
	rec.subscribed["t1"] = false
	rec.mu.Unlock()
	c.forget("t1")
	c.forget("never") // nothing to forget: no-op
	if c.holds("t1") {
		t.Fatal("the cache still holds t1")
	}
	c.release(held)
	e, err := c.acquire(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	c.release(e)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.subs["t1"] != 2 || rec.unsubs["t1"] != 0 {
		t.Fatalf("t1: %d subscribes, %d unsubscribes; want 2 and 0", rec.subs["t1"], rec.unsubs["t1"])
	}
}

package requester

import (
	"errors"
	"testing"
	"time"
)

// TestSubCacheEvict: an operator's eviction unsubscribes an idle context
// once and returns when that is done, refuses one with a call in flight
// (its answer would be lost), and leaves the context free to subscribe
// again.
func TestSubCacheEvict(t *testing.T) {
	c, rec, clk := newTestCache(t, 8)
	const a, b = "ff/v2/mcp/+/+/p/u/s1/_/_/res", "ff/v2/mcp/+/+/p/u/s2/_/_/res"
	use(t, c, a)
	clk.advance(time.Minute)
	held, err := c.acquire(testCtx(t), b)
	if err != nil {
		t.Fatal(err)
	}

	var seen []string
	c.eachEntry(func(e *subEntry) {
		seen = append(seen, e.topic)
		if e.topic == a && (e.created != 0 || e.lastUse != 0) {
			t.Errorf("%s: created %v, lastUse %v; want both at the start", a, e.created, e.lastUse)
		}
		if e.topic == b && (e.created != time.Minute || e.inflight != 1) {
			t.Errorf("%s: created %v, inflight %d; want 1m, 1", b, e.created, e.inflight)
		}
	})
	if len(seen) != 2 {
		t.Fatalf("eachEntry saw %v", seen)
	}

	if _, err := c.evict(b); !errors.Is(err, ErrContextBusy) {
		t.Fatalf("evict with a call in flight: %v, want ErrContextBusy", err)
	}
	done, err := c.evict(a)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-testCtx(t).Done():
		t.Fatal("the unsubscribe did not finish")
	}
	wantCounts(t, rec, a, 1, 1)
	if c.holds(a) || !c.holds(b) {
		t.Fatalf("after evict: holds(a)=%v holds(b)=%v", c.holds(a), c.holds(b))
	}
	if _, err := c.evict(a); !errors.Is(err, ErrContextNotFound) {
		t.Fatalf("evict twice: %v, want ErrContextNotFound", err)
	}
	if st := c.snapshot(); st.evictions != 0 || st.expired != 0 || st.unsubscribes != 1 {
		t.Errorf("counters %+v: an operator's eviction is neither overflow nor expiry", st)
	}
	use(t, c, a)
	wantCounts(t, rec, a, 2, 1)
	c.release(held)
}

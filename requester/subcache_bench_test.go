package requester

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

// nullBus accepts everything and delivers nothing: it isolates the
// Requester's own memory per context from the broker's.
type nullBus struct{}

func (nullBus) Subscribe(context.Context, string, MessageHandler) error { return nil }
func (nullBus) Unsubscribe(context.Context, string) error               { return nil }
func (nullBus) Publish(context.Context, string, []byte) error           { return nil }

func benchInlineBus(b *testing.B) Bus {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, b.TempDir(), store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	br, err := broker.New(broker.Options{Authenticator: st, Authorizer: acl.NewPolicy(nil)})
	if err != nil {
		b.Fatal(err)
	}
	if err := br.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Close() })
	return br.Bus()
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkContexts100k fills a Requester with 100 000 cached contexts
// (each a real subscription on the bus), then reuses them all, then lets
// them all expire. It reports the heap bytes per context, the subscribe
// rate (first calls), the cost of a cache hit, and the unsubscribe rate
// (the worker draining 100 000 expirations). Run with -benchtime=1x.
func BenchmarkContexts100k(b *testing.B) {
	const n = 100_000
	for _, tc := range []struct {
		name string
		bus  func(b *testing.B) Bus
	}{
		{"nullbus", func(*testing.B) Bus { return nullBus{} }},
		{"inline", benchInlineBus},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				bus := tc.bus(b)
				clk := newFakeClock()
				ctx := context.Background()
				contexts := make([]contract.Context, n)
				for i := range contexts {
					contexts[i] = contract.Context{PlatformID: "bench", UserID: fmt.Sprintf("user-%d", i), SessionID: fmt.Sprintf("%032x", i), EntityType: contract.NoEntity, EntityID: contract.NoEntity}
				}
				r := New(bus, Options{MaxContexts: n, IgnorePresence: true, now: clk.now})
				if err := r.Start(ctx); err != nil {
					b.Fatal(err)
				}
				before := heapInUse()

				start := time.Now()
				for _, c := range contexts {
					e, err := r.cache.acquire(ctx, c.ReplyFilter())
					if err != nil {
						b.Fatal(err)
					}
					r.cache.release(e)
				}
				subDur := time.Since(start)
				after := heapInUse()

				topics := make([]string, n)
				for i, c := range contexts {
					topics[i] = c.ReplyFilter()
				}
				start = time.Now()
				for _, t := range topics {
					e, err := r.cache.acquire(ctx, t)
					if err != nil {
						b.Fatal(err)
					}
					r.cache.release(e)
				}
				hitDur := time.Since(start)

				clk.advance(DefaultContextTTL)
				start = time.Now()
				r.cache.reapExpired()
				for r.Stats().Unsubscribes < n {
					time.Sleep(time.Millisecond)
				}
				unsubDur := time.Since(start)

				s := r.Stats()
				if s.Subscribes != n || s.Hits != n || s.Expired != n || s.Contexts != 0 {
					b.Fatalf("stats %+v", s)
				}
				b.ReportMetric(float64(after-before)/n, "bytes/context")
				b.ReportMetric(n/subDur.Seconds(), "subscribes/s")
				b.ReportMetric(float64(hitDur.Nanoseconds())/n, "ns/hit")
				b.ReportMetric(n/unsubDur.Seconds(), "unsubscribes/s")
				if err := r.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

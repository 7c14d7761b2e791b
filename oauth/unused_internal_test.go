package oauth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/store"
)

// fakeRegistry keeps clients as the store does: registration times in
// milliseconds, and a purge that deletes the unused ones before a time.
// With entered and release set, RegisterOAuthClient says it was entered
// and waits to be released.
type fakeRegistry struct {
	now              func() time.Time
	entered, release chan struct{}

	mu      sync.Mutex
	n       int
	created map[string]time.Time
}

func (f *fakeRegistry) RegisterOAuthClient(_ context.Context, name string, uris []string, _ bool) (store.OAuthClient, string, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	c := store.OAuthClient{ID: fmt.Sprintf("tbc_%d", f.n), Name: name, RedirectURIs: uris, Created: f.now().Truncate(time.Millisecond)}
	f.created[c.ID] = c.Created
	return c, "", nil
}

func (f *fakeRegistry) PurgeUnusedOAuthClients(_ context.Context, before time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for id, c := range f.created {
		if c.Before(before) {
			delete(f.created, id)
			n++
		}
	}
	return n, nil
}

// TestUnusedClientsEvictOldest: at the bound, a registration deletes the
// oldest unused client once it is MinUnusedClientAge old, and is refused
// (with the wait) while none is; a used client is never counted.
func TestUnusedClientsEvictOldest(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	reg := &fakeRegistry{now: now, created: map[string]time.Time{}}
	u := newUnusedClients(3, -1, 24*time.Hour, MinUnusedClientAge)
	u.now = now
	ctx := context.Background()
	register := func() (string, time.Duration, error) {
		c, _, wait, err := u.register(ctx, reg, "192.0.2.1", "c", []string{"http://127.0.0.1/cb"}, false)
		return c.ID, wait, err
	}
	var ids []string
	for range 3 {
		id, _, err := register()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		clock = clock.Add(time.Minute)
	}
	if _, wait, err := register(); !errors.Is(err, errTooManyUnused) || wait != MinUnusedClientAge-3*time.Minute {
		t.Fatalf("over the bound, all young: %v, wait %v; want errTooManyUnused and %v", err, wait, MinUnusedClientAge-3*time.Minute)
	}
	u.used(ids[1]) // consented: the store keeps it, and it no longer counts
	if _, _, err := register(); err != nil {
		t.Fatalf("after a consent: %v", err)
	}
	clock = clock.Add(MinUnusedClientAge)
	if _, _, err := register(); err != nil {
		t.Fatalf("with the oldest old enough: %v", err)
	}
	if _, ok := reg.created[ids[0]]; ok {
		t.Fatal("the oldest unused client was not deleted")
	}
	if len(u.live) != 3 {
		t.Fatalf("%d unused clients counted, want 3", len(u.live))
	}
}

// TestUnusedClientsPerSource: a source at its quota is refused (with the
// wait until its oldest goes with the TTL) while the others still
// register; a consent, or the TTL, gives it room again.
func TestUnusedClientsPerSource(t *testing.T) {
	const ttl = 24 * time.Hour
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	reg := &fakeRegistry{now: now, created: map[string]time.Time{}}
	u := newUnusedClients(100, 2, ttl, MinUnusedClientAge)
	u.now = now
	register := func(source string) (string, time.Duration, error) {
		c, _, wait, err := u.register(context.Background(), reg, source, "c", []string{"http://127.0.0.1/cb"}, false)
		return c.ID, wait, err
	}
	var ids []string
	for range 2 {
		id, _, err := register("192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		clock = clock.Add(time.Minute)
	}
	if _, wait, err := register("192.0.2.1"); !errors.Is(err, errSourceUnused) || wait != ttl-2*time.Minute {
		t.Fatalf("a source over its quota: %v, wait %v; want errSourceUnused and %v", err, wait, ttl-2*time.Minute)
	}
	if _, _, err := register("2001:db8::/64"); err != nil {
		t.Fatalf("another source: %v", err)
	}
	u.used(ids[0])
	if _, _, err := register("192.0.2.1"); err != nil {
		t.Fatalf("after a consent: %v", err)
	}
	clock = clock.Add(ttl + time.Minute) // all its clients are older than the TTL
	if _, _, err := register("192.0.2.1"); err != nil {
		t.Fatalf("after the TTL: %v", err)
	}
	if n := u.bySource["192.0.2.1"]; n != 1 {
		t.Fatalf("%d clients of the source counted after the TTL, want 1", n)
	}
}

// TestUnusedClientsStoreOutsideLock: a registration waiting on the store
// holds up neither another registration nor a consent.
func TestUnusedClientsStoreOutsideLock(t *testing.T) {
	slow := &fakeRegistry{now: time.Now, created: map[string]time.Time{},
		entered: make(chan struct{}), release: make(chan struct{})}
	fast := &fakeRegistry{now: time.Now, created: map[string]time.Time{}}
	u := newUnusedClients(10, 5, time.Hour, MinUnusedClientAge)
	done := make(chan error, 1)
	go func() {
		_, _, _, err := u.register(context.Background(), slow, "192.0.2.1", "slow", nil, false)
		done <- err
	}()
	<-slow.entered
	t.Cleanup(func() {
		close(slow.release)
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	others := make(chan error, 1)
	go func() {
		u.used("tbc_none")
		_, _, _, err := u.register(context.Background(), fast, "192.0.2.2", "fast", nil, false)
		others <- err
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a consent and a registration waited for another registration's store call")
	}
}

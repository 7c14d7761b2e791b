package oauth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolbus/toolbus/store"
)

// errTooManyUnused refuses a registration while Options.MaxUnusedClients
// clients registered here are unused and none of them is old enough to be
// deleted for it (MinUnusedClientAge).
var errTooManyUnused = errors.New("too many clients registered and not yet used")

// errSourceUnused refuses a registration from a source (netsrc.Key) that
// has Options.MaxUnusedClientsPerSource clients registered here and not yet
// used.
var errSourceUnused = errors.New("too many clients registered from this address and not yet used")

// clientRegistry is what unusedClients needs of the Store.
type clientRegistry interface {
	RegisterOAuthClient(ctx context.Context, name string, redirectURIs []string, confidential bool) (store.OAuthClient, string, error)
	PurgeUnusedOAuthClients(ctx context.Context, registeredBefore time.Time) (int64, error)
}

// unusedClients bounds the registered clients no user has consented to.
// Registration is open to anyone, so without a bound a few addresses,
// each within its rate limit, fill the store with clients nobody uses.
// Each source has a quota of its own ahead of the bound of all, so that
// filling the bound takes many sources, not a few.
//
// It knows the clients this process registered (the store has no count of
// them): with replicas, or across a restart, each process bounds its own,
// and the store's older ones go with UnusedClientTTL as before.
type unusedClients struct {
	max, perSource int           // < 0: no bound
	ttl, minAge    time.Duration // minAge: the least an unused client is kept when max is reached
	now            func() time.Time

	// mu guards the counts, never a store round trip: a registration
	// takes its place under it (reserved), then purges and inserts
	// without it.
	mu       sync.Mutex
	order    []unusedEntry          // by registration time; entries no longer in live are skipped
	live     map[string]unusedEntry // unused clients registered here, by ID
	bySource map[string]int         // live and reserved clients of each source
	reserved int                    // registrations counted, not yet in live
}

type unusedEntry struct {
	id, source string
	created    time.Time
}

func newUnusedClients(max, perSource int, ttl, minAge time.Duration) *unusedClients {
	return &unusedClients{max: max, perSource: perSource, ttl: ttl, minAge: minAge, now: time.Now,
		live: map[string]unusedEntry{}, bySource: map[string]int{}}
}

// register purges the unused clients older than the TTL, makes room under
// the bound by deleting the oldest unused ones at least minAge old, and
// registers the client for source. When source has its quota of unused
// clients it returns errSourceUnused, and when no room can be made
// errTooManyUnused, each with how long until one of them may go.
func (u *unusedClients) register(ctx context.Context, st clientRegistry, source, name string, uris []string, confidential bool) (store.OAuthClient, string, time.Duration, error) {
	now := u.now()
	// Registrations are rate-limited, so purging here bounds the unused
	// clients with no goroutine of its own.
	purge := now.Add(-u.ttl)
	track := u.max >= 0 || u.perSource >= 0
	if track {
		var wait time.Duration
		var err error
		if purge, wait, err = u.reserve(source, now); err != nil {
			return store.OAuthClient{}, "", wait, err
		}
	}
	c, secret, err := u.insert(ctx, st, purge, name, uris, confidential)
	if !track {
		return c, secret, 0, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reserved--
	if err != nil {
		u.release(source)
		return store.OAuthClient{}, "", 0, err
	}
	e := unusedEntry{id: c.ID, source: source, created: c.Created}
	u.live[c.ID] = e
	// Concurrent registrations may end out of order: keep order sorted.
	i := len(u.order)
	for i > 0 && u.order[i-1].created.After(e.created) {
		i--
	}
	u.order = slices.Insert(u.order, i, e)
	return c, secret, 0, nil
}

// reserve counts a registration of source, making room under the bound,
// and returns the time before which the store's unused clients are to be
// purged. The clients it makes room by are forgotten here before the store
// deletes them: if that fails, the TTL deletes them later.
func (u *unusedClients) reserve(source string, now time.Time) (purge time.Time, wait time.Duration, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	purge = now.Add(-u.ttl)
	u.forgetBefore(purge)
	if u.perSource >= 0 && u.bySource[source] >= u.perSource {
		return time.Time{}, u.sourceWait(source, now), errSourceUnused
	}
	for u.max >= 0 && len(u.live)+u.reserved >= u.max {
		if len(u.live) == 0 { // all the room is being taken right now
			return time.Time{}, time.Second, errTooManyUnused
		}
		oldest := u.oldest()
		if age := now.Sub(oldest.created); age < u.minAge {
			return time.Time{}, u.minAge - age, errTooManyUnused
		}
		// The store's clock counts milliseconds: this deletes oldest and
		// any unused client registered before it, here or elsewhere.
		before := oldest.created.Truncate(time.Millisecond).Add(time.Millisecond)
		u.forgetBefore(before)
		purge = before
	}
	u.reserved++
	u.bySource[source]++
	return purge, 0, nil
}

// insert purges the store's unused clients registered before purge and
// registers the client.
func (u *unusedClients) insert(ctx context.Context, st clientRegistry, purge time.Time, name string, uris []string, confidential bool) (store.OAuthClient, string, error) {
	if _, err := st.PurgeUnusedOAuthClients(ctx, purge); err != nil {
		return store.OAuthClient{}, "", fmt.Errorf("purge unused clients: %w", err)
	}
	return st.RegisterOAuthClient(ctx, name, uris, confidential)
}

// sourceWait is how long until the oldest unused client of source goes
// with the TTL (sooner if a user consents to one).
func (u *unusedClients) sourceWait(source string, now time.Time) time.Duration {
	for _, e := range u.order {
		if l, ok := u.live[e.id]; ok && l.source == source {
			return max(0, u.ttl-now.Sub(e.created))
		}
	}
	return time.Second // its clients are being registered right now
}

// used forgets a client a user consented to: the store keeps it.
func (u *unusedClients) used(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.live[id]
	if !ok {
		return
	}
	u.forget(e)
	// order keeps the used entries until they reach its front; rebuild it
	// when they are most of it, so that it stays within twice live.
	if len(u.order) > 2*len(u.live)+64 {
		kept := make([]unusedEntry, 0, 2*len(u.live)+1)
		for _, e := range u.order {
			if _, ok := u.live[e.id]; ok {
				kept = append(kept, e)
			}
		}
		u.order = kept
	}
}

// forget drops e from live and its source's count.
func (u *unusedClients) forget(e unusedEntry) {
	if l, ok := u.live[e.id]; !ok || !l.created.Equal(e.created) {
		return
	}
	delete(u.live, e.id)
	u.release(e.source)
}

// release takes one client off source's count.
func (u *unusedClients) release(source string) {
	if u.bySource[source] <= 1 {
		delete(u.bySource, source)
		return
	}
	u.bySource[source]--
}

// oldest returns the oldest live entry; live is not empty.
func (u *unusedClients) oldest() unusedEntry {
	for {
		e := u.order[0]
		if c, ok := u.live[e.id]; ok && c.created.Equal(e.created) {
			return e
		}
		u.order = u.order[1:] // used since: skip it
	}
}

// forgetBefore forgets the clients registered before t (the store has
// deleted, or is about to delete, the unused ones among them).
func (u *unusedClients) forgetBefore(t time.Time) {
	for len(u.order) > 0 && u.order[0].created.Before(t) {
		u.forget(u.order[0])
		u.order = u.order[1:]
	}
	if len(u.order) == 0 {
		u.order = nil // let the array go
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/store"
)

func openSharedStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir(), store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestSessionsSharedEnd: two replicas (sessions sharing a secret and a
// real store): a session ended on one is refused by the other, at once
// without a cache, within the cache TTL with one.
func TestSessionsSharedEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st := openSharedStore(t)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	replica := func(ttl time.Duration) *sessions {
		ss := newSessions([]byte("secret"), time.Hour)
		ss.now = clock
		ss.shareEnded(st, ttl, nil)
		return ss
	}
	a, bNoCache, bCached := replica(0), replica(-1), replica(time.Second)

	caps := json.RawMessage(`{"sampling": {}, "roots": {"listChanged": true}}`)
	s, id := mustCreate(t, a, "alice", "tb_1", version20251125, caps)
	for name, b := range map[string]*sessions{"no cache": bNoCache, "cached": bCached} {
		got, err := b.lookup(id, "alice", "tb_1")
		if err == nil {
			err = b.checkShared(ctx, got)
		}
		if err != nil {
			t.Fatalf("%s: replica lookup: %v", name, err)
		}
		if string(got.caps) != `{"sampling":{},"roots":{"listChanged":true}}` {
			t.Fatalf("%s: restored session caps = %s; want the client's, compacted", name, got.caps)
		}
	}

	if err := a.endShared(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := a.lookup(id, "alice", "tb_1"); !errors.Is(err, errSessionEnded) {
		t.Fatalf("ending replica: err = %v, want errSessionEnded", err)
	}
	check := func(b *sessions) error {
		got, err := b.lookup(id, "alice", "tb_1")
		if err != nil {
			return err
		}
		return b.checkShared(ctx, got)
	}
	if err := check(bNoCache); !errors.Is(err, errSessionEnded) {
		t.Fatalf("replica without cache: err = %v, want errSessionEnded at once", err)
	}
	if err := check(bCached); err != nil {
		t.Fatalf("replica with a fresh cache entry: err = %v; want it served until the entry is stale", err)
	}
	now = now.Add(time.Second)
	if err := check(bCached); !errors.Is(err, errSessionEnded) {
		t.Fatalf("replica after its cache TTL: err = %v, want errSessionEnded", err)
	}
	// Then it is known locally: no store needed.
	if err := check(bCached); !errors.Is(err, errSessionEnded) {
		t.Fatalf("replica, again: err = %v", err)
	}

	// A session ended on no replica is served after a store outage too.
	_, id2 := mustCreate(t, a, "alice", "tb_1", version20251125, nil)
	_ = st.Close()
	got, err := bNoCache.lookup(id2, "alice", "tb_1")
	if err == nil {
		err = bNoCache.checkShared(ctx, got)
	}
	if err != nil {
		t.Fatalf("store down: err = %v; want the session served", err)
	}
	if err := a.endShared(ctx, got); err == nil {
		t.Fatal("endShared with the store down succeeded")
	}
	if _, err := a.lookup(id2, "alice", "tb_1"); err != nil {
		t.Fatalf("a session whose end could not be recorded is ended anyway: %v", err)
	}
}

func TestClaimCaps(t *testing.T) {
	big := `{"sampling":{},"elicitation":{"form":{}},"experimental":{"x":"` + strings.Repeat("a", maxClaimCaps) + `"}}`
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{`{ "roots" : { "listChanged" : true } }`, `{"roots":{"listChanged":true}}`},
		{big, `{"elicitation":{},"sampling":{}}`},
		{`{"experimental":{"x":"` + strings.Repeat("a", maxClaimCaps) + `"}}`, ""},
		{`not json`, ""},
	} {
		if got := string(claimCaps(json.RawMessage(tc.in))); got != tc.want {
			t.Errorf("claimCaps(%.40s) = %s; want %s", tc.in, got, tc.want)
		}
	}
	ss := newSessions([]byte("k"), time.Hour)
	_, id := mustCreate(t, ss, "u", "t", version20251125, json.RawMessage(big))
	if len(id) > maxSessionIDLen {
		t.Fatalf("session id of %d bytes exceeds maxSessionIDLen", len(id))
	}
}

// countingEnded counts the store reads of an EndedSessions.
type countingEnded struct {
	EndedSessions
	reads int
}

func (c *countingEnded) SessionEnded(ctx context.Context, key string) (bool, error) {
	c.reads++
	return c.EndedSessions.SessionEnded(ctx, key)
}

// The replica that creates a session knows it is not ended: its first
// requests within the cache TTL do not ask the store.
func TestSessionsSharedNewSessionNotAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st := &countingEnded{EndedSessions: openSharedStore(t)}
	now := time.Unix(1_800_000_000, 0)
	ss := newSessions([]byte("secret"), time.Hour)
	ss.now = func() time.Time { return now }
	ss.shareEnded(st, time.Second, nil)
	s, _ := mustCreate(t, ss, "alice", "tb_1", version20251125, nil)
	for range 3 {
		if err := ss.checkShared(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if st.reads != 0 {
		t.Fatalf("%d store reads for a session this replica just created, want 0", st.reads)
	}
	now = now.Add(time.Second)
	if err := ss.checkShared(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st.reads != 1 {
		t.Fatalf("%d store reads after the cache TTL, want 1", st.reads)
	}
}

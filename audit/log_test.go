package audit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(testenv.Context(t, 20*time.Second), t.TempDir(), store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newLog(t *testing.T, opts audit.Options) *audit.Log {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testenv.Logger(t, "")
	}
	l, err := audit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func count(t *testing.T, s *store.Store) int64 {
	t.Helper()
	n, err := s.CountAudit(testenv.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// gatedStore is the real store behind a gate: writes wait until it opens,
// as they would behind a slow disk or another process's write lock.
type gatedStore struct {
	*store.Store
	open chan struct{}
	once sync.Once
}

func (g *gatedStore) InsertAudit(ctx context.Context, evs []store.AuditEvent) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Store.InsertAudit(ctx, evs)
}

func (g *gatedStore) release() { g.once.Do(func() { close(g.open) }) }

// TestQueueFullDropsAndCounts: a store that cannot keep up never blocks
// Record; what does not fit is counted, and what fits is written once the
// store is back.
func TestQueueFullDropsAndCounts(t *testing.T) {
	s := openStore(t)
	g := &gatedStore{Store: s, open: make(chan struct{})}
	t.Cleanup(g.release)
	l := newLog(t, audit.Options{Store: g, QueueSize: 50, BatchSize: 10, FlushInterval: 10 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 80 {
			l.ToolCall(&gateway.ToolCall{Start: time.Now(), UserID: "alice", Tool: "t", Outcome: "ok", RequestID: string(rune('a' + i%26))})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked behind a stalled store")
	}
	if st := l.Stats(); st.Dropped != 30 || st.Depth != 50 {
		t.Fatalf("stats %+v, want 30 dropped and 50 waiting", st)
	}
	g.release()
	testenv.Poll(t, 10*time.Second, "queue written", func() bool { return l.Stats().Depth == 0 })
	if n := count(t, s); n != 50 {
		t.Fatalf("%d records stored, want 50", n)
	}
	if st := l.Stats(); st.Written != 50 || st.Dropped != 30 {
		t.Fatalf("stats %+v, want 50 written and 30 dropped", st)
	}
}

// TestCloseFlushes: Close writes what is queued, however long the flush
// interval, and a Log closed refuses (and counts) later records.
func TestCloseFlushes(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour, BatchSize: 100})
	for range 250 {
		l.ToolCall(&gateway.ToolCall{Start: time.Now(), UserID: "alice", Tool: "t", Outcome: "ok"})
	}
	if n := count(t, s); n != 0 {
		t.Logf("%d records written before Close (full batches go at once)", n)
	}
	if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s); n != 250 {
		t.Fatalf("%d records after Close, want 250", n)
	}
	l.ToolCall(&gateway.ToolCall{Start: time.Now(), Outcome: "ok"})
	if st := l.Stats(); st.Dropped != 1 {
		t.Fatalf("record after Close: stats %+v, want it dropped and counted", st)
	}
}

// TestCloseReportsLoss: records that cannot be written by Close's deadline
// are counted and reported.
func TestCloseReportsLoss(t *testing.T) {
	s := openStore(t)
	g := &gatedStore{Store: s, open: make(chan struct{})}
	t.Cleanup(g.release)
	l := newLog(t, audit.Options{Store: g, FlushInterval: time.Hour})
	for range 5 {
		l.ToolCall(&gateway.ToolCall{Start: time.Now(), Outcome: "ok"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); !errors.Is(err, audit.ErrLost) {
		t.Fatalf("Close: %v, want ErrLost", err)
	}
	if st := l.Stats(); st.Dropped != 5 || st.Depth != 0 {
		t.Fatalf("stats %+v, want 5 dropped", st)
	}
}

// TestRetentionByLog: the writer enforces Retention and MaxRows with its
// clock, deleting only the oldest.
func TestRetentionByLog(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		retention time.Duration
		maxRows   int64
		want      int64
	}{
		{"age", 24 * time.Hour, 0, 24},         // the 24 within a day stay
		{"forever", -1, 0, 72},                 // negative keeps everything
		{"rows", -1, 10, 10},                   // the newest 10
		{"age and rows", 24 * time.Hour, 5, 5}, // both bounds
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			var evs []store.AuditEvent
			for h := range 72 { // one event an hour, 72h back; the newest 24 are within a day (strictly)
				evs = append(evs, store.AuditEvent{Time: now.Add(-time.Duration(h)*time.Hour - time.Minute), Kind: store.AuditToolCall, Outcome: "ok"})
			}
			if err := s.InsertAudit(testenv.Context(t, 10*time.Second), evs); err != nil {
				t.Fatal(err)
			}
			newLog(t, audit.Options{Store: s, Retention: tc.retention, MaxRows: tc.maxRows, Now: func() time.Time { return now }})
			testenv.Poll(t, 10*time.Second, "retention applied", func() bool { return count(t, s) == tc.want })
			left, _, err := s.QueryAudit(testenv.Context(t, 10*time.Second), store.AuditQuery{Limit: store.MaxAuditLimit})
			if err != nil {
				t.Fatal(err)
			}
			if newest := left[0].Time; !newest.Equal(now.Add(-time.Minute)) {
				t.Fatalf("newest left %v: retention deleted a newer record", newest)
			}
		})
	}
}

// TestRecords: what each source becomes in the log.
func TestRecords(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour})
	secret, tok, err := s.CreateToken(testenv.Context(t, 10*time.Second), store.TokenSpec{UserID: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	l.Refused(r, http.StatusUnauthorized, "unauthenticated")
	l.AdminChange(admin.Change{Time: time.Now(), TokenID: "tb_admin", User: "root", Action: "identity.remove", Target: "identity x", Err: store.ErrNotFound})
	l.BrokerEvent(broker.Event{Time: time.Now(), Kind: broker.EventConnect, ClientID: "a-1", Username: "a", Role: acl.RoleExpertAgent})
	l.BrokerEvent(broker.Event{Time: time.Now(), Kind: broker.EventConnect, ClientID: "p-1", Username: "p", Role: acl.RolePlatform})
	l.BrokerEvent(broker.Event{Time: time.Now(), Kind: broker.EventDenied, ClientID: "c-1", Username: "c", Action: "publish", Topic: "x/y"})
	if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.QueryAudit(testenv.Context(t, 10*time.Second), store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]store.AuditEvent{}
	for _, e := range got {
		byKind[e.Kind] = e
	}
	if len(got) != 4 {
		t.Fatalf("%d records, want 4 (a platform identity's connect is not an agent's): %+v", len(got), got)
	}
	if e := byKind[store.AuditRefused]; e.TokenID != tok.ID || e.Status != 401 || e.Outcome != "refused" || e.Reason != "unauthenticated" {
		t.Errorf("refusal %+v: want the token ID (never the secret), 401, refused, unauthenticated", e)
	}
	if e := byKind[store.AuditAdmin]; e.UserID != "root" || e.Action != "identity.remove" || e.Outcome != "error" || e.Reason == "" {
		t.Errorf("admin change %+v: want root, identity.remove, error with its reason", e)
	}
	if e := byKind[store.AuditAgentConnect]; e.ClientID != "a-1" || e.UserID != "a" {
		t.Errorf("agent connect %+v", e)
	}
	if e := byKind[store.AuditMQTTDenied]; e.Action != "publish" || e.Target != "x/y" || e.Outcome != "refused" {
		t.Errorf("mqtt refusal %+v", e)
	}
}

// TestQueueArrayReused: the writer hands each written queue's array back
// for the next records; every record of every wave is stored once, none
// from an earlier wave again and none lost.
func TestQueueArrayReused(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: s, BatchSize: 10, FlushInterval: 5 * time.Millisecond})
	const waves, per = 5, 25 // more than a batch: a batch fills mid-wave
	for w := range waves {
		for i := range per {
			l.ToolCall(&gateway.ToolCall{Start: time.Now(), UserID: "alice", Tool: "t", Outcome: "ok",
				RequestID: fmt.Sprintf("w%d-%d", w, i)})
		}
		want := uint64((w + 1) * per)
		testenv.Poll(t, 10*time.Second, "wave written", func() bool { return l.Stats().Written == want })
	}
	seen, stored := storedRequestIDs(t, s)
	for w := range waves {
		for i := range per {
			if id := fmt.Sprintf("w%d-%d", w, i); seen[id] != 1 {
				t.Errorf("record %s stored %d times", id, seen[id])
			}
		}
	}
	if stored != waves*per {
		t.Errorf("%d records stored, want %d", stored, waves*per)
	}
}

// storedRequestIDs counts the stored records (at most MaxAuditLimit) by
// request ID, and in all.
func storedRequestIDs(t *testing.T, s *store.Store) (map[string]int, int) {
	t.Helper()
	evs, _, err := s.QueryAudit(testenv.Context(t, 10*time.Second), store.AuditQuery{Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range evs {
		seen[e.RequestID]++
	}
	return seen, len(evs)
}

// failOnceStore fails its first InsertAudit, as a store briefly locked by
// another process would.
type failOnceStore struct {
	*store.Store
	failed atomic.Bool
}

func (f *failOnceStore) InsertAudit(ctx context.Context, evs []store.AuditEvent) error {
	if f.failed.CompareAndSwap(false, true) {
		return errors.New("store busy")
	}
	return f.Store.InsertAudit(ctx, evs)
}

// TestQueueAfterFailedWrite: records of a failed batch are written at the
// next flush together with those queued meanwhile, each once.
func TestQueueAfterFailedWrite(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: &failOnceStore{Store: s}, BatchSize: 10, FlushInterval: 5 * time.Millisecond})
	for w := range 3 {
		for i := range 15 {
			l.ToolCall(&gateway.ToolCall{Start: time.Now(), Outcome: "ok", RequestID: fmt.Sprintf("w%d-%d", w, i)})
		}
		want := uint64((w + 1) * 15)
		testenv.Poll(t, 10*time.Second, "wave written", func() bool { return l.Stats().Written == want })
	}
	if st := l.Stats(); st.WriteErrors != 1 || st.Dropped != 0 {
		t.Fatalf("stats %+v, want one failed write and nothing dropped", st)
	}
	if seen, stored := storedRequestIDs(t, s); stored != 45 || len(seen) != 45 {
		t.Errorf("%d records stored, %d distinct; want 45 of each", stored, len(seen))
	}
}

package store

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// auditAt builds n tool-call events at base, base+1s, ... for user.
func auditAt(base time.Time, n int, user, tool, outcome string) []AuditEvent {
	out := make([]AuditEvent, n)
	for i := range out {
		out[i] = AuditEvent{Time: base.Add(time.Duration(i) * time.Second), Kind: AuditToolCall, UserID: user,
			TokenID: "tb_user", Tool: tool, Source: "platform", Outcome: outcome, Duration: 1500 * time.Microsecond,
			RequestID: fmt.Sprintf("r-%s-%d", user, i)}
	}
	return out
}

// TestPruneAudit: retention deletes exactly the events older than the
// cutoff, then the oldest beyond the row bound, and nothing else.
func TestPruneAudit(t *testing.T) {
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		before      time.Time
		maxRows     int64
		chunk       int
		wantDeleted int64
		wantOldest  time.Time // of what is left
		wantLeft    int
		batch       int // events per InsertAudit (a segment each), in time order; 0: one, shuffled
	}{
		{"nothing asked", time.Time{}, 0, 0, 0, base, 100, 0},
		{"cutoff before every event", base, 0, 0, 0, base, 100, 0},
		{"cutoff at the 30th", base.Add(30 * time.Second), 0, 0, 30, base.Add(30 * time.Second), 70, 0},
		{"cutoff in small chunks", base.Add(30 * time.Second), 0, 7, 30, base.Add(30 * time.Second), 70, 0},
		{"cutoff after every event", base.Add(time.Hour), 0, 0, 100, time.Time{}, 0, 0},
		{"row bound above the count", time.Time{}, 500, 0, 0, base, 100, 0},
		{"row bound", time.Time{}, 40, 0, 60, base.Add(60 * time.Second), 40, 0},
		{"row bound in small chunks", time.Time{}, 40, 9, 60, base.Add(60 * time.Second), 40, 0},
		{"both: age first", base.Add(10 * time.Second), 50, 0, 50, base.Add(50 * time.Second), 50, 0},
		{"cutoff over whole segments", base.Add(35 * time.Second), 0, 2, 35, base.Add(35 * time.Second), 65, 10},
		{"row bound over whole segments", time.Time{}, 45, 2, 55, base.Add(55 * time.Second), 45, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestStore(t, StoreOptions{})
			ctx := testContext(t)
			evs := auditAt(base, 100, "alice", "platform_echo", "ok")
			if tc.batch == 0 {
				// Inserted out of time order: the oldest go by time, not by ID.
				for i, j := 0, len(evs)-1; i < j; i, j = i+2, j-2 {
					evs[i], evs[j] = evs[j], evs[i]
				}
				tc.batch = len(evs)
			}
			for start := 0; start < len(evs); start += tc.batch {
				if err := s.InsertAudit(ctx, evs[start:min(start+tc.batch, len(evs))]); err != nil {
					t.Fatal(err)
				}
			}
			n, err := s.PruneAudit(ctx, tc.before, tc.maxRows, tc.chunk)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantDeleted {
				t.Errorf("deleted %d, want %d", n, tc.wantDeleted)
			}
			left, _, err := s.QueryAudit(ctx, AuditQuery{Limit: MaxAuditLimit})
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != tc.wantLeft {
				t.Fatalf("%d left, want %d", len(left), tc.wantLeft)
			}
			if tc.wantLeft > 0 {
				if oldest := left[len(left)-1].Time; !oldest.Equal(tc.wantOldest) {
					t.Errorf("oldest left %v, want %v", oldest, tc.wantOldest)
				}
				if newest := left[0].Time; !newest.Equal(base.Add(99 * time.Second)) {
					t.Errorf("newest left %v, want the newest inserted", newest)
				}
			}
		})
	}
}

// TestQueryAudit: filters, newest-first order, paging with the cursor,
// and refusals of bad queries.
func TestQueryAudit(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var all []AuditEvent
	all = append(all, auditAt(base, 30, "alice", "platform_echo", "ok")...)
	all = append(all, auditAt(base, 20, "bob", "echo", "tool_error")...)
	all = append(all, AuditEvent{Time: base.Add(5 * time.Second), Kind: AuditAdmin, UserID: "root", Action: "token.create",
		Target: "user carol", Outcome: "ok", Source: "api"})
	if err := s.InsertAudit(ctx, all); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		q    AuditQuery
		want int
	}{
		{"everything", AuditQuery{Limit: 1000}, 51},
		{"user", AuditQuery{User: "bob"}, 20},
		{"tool", AuditQuery{Tool: "platform_echo"}, 30},
		{"outcome", AuditQuery{Outcome: "tool_error"}, 20},
		{"kind", AuditQuery{Kind: AuditAdmin}, 1},
		{"since", AuditQuery{Since: base.Add(25 * time.Second)}, 5},
		{"until", AuditQuery{Until: base.Add(2 * time.Second)}, 4},
		{"range and user", AuditQuery{Since: base.Add(10 * time.Second), Until: base.Add(15 * time.Second), User: "alice"}, 5},
		{"nothing matches", AuditQuery{User: "nobody"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, next, err := s.QueryAudit(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want || next != "" {
				t.Fatalf("%d events (next %q), want %d and no next page", len(got), next, tc.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Time.After(got[i-1].Time) {
					t.Fatalf("event %d (%v) newer than event %d (%v): want newest first", i, got[i].Time, i-1, got[i-1].Time)
				}
			}
		})
	}

	t.Run("paging", func(t *testing.T) {
		seen := map[int64]bool{}
		q := AuditQuery{Limit: 7}
		var prev time.Time
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("more than 10 pages of 7 for 51 events")
			}
			got, next, err := s.QueryAudit(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range got {
				if seen[e.ID] {
					t.Fatalf("event %d on two pages", e.ID)
				}
				if !prev.IsZero() && e.Time.After(prev) {
					t.Fatalf("event %d out of order", e.ID)
				}
				seen[e.ID], prev = true, e.Time
			}
			if next == "" {
				break
			}
			q.Cursor = next
		}
		if len(seen) != 51 {
			t.Fatalf("paged through %d events, want 51", len(seen))
		}
	})

	t.Run("fields round trip", func(t *testing.T) {
		got, _, err := s.QueryAudit(ctx, AuditQuery{User: "alice", Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := all[29] // alice's newest
		got[0].ID = 0
		if got[0] != want {
			t.Fatalf("read %+v, want %+v", got[0], want)
		}
	})

	for _, q := range []AuditQuery{{Cursor: "nonsense"}, {Cursor: "12-0"}, {Limit: -1}, {Limit: MaxAuditLimit + 1},
		{Since: base.Add(time.Hour), Until: base}} {
		if _, _, err := s.QueryAudit(ctx, q); !errors.Is(err, ErrInvalidAuditQuery) {
			t.Errorf("QueryAudit(%+v): %v, want ErrInvalidAuditQuery", q, err)
		}
	}
}

func TestTokenIDOf(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	secret, tok, err := s.CreateToken(testContext(t), TokenSpec{UserID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got := TokenIDOf(secret); got != tok.ID {
		t.Errorf("TokenIDOf(secret) = %q, want %q", got, tok.ID)
	}
	for _, bad := range []string{"", "tb_", "not-a-token", secret + "x"} {
		if got := TokenIDOf(bad); got != "" {
			t.Errorf("TokenIDOf(%q) = %q, want \"\"", bad, got)
		}
	}
}

// TestInsertAuditChunks: a batch of hundreds goes in whole, every value in
// its column, and reads back in order.
func TestInsertAuditChunks(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	n := 407
	evs := auditAt(base, n, "carol", "echo", "ok")
	for i := range evs {
		evs[i].RequestID = fmt.Sprintf("r-%04d", i)
		evs[i].Duration = time.Duration(i) * time.Microsecond
	}
	if err := s.InsertAudit(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if c, err := s.CountAudit(ctx); err != nil || c != int64(n) {
		t.Fatalf("CountAudit = %d, %v; want %d", c, err, n)
	}
	got, _, err := s.QueryAudit(ctx, AuditQuery{User: "carol", Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("QueryAudit: %v %v", got, err)
	}
	last := got[0] // newest first
	if last.RequestID != fmt.Sprintf("r-%04d", n-1) || last.Duration != time.Duration(n-1)*time.Microsecond ||
		last.Tool != "echo" || last.Outcome != "ok" || !last.Time.Equal(evs[n-1].Time) {
		t.Fatalf("newest record %+v, want the batch's last (%+v)", last, evs[n-1])
	}
}

// TestQueryAuditSegmentsDoNotBleed: a query reading several segments
// returns each record as it was written; members a record lacks do not
// come from a record of another segment.
func TestQueryAuditSegmentsDoNotBleed(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// Two flushes, two segments: the newer (read first) has a client and
	// a user, the older has neither.
	old := []AuditEvent{{Time: base, Kind: AuditRefused, Action: "POST", Target: "/api/v1/mcp", Status: 401, Outcome: "refused", Reason: "unauthenticated"}}
	newer := []AuditEvent{{Time: base.Add(time.Minute), Kind: AuditRefused, UserID: "carol", ClientID: "dev1-c", Source: "mqtt",
		Action: "publish", Target: "a/b", Outcome: "refused", Reason: "acl"}}
	for _, evs := range [][]AuditEvent{old, newer} {
		if err := s.InsertAudit(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := s.QueryAudit(ctx, AuditQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d events, want 2", len(got))
	}
	if e := got[1]; e.UserID != "" || e.ClientID != "" || e.Source != "" {
		t.Errorf("the older event took members of the newer: %+v", e)
	}
	if got, _, _ := s.QueryAudit(ctx, AuditQuery{User: "carol", Limit: 10}); len(got) != 1 {
		t.Errorf("carol has %d events, want 1", len(got))
	}
}

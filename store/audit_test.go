package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv/pgtest"
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

// TestAuditKeysBackends runs the audit tests of the filter index and the
// live tail on each backend (TestStoreBackends' list is another file's).
func TestAuditKeysBackends(t *testing.T) {
	tests := []struct {
		name string
		f    func(*testing.T)
	}{{"QueryAuditKeyed", testQueryAuditKeyed}, {"AuditAfter", testAuditAfter}, {"PruneAuditKeys", testPruneAuditKeys},
		{"AuditSpanAndDriver", testAuditSpanAndDriver}}
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "postgres" {
				testPG, testPGDBs = pgtest.Start(t), map[string]string{}
				t.Cleanup(func() { testPG, testPGDBs = nil, nil })
			}
			for _, tc := range tests {
				t.Run(tc.name, tc.f)
			}
		})
	}
}

// keyedEvents: 3 segments of 40 tool calls, each call's tool, user, agent
// and outcome from small cycles, and an admin change; base+i seconds.
func keyedEvents(base time.Time) [][]AuditEvent {
	var segs [][]AuditEvent
	i := 0
	for range 3 {
		var seg []AuditEvent
		for range 40 {
			e := AuditEvent{Time: base.Add(time.Duration(i) * time.Second), Kind: AuditToolCall,
				UserID: []string{"alice", "bob"}[i%2], Tool: []string{"echo", "sum", "grep"}[i%3],
				Outcome: []string{"ok", "ok", "ok", "tool_error", "timeout"}[i%5], Source: "platform", RequestID: fmt.Sprintf("r-%d", i)}
			if i%4 == 0 {
				e.Agent, e.Source = "calc", "agent"
			}
			seg = append(seg, e)
			i++
		}
		segs = append(segs, seg)
	}
	segs[1] = append(segs[1], AuditEvent{Time: base.Add(50 * time.Second), Kind: AuditAdmin, UserID: "root", Action: "token.create", Outcome: "ok", Source: "api"})
	return segs
}

// testQueryAuditKeyed: every filter and combination through the key
// index gives what a scan of all the events gives, in order, over pages.
func testQueryAuditKeyed(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var all []AuditEvent
	for _, seg := range keyedEvents(base) {
		if err := s.InsertAudit(ctx, seg); err != nil {
			t.Fatal(err)
		}
		all = append(all, seg...)
	}
	queries := []AuditQuery{
		{Agent: "calc"}, {Tool: "sum"}, {User: "bob"}, {Outcome: "timeout"}, {Kind: AuditAdmin},
		{Agent: "calc", Tool: "echo"}, {Agent: "calc", Tool: "sum", User: "alice"}, {User: "alice", Outcome: "tool_error", Kind: AuditToolCall},
		{Tool: "grep", Since: base.Add(30 * time.Second), Until: base.Add(90 * time.Second)},
		{Agent: "calc", Until: base.Add(50 * time.Second)}, {Agent: "nobody"}, {Tool: "echo", Agent: "nobody"},
	}
	for _, q := range queries {
		name := strings.Join(strings.Fields(strings.NewReplacer("User:", " user=", "Tool:", " tool=", "Agent:", " agent=",
			"Outcome:", " outcome=", "Kind:", " kind=").Replace(fmt.Sprintf("User:%s Tool:%s Agent:%s Outcome:%s Kind:%s since=%v until=%v",
			q.User, q.Tool, q.Agent, q.Outcome, q.Kind, !q.Since.IsZero(), !q.Until.IsZero()))), ",")
		t.Run(name, func(t *testing.T) {
			var want []string
			for i := len(all) - 1; i >= 0; i-- {
				e := all[i]
				if (q.Agent == "" || e.Agent == q.Agent) && (q.Tool == "" || e.Tool == q.Tool) && (q.User == "" || e.UserID == q.User) &&
					(q.Outcome == "" || e.Outcome == q.Outcome) && (q.Kind == "" || e.Kind == q.Kind) &&
					(q.Since.IsZero() || !e.Time.Before(q.Since)) && (q.Until.IsZero() || e.Time.Before(q.Until)) {
					want = append(want, e.Time.Format(time.TimeOnly)+e.RequestID+e.Action)
				}
			}
			slices.Sort(want)
			slices.Reverse(want) // newest first (times are distinct but one)
			var got []string
			q.Limit = 4
			for pages := 0; ; pages++ {
				if pages > 40 {
					t.Fatal("too many pages")
				}
				evs, next, err := s.QueryAudit(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range evs {
					got = append(got, e.Time.Format(time.TimeOnly)+e.RequestID+e.Action)
				}
				if next == "" {
					break
				}
				q.Cursor = next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("got %d events %v\nwant %d %v", len(got), got, len(want), want)
			}
		})
	}
}

// testAuditAfter: the tail starts at the current mark, then returns what
// is written after it, filtered, oldest first, and at most the limit.
func testAuditAfter(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	segs := keyedEvents(base)
	if err := s.InsertAudit(ctx, segs[0]); err != nil {
		t.Fatal(err)
	}
	q := AuditQuery{Agent: "calc", Tool: "echo"}
	evs, mark, more, err := s.AuditAfter(ctx, q, -1, 100)
	if err != nil || len(evs) != 0 || more || mark <= 0 {
		t.Fatalf("start: %v, %d, %v, %v; want no event and a mark", evs, mark, more, err)
	}
	if evs, m2, _, err := s.AuditAfter(ctx, q, mark, 100); err != nil || len(evs) != 0 || m2 != mark {
		t.Fatalf("nothing written: %v, %d, %v; want nothing and the same mark", evs, m2, err)
	}
	if err := s.InsertAudit(ctx, segs[1]); err != nil {
		t.Fatal(err)
	}
	evs, mark2, more, err := s.AuditAfter(ctx, q, mark, 100)
	if err != nil || more || mark2 <= mark {
		t.Fatalf("after a write: %d, %v, %v", mark2, more, err)
	}
	var want []AuditEvent
	for _, e := range segs[1] {
		if e.Agent == "calc" && e.Tool == "echo" {
			want = append(want, e)
		}
	}
	if len(evs) != len(want) || len(want) == 0 {
		t.Fatalf("%d events, want %d", len(evs), len(want))
	}
	for i := range evs {
		if evs[i].RequestID != want[i].RequestID || evs[i].Agent != "calc" {
			t.Fatalf("event %d: %+v, want %+v (oldest first)", i, evs[i], want[i])
		}
	}
	// More than the limit: the first ones, and a mark past the rest.
	if err := s.InsertAudit(ctx, segs[2]); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertAudit(ctx, segs[0]); err != nil {
		t.Fatal(err)
	}
	evs, mark3, more, err := s.AuditAfter(ctx, AuditQuery{}, mark2, 10)
	if err != nil || len(evs) != 10 || !more || evs[0].RequestID != segs[2][0].RequestID {
		t.Fatalf("over the limit: %d events, more %v, %v", len(evs), more, err)
	}
	if evs, _, more, err := s.AuditAfter(ctx, AuditQuery{}, mark3, 10); err != nil || len(evs) != 0 || more {
		t.Fatalf("after skipping: %d events, more %v, %v; want none", len(evs), more, err)
	}
}

// testPruneAuditKeys: the keys of pruned segments go with them, and a
// trimmed segment's keys are those of the records left.
func testPruneAuditKeys(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	segs := keyedEvents(base)
	for _, seg := range segs {
		if err := s.InsertAudit(ctx, seg); err != nil {
			t.Fatal(err)
		}
	}
	// Segment 0 (0..39 s) goes whole; segment 1 (40..79 s, and the admin
	// change at 50 s) keeps 60..79 s: the admin change goes.
	if _, err := s.PruneAudit(ctx, base.Add(60*time.Second), 0, 0); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.QueryAudit(ctx, AuditQuery{Kind: AuditAdmin}); err != nil || len(got) != 0 {
		t.Fatalf("admin changes after the prune: %v, %v; want none", got, err)
	}
	got, _, err := s.QueryAudit(ctx, AuditQuery{Agent: "calc", Limit: 1000})
	if err != nil || len(got) != 15 { // 60..119 s, one call in 4
		t.Fatalf("calc calls after the prune: %d, %v; want 15", len(got), err)
	}
	var keys, orphans int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_keys`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM audit_keys k WHERE NOT EXISTS (SELECT 1 FROM audit_segments s WHERE s.id = k.seg)
		OR k.max_ms <> (SELECT max_ms FROM audit_segments s WHERE s.id = k.seg) OR k.min_ms <> (SELECT min_ms FROM audit_segments s WHERE s.id = k.seg)
		OR k.n <> (SELECT n FROM audit_segments s WHERE s.id = k.seg)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || keys == 0 {
		t.Fatalf("%d key rows, %d of them without their segment or its time range or size", keys, orphans)
	}
}

// TestAuditKeysBackfill: migration 13 keys the segments written before
// it.
func TestAuditKeysBackfill(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	s := openTestStoreIn(t, dir, StoreOptions{})
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, seg := range keyedEvents(base) {
		if err := s.InsertAudit(ctx, seg); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{`DROP TABLE audit_keys`, `DELETE FROM schema_migrations WHERE version >= 13`} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStoreIn(t, dir, StoreOptions{})
	got, _, err := s2.QueryAudit(ctx, AuditQuery{Agent: "calc", Tool: "echo", Limit: 1000})
	if err != nil || len(got) != 10 { // i%12 == 0 of 120
		t.Fatalf("calc's echo calls after the backfill: %d, %v; want 10", len(got), err)
	}
}

// TestAuditQueryPlans: on SQLite, every filter combination the console
// offers is served by an index: the key index for value filters, the
// segments' time index otherwise; never a scan of a table, never a sort.
func TestAuditQueryPlans(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	if err := s.InsertAudit(ctx, keyedEvents(time.Now())[0]); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	values := []func(*AuditQuery){
		func(q *AuditQuery) { q.Kind = AuditToolCall }, func(q *AuditQuery) { q.Outcome = "ok" },
		func(q *AuditQuery) { q.User = "alice" }, func(q *AuditQuery) { q.Agent = "calc" }, func(q *AuditQuery) { q.Tool = "echo" },
		func(q *AuditQuery) { q.Since = now.Add(-time.Hour) }, func(q *AuditQuery) { q.Until = now },
		func(q *AuditQuery) { q.Cursor = "1-1" },
	}
	for mask := range 1 << len(values) {
		var q AuditQuery
		for i, set := range values {
			if mask&(1<<i) != 0 {
				set(&q)
			}
		}
		query, args := auditQuerySQL(&q, q.keyFilters(), 1)
		rows, err := s.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		for _, d := range plan {
			if strings.Contains(d, "TEMP B-TREE") || strings.HasPrefix(d, "SCAN") && !strings.Contains(d, "USING") {
				t.Errorf("%+v:\n%s\nwant every table read through an index, in order", q, strings.Join(plan, "\n"))
				break
			}
		}
		if mask == 0b10001 || mask == 0b11100000 {
			t.Logf("%+v: %s", q, strings.Join(plan, "; "))
		}
	}
}

// TestAuditPositions: key positions encode as the shorter form and read
// back; intersections find the records that hold every value, and none
// where no record does.
func TestAuditPositions(t *testing.T) {
	for _, tc := range []struct {
		idx  []int
		n    int
		form byte
	}{{[]int{3}, 500, 'l'}, {[]int{0, 17, 499}, 500, 'l'}, {[]int{0, 1, 2, 3}, 4, 0}, {nil, 500, 'b'}} {
		if tc.idx == nil {
			for i := 0; i < 500; i += 3 {
				tc.idx = append(tc.idx, i)
			}
		}
		enc := encodePositions(tc.idx, tc.n)
		if tc.form == 0 && enc != "" || tc.form != 0 && (enc == "" || enc[0] != tc.form) {
			t.Errorf("%v of %d: %q, want form %q", tc.idx, tc.n, enc, tc.form)
		}
		bits := make([]uint64, (tc.n+63)/64)
		if !decodePositions(enc, tc.n, bits) {
			t.Fatalf("%q does not decode", enc)
		}
		var got []int
		for i := range tc.n {
			if bits[i/64]&(1<<(i%64)) != 0 {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tc.idx) {
			t.Errorf("%q decodes to %v, want %v", enc, got, tc.idx)
		}
	}
	ns := func(s ...string) []sql.NullString {
		out := make([]sql.NullString, len(s))
		for i, x := range s {
			out[i] = sql.NullString{String: x, Valid: x != "NULL"}
		}
		return out
	}
	every3 := encodePositions([]int{0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45, 48, 51, 54, 57}, 60)
	for _, tc := range []struct {
		pos  []sql.NullString
		want bool
	}{
		{ns("l3.5", "l5"), true}, {ns("l3.5", "l4"), false}, {ns("l3", "NULL"), false}, {ns("", "l59"), true},
		{ns(every3, "l4.7.8"), false}, {ns(every3, "l4.7.9"), true}, {ns("l1", "x-malformed"), true},
	} {
		if _, _, got := intersectPositions(tc.pos, 60, nil, nil); got != tc.want {
			t.Errorf("intersect %v: %v, want %v", tc.pos, got, tc.want)
		}
	}
}

// TestSplitSegment: a segment's records are found by scanning, whatever
// their strings hold; each range decodes to its record.
func TestSplitSegment(t *testing.T) {
	recs := []auditRecord{{T: 1, Kind: "k", Why: `a "quoted" {brace} [bracket] \ back\slash \"`}, {T: 2, Kind: "k", Tool: "é\u2028\x01"},
		{T: 3, Kind: "k", Tgt: `}]},{"t":1,`, Why: `{"t":`}}
	_, _, data, err := segmentOf(recs)
	if err != nil {
		t.Fatal(err)
	}
	elems := splitSegment(string(data), nil)
	if len(elems) != len(recs) {
		t.Fatalf("%v: want %d ranges of %s", elems, len(recs), data)
	}
	for i, e := range elems {
		var r auditRecord
		if err := json.Unmarshal(data[e[0]:e[1]], &r); err != nil || r != recs[i] {
			t.Errorf("range %d: %+v, %v; want %+v", i, r, err, recs[i])
		}
	}
	for _, bad := range []string{"", "{}", "[1,2]", "[]"} {
		if got := splitSegment(bad, nil); len(got) != 0 {
			t.Errorf("%q split into %v", bad, got)
		}
	}
}

// testAuditSpanAndDriver: a segment that spans long (a call's record
// written long after it started) is still found by a query up to a time;
// a combination whose first value is common is driven by the sparser one
// and gives the same records.
func testAuditSpanAndDriver(t *testing.T) {
	s := openTestStore(t, StoreOptions{})
	ctx := testContext(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// 150 flushes of two records a second apart; every tool "common",
	// user rare in one flush of ten.
	for i := range 150 {
		evs := auditAt(base.Add(time.Duration(2*i)*time.Second), 2, "u", "common", "ok")
		evs[0].Agent = "a"
		if i%10 == 0 {
			evs[1].UserID = "rare"
		}
		if err := s.InsertAudit(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	// A late flush: a call that started at 3 s, written with one at 1000 s.
	late := auditAt(base.Add(1000*time.Second), 1, "late", "common", "ok")
	late = append(late, AuditEvent{Time: base.Add(3 * time.Second), Kind: AuditToolCall, UserID: "late", Tool: "slow", Outcome: "timeout"})
	if err := s.InsertAudit(ctx, late); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.QueryAudit(ctx, AuditQuery{Until: base.Add(4 * time.Second), Limit: 100})
	if err != nil || len(got) != 5 || got[0].Tool != "slow" {
		t.Fatalf("until 4 s: %d records (%v), want 5, the slow call first", len(got), err)
	}
	got, _, err = s.QueryAudit(ctx, AuditQuery{User: "late", Outcome: "timeout", Until: base.Add(4 * time.Second)})
	if err != nil || len(got) != 1 {
		t.Fatalf("the slow call by its values: %d records, %v", len(got), err)
	}
	q := AuditQuery{Tool: "common", User: "rare", Limit: 4}
	if keys := s.sparsestFirst(ctx, q.keyFilters()); keys[0] != [2]string{auditKeyUser, "rare"} {
		t.Errorf("driven by %v, want the rare user", keys[0])
	}
	n := 0
	for {
		got, next, err := s.QueryAudit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if e.UserID != "rare" || e.Tool != "common" {
				t.Fatalf("%+v", e)
			}
		}
		n += len(got)
		if next == "" {
			break
		}
		q.Cursor = next
	}
	if n != 15 {
		t.Fatalf("%d records of the rare user, want 15", n)
	}
}

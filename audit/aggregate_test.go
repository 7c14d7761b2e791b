package audit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// allRecords reads every stored record, newest first.
func allRecords(t *testing.T, s *store.Store) []store.AuditEvent {
	t.Helper()
	var out []store.AuditEvent
	q := store.AuditQuery{Limit: store.MaxAuditLimit}
	for {
		page, next, err := s.QueryAudit(testenv.Context(t, 10*time.Second), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		q.Cursor = next
	}
}

var countRE = regexp.MustCompile(`\(×(\d+) more from ([^)]*) in [^)]*\)$`)

// refusalsIn is how many refusals the records stand for: one each, and a
// summary's count more.
func refusalsIn(t *testing.T, evs []store.AuditEvent) (total, summaries int) {
	t.Helper()
	for _, e := range evs {
		total++
		if m := countRE.FindStringSubmatch(e.Reason); m != nil {
			n, _ := strconv.Atoi(m[1])
			total += n - 1
			summaries++
		}
	}
	return total, summaries
}

func loginRefused(remote, user, client string) broker.Event {
	return broker.Event{Time: time.Now(), Kind: broker.EventLoginRefused, ClientID: client, Username: user,
		Remote: remote, Action: "connect", Err: errors.New("bad credentials")}
}

// TestFieldsClipped: whatever a client sends, no text field of a record
// is longer than the bound, whichever way the record comes (a refused MQTT
// login's user name and client ID, an ACL refusal, an OAuth record given
// to Record, an agent's connect).
func TestFieldsClipped(t *testing.T) {
	huge := strings.Repeat("u", 64<<10)
	for _, tc := range []struct {
		name   string
		record func(l *audit.Log)
	}{
		{"refused login", func(l *audit.Log) { l.BrokerEvent(loginRefused("192.0.2.1:1", huge, huge)) }},
		{"acl refusal", func(l *audit.Log) {
			l.BrokerEvent(broker.Event{Time: time.Now(), Kind: broker.EventDenied, ClientID: huge, Username: huge, Action: "publish", Topic: huge})
		}},
		{"agent connect", func(l *audit.Log) {
			l.BrokerEvent(broker.Event{Time: time.Now(), Kind: broker.EventConnect, ClientID: huge, Username: huge, Role: acl.RoleExpertAgent, Remote: huge})
		}},
		{"oauth record", func(l *audit.Log) {
			l.Record(store.AuditEvent{Time: time.Now(), Kind: store.AuditOAuth, Action: "authorize", Outcome: "refused",
				ClientID: huge, UserID: huge, Reason: "unknown client " + huge, Target: huge, Source: huge})
		}},
		{"tool call", func(l *audit.Log) {
			l.ToolCall(&gateway.ToolCall{Start: time.Now(), UserID: huge, TokenID: huge, SessionID: huge, Tool: huge,
				EntityType: huge, EntityID: huge, RequestID: huge, Reason: huge, Outcome: "ok"})
		}},
		{"http refusal", func(l *audit.Log) {
			r := httptest.NewRequest(http.MethodPost, "/"+huge, nil)
			l.Refused(r, http.StatusUnauthorized, huge)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour})
			tc.record(l)
			if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			evs := allRecords(t, s)
			if len(evs) != 1 {
				t.Fatalf("%d records, want 1", len(evs))
			}
			e := evs[0]
			for name, v := range map[string]string{"TokenID": e.TokenID, "UserID": e.UserID, "ClientID": e.ClientID,
				"SessionID": e.SessionID, "EntityType": e.EntityType, "EntityID": e.EntityID, "Tool": e.Tool, "Source": e.Source,
				"Action": e.Action, "Target": e.Target, "Reason": e.Reason, "RequestID": e.RequestID} {
				if len(v) > 256 {
					t.Errorf("%s is %d bytes, want at most 256", name, len(v))
				}
			}
		})
	}
}

// TestRefusalsAggregated: a flood of refusals from one source is a few
// records, and the counts of the summaries account for every refusal.
func TestRefusalsAggregated(t *testing.T) {
	const flood = 500
	for _, tc := range []struct {
		name   string
		refuse func(l *audit.Log, i int)
		source string
	}{
		{"refused MQTT logins, each a new user name and client ID", func(l *audit.Log, i int) {
			l.BrokerEvent(loginRefused("198.51.100.7:"+strconv.Itoa(1000+i), fmt.Sprintf("user%d", i), fmt.Sprintf("c%d", i)))
		}, "198.51.100.7"},
		{"MQTT publishes refused by the ACL", func(l *audit.Log, i int) {
			l.BrokerEvent(broker.Event{Time: time.Now(), Kind: broker.EventDenied, ClientID: "dev1-c", Username: "dev1",
				Remote: "[2001:db8::1]:5000", Action: "publish", Topic: fmt.Sprintf("not/allowed/%d", i)})
		}, "2001:db8::/64"},
		{"HTTP 401s, each a new bearer token", func(l *audit.Log, i int) {
			r := httptest.NewRequest(http.MethodPost, "/api/v1/mcp", nil)
			r.RemoteAddr = "203.0.113.9:4000"
			r.Header.Set("Authorization", fmt.Sprintf("Bearer tb_guess%d", i))
			l.Refused(r, http.StatusUnauthorized, "unauthenticated")
		}, "203.0.113.9"},
		{"HTTP 405s, each a made-up method", func(l *audit.Log, i int) {
			r := httptest.NewRequest(fmt.Sprintf("M%d", i), "/api/v1/mcp", nil)
			r.RemoteAddr = "203.0.113.10:4000"
			l.Refused(r, http.StatusMethodNotAllowed, "method not allowed")
		}, "203.0.113.10"},
		{"refused OAuth authorize requests, each a new client_id", func(l *audit.Log, i int) {
			id := fmt.Sprintf("tbc_%d", i)
			l.Record(store.AuditEvent{Time: time.Now(), Kind: store.AuditOAuth, Action: "authorize", Outcome: "refused",
				ClientID: id, Reason: strconv.Quote(id) + " is unknown", Status: 400, Source: "192.0.2.44"})
		}, "192.0.2.44"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour, AggregateWindow: time.Hour})
			for i := range flood {
				tc.refuse(l, i)
			}
			if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			evs := allRecords(t, s)
			if len(evs) != audit.DefaultAggregateAfter+1 {
				t.Fatalf("%d records for %d refusals, want %d one by one and one count", len(evs), flood, audit.DefaultAggregateAfter)
			}
			total, summaries := refusalsIn(t, evs)
			if total != flood || summaries != 1 {
				t.Fatalf("records stand for %d refusals in %d summaries, want %d in 1: %+v", total, summaries, flood, evs)
			}
			sum := evs[0] // written last
			if m := countRE.FindStringSubmatch(sum.Reason); m == nil || m[2] != tc.source {
				t.Errorf("summary reason %q: want the count and source %s", sum.Reason, tc.source)
			}
			if sum.Outcome != gateway.OutcomeRefused || sum.Kind != evs[1].Kind {
				t.Errorf("summary %+v: want a refusal of the flood's kind", sum)
			}
			if strings.Contains(sum.Reason, "……") {
				t.Errorf("summary reason %q: the mark of merged reasons repeated", sum.Reason)
			}
			if st := l.Stats(); st.Aggregated != flood-audit.DefaultAggregateAfter {
				t.Errorf("Stats.Aggregated %d, want %d", st.Aggregated, flood-audit.DefaultAggregateAfter)
			}
		})
	}
}

// TestAggregationBounds: sources are counted apart up to AggregateKeys;
// beyond it, one record per kind counts the rest, so that nothing is lost
// and nothing grows with the number of sources.
func TestAggregationBounds(t *testing.T) {
	s := openStore(t)
	const keys, sources, per, after = 3, 40, 10, 2
	l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour, AggregateWindow: time.Hour, AggregateKeys: keys, AggregateAfter: after})
	for src := range sources {
		for range per {
			l.BrokerEvent(loginRefused(fmt.Sprintf("192.0.2.%d:1883", src), "u", "c"))
		}
	}
	// Not refusals: never aggregated.
	for i := range per {
		l.ToolCall(&gateway.ToolCall{Start: time.Now(), UserID: "alice", Tool: "t", Outcome: "ok", RequestID: strconv.Itoa(i)})
	}
	if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	evs := allRecords(t, s)
	var refusals []store.AuditEvent
	calls := 0
	for _, e := range evs {
		if e.Kind == store.AuditToolCall {
			calls++
		} else {
			refusals = append(refusals, e)
		}
	}
	if calls != per {
		t.Errorf("%d tool-call records, want %d", calls, per)
	}
	// keys sources: after each one by one and a count; the rest: one count.
	if want := keys*(after+1) + 1; len(refusals) != want {
		t.Fatalf("%d refusal records, want %d", len(refusals), want)
	}
	if total, _ := refusalsIn(t, refusals); total != sources*per {
		t.Fatalf("records stand for %d refusals, want %d", total, sources*per)
	}
	overflow := 0
	for _, e := range refusals {
		if strings.Contains(e.Reason, "beyond the 3 tracked") {
			overflow++
		}
	}
	if overflow != 1 {
		t.Errorf("%d overflow records, want 1", overflow)
	}
}

// TestAggregationWindow: a window's count is written when the window ends,
// without waiting for Close, and the next window starts afresh.
func TestAggregationWindow(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: s, FlushInterval: 5 * time.Millisecond, AggregateWindow: 20 * time.Millisecond, AggregateAfter: 1})
	for range 10 {
		l.BrokerEvent(loginRefused("192.0.2.1:1", "u", "c"))
	}
	testenv.Poll(t, 10*time.Second, "the window's count written", func() bool {
		total, summaries := refusalsIn(t, allRecords(t, s))
		return total == 10 && summaries == 1
	})
	l.BrokerEvent(loginRefused("192.0.2.1:1", "u", "c"))
	testenv.Poll(t, 10*time.Second, "the next window's first refusal written by itself", func() bool {
		total, _ := refusalsIn(t, allRecords(t, s))
		return total == 11
	})
}

// TestAggregationOff: a negative window records every refusal.
func TestAggregationOff(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour, AggregateWindow: -1})
	for range 20 {
		l.BrokerEvent(loginRefused("192.0.2.1:1", "u", "c"))
	}
	if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s); n != 20 {
		t.Fatalf("%d records, want 20", n)
	}
}

// TestAggregationPerSource: one source with many kinds of refusal holds a
// few keys, not the whole table: another source's refusals are still
// counted under its own name, not in the overflow record that names none.
func TestAggregationPerSource(t *testing.T) {
	s := openStore(t)
	const keys, kinds, after = 20, 40, 1
	l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour, AggregateWindow: time.Hour, AggregateKeys: keys, AggregateAfter: after})
	for i := range kinds {
		for range 3 {
			l.Record(store.AuditEvent{Time: time.Now(), Kind: store.AuditOAuth, Action: "token", Outcome: "refused",
				Reason: fmt.Sprintf("invalid_request: reason %d", i), Status: 400, Source: "192.0.2.1"})
		}
	}
	const other = 5
	for range other {
		l.Record(store.AuditEvent{Time: time.Now(), Kind: store.AuditOAuth, Action: "token", Outcome: "refused",
			Reason: "invalid_client: unknown client", Status: 401, Source: "192.0.2.2"})
	}
	if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	evs := allRecords(t, s)
	if total, _ := refusalsIn(t, evs); total != kinds*3+other {
		t.Fatalf("records stand for %d refusals, want %d", total, kinds*3+other)
	}
	bySource := map[string]int{}
	for _, e := range evs {
		if strings.Contains(e.Reason, "beyond the") {
			t.Fatalf("overflow record %q: one source filled the table", e.Reason)
		}
		if m := countRE.FindStringSubmatch(e.Reason); m != nil {
			n, _ := strconv.Atoi(m[1])
			bySource[m[2]] += n
		}
	}
	if bySource["192.0.2.2"] != other-after {
		t.Fatalf("counts by source %v: want %d for 192.0.2.2", bySource, other-after)
	}
}

// TestRefusedBehindProxy: behind a trusted reverse proxy, each client's
// refused HTTP requests are aggregated by the client's address, not the
// proxy's.
func TestRefusedBehindProxy(t *testing.T) {
	clients := []string{"198.51.100.1", "198.51.100.2"}
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		want    []string // the sources the summaries name
	}{
		{"trusted proxy", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, clients},
		{"no trusted proxy", nil, []string{"10.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			l := newLog(t, audit.Options{Store: s, FlushInterval: time.Hour, AggregateWindow: time.Hour, TrustedProxies: tc.trusted})
			for _, c := range clients {
				for range 10 {
					r := httptest.NewRequest(http.MethodPost, "/api/v1/mcp", nil)
					r.RemoteAddr = "10.0.0.1:5000"
					r.Header.Set("X-Forwarded-For", c)
					l.Refused(r, http.StatusUnauthorized, "unauthenticated")
				}
			}
			if err := l.Close(testenv.Context(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range allRecords(t, s) {
				if m := countRE.FindStringSubmatch(e.Reason); m != nil {
					got = append(got, m[2])
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("summaries from %v, want %v", got, tc.want)
			}
		})
	}
}

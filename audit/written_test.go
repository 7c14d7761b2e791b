package audit_test

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// TestWritten: Written's channel closes once a record is in the store (a
// query then finds it, agent included), and the next call returns a fresh
// channel that stays open until the next write.
func TestWritten(t *testing.T) {
	s := openStore(t)
	l := newLog(t, audit.Options{Store: s, FlushInterval: 5 * time.Millisecond})
	ctx := testenv.Context(t, 10*time.Second)
	for i, tool := range []string{"echo", "sum"} {
		ch := l.Written()
		if ch == nil {
			t.Fatal("Written returned nil")
		}
		select {
		case <-ch:
			t.Fatalf("call %d: closed before any record was written", i)
		case <-time.After(20 * time.Millisecond): // flushes of an empty queue do not wake
		}
		l.ToolCall(&gateway.ToolCall{Start: time.Now(), Tool: tool, Agent: "calc", Source: gateway.SourceAgent,
			UserID: "alice", Outcome: gateway.OutcomeOK})
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("call %d: not closed after a write", i)
		}
		got, _, err := s.QueryAudit(ctx, store.AuditQuery{Tool: tool, Agent: "calc"})
		if err != nil || len(got) != 1 || got[0].Agent != "calc" {
			t.Fatalf("after the wake: %+v, %v; want the %s call of agent calc", got, err, tool)
		}
		if l.Written() == ch {
			t.Fatal("Written returned the closed channel again")
		}
	}
}

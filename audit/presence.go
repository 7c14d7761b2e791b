package audit

import (
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// WatchPresence records the expert agents' connects and disconnects as
// their presence tells them (an online status, then offline or its Will),
// for a gateway on an external broker, whose logins it cannot see. It reads
// list every interval (0 means 1s), so a flap shorter than that may go
// unrecorded; the record's time is the status's own. The goroutine ends
// with Close.
func (l *Log) WatchPresence(list func() []requester.AgentStatus, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	l.watchers.Add(1)
	go func() {
		defer l.watchers.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		seen := map[string]requester.AgentStatus{}
		for {
			l.presenceChanges(seen, list())
			select {
			case <-l.stopWatch:
				return
			case <-t.C:
			}
		}
	}()
}

// presenceChanges records what changed between seen and now, and updates
// seen.
func (l *Log) presenceChanges(seen map[string]requester.AgentStatus, now []requester.AgentStatus) {
	for _, a := range now {
		old, known := seen[a.ClientID]
		seen[a.ClientID] = a
		if known && old.Online == a.Online && old.Since.Equal(a.Since) {
			continue
		}
		if !known && !a.Online {
			continue // gone before we heard of it
		}
		kind := store.AuditAgentConnect
		if !a.Online {
			kind = store.AuditAgentDisconnect
		}
		l.Record(store.AuditEvent{Time: a.Since, Kind: kind, ClientID: a.ClientID, Target: a.Name,
			Outcome: gateway.OutcomeOK, Source: "presence"})
	}
}

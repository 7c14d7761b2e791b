package console

import (
	"testing"
	"time"
)

// TestSessionsBackgroundIsNoUse: what a page fetches by itself (lookup
// with use false: its event streams, its list refresh) does not keep an
// unattended session from idling out; a page the operator opens does.
func TestSessionsBackgroundIsNoUse(t *testing.T) {
	const idle = 30 * time.Minute
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		use   bool
		alive bool
	}{{false, false}, {true, true}} {
		s := newSessions(idle, 12*time.Hour, 10)
		ss := s.add("ops", "", false, t0)
		if s.lookup(ss.id, t0.Add(idle-time.Minute), tc.use) == nil {
			t.Fatalf("use %t: the session ended before its idle time", tc.use)
		}
		if got := s.lookup(ss.id, t0.Add(idle+time.Minute), true) != nil; got != tc.alive {
			t.Errorf("use %t: alive %t after a request at %v, want %t", tc.use, got, idle-time.Minute, tc.alive)
		}
	}
}

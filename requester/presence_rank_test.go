package requester

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
)

// An agent's online since (the gateway's union keeps a shared tool name
// for the agent online longest): the statuses' own since while retained
// ones arrive, never earlier than RankSlack before it was heard after
// that, kept while any instance of the agent stays online, and new when
// the agent comes back after a break.
func TestAgentOnlineSince(t *testing.T) {
	start := time.UnixMilli(1_000_000_000)
	status := func(online bool, since int64) []byte {
		s := contract.StatusOffline
		if online {
			s = contract.StatusOnline
		}
		return fmt.Appendf(nil, `{"status":%q,"since":%d,"interval":30000}`, s, since)
	}
	type step struct {
		agent, instance string
		online          bool
		since           int64         // the status's own
		at              time.Duration // after start
	}
	for _, tc := range []struct {
		name  string
		steps []step
		agent string
		want  int64 // Unix ms; 0: not online
	}{
		{"retained: its own since", []step{{"a", "a1", true, 500, 0}}, "a", 500},
		{"later: no earlier than heard", []step{{"a", "a1", true, 500, time.Minute}}, "a", start.Add(time.Minute - RankSlack).UnixMilli()},
		{"later, since within the slack", []step{{"a", "a1", true, start.Add(time.Minute).UnixMilli() - 200, time.Minute}}, "a", start.Add(time.Minute).UnixMilli() - 200},
		{"a second instance keeps the first's", []step{{"a", "a1", true, 500, 0}, {"a", "a2", true, 900, time.Minute}}, "a", 500},
		{"a retained earlier instance lowers it", []step{{"a", "a1", true, 500, 0}, {"a", "a2", true, 300, 0}}, "a", 300},
		{"kept while another instance stays", []step{{"a", "a1", true, 500, 0}, {"a", "a2", true, 900, time.Minute}, {"a", "a1", false, 0, 2 * time.Minute}}, "a", 500},
		{"kept across its own new since", []step{{"a", "a1", true, 500, 0}, {"a", "a1", true, 600_000, time.Minute}}, "a", 500},
		{"gone", []step{{"a", "a1", true, 500, 0}, {"a", "a1", false, 0, time.Minute}}, "a", 0},
		{"back after a break: a newcomer", []step{{"a", "a1", true, 500, 0}, {"a", "a1", false, 0, time.Minute}, {"a", "a1", true, start.Add(2*time.Minute).UnixMilli() - 100, 2 * time.Minute}}, "a", start.Add(2*time.Minute).UnixMilli() - 100},
		{"back with a forged since: a newcomer", []step{{"a", "a1", true, 500, 0}, {"b", "b1", true, 700, 0}, {"a", "a1", false, 0, time.Minute}, {"a", "a2", true, 1, 2 * time.Minute}}, "a", start.Add(2*time.Minute - RankSlack).UnixMilli()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newPresenceWatch()
			w.trustRetained(start.Add(presenceGrace))
			for _, s := range tc.steps {
				since := s.since
				if !s.online {
					since = start.Add(s.at).UnixMilli()
				}
				if _, ok := w.handle(contract.PresenceTopic(s.agent, s.instance), status(s.online, since), start.Add(s.at)); !ok {
					t.Fatalf("status %+v not understood", s)
				}
			}
			got, online := w.agentOnlineSince(tc.agent)
			switch {
			case tc.want == 0 && online:
				t.Fatalf("online since %d, want offline", got.UnixMilli())
			case tc.want != 0 && (!online || got.UnixMilli() != tc.want):
				t.Fatalf("online since %d (%v), want %d", got.UnixMilli(), online, tc.want)
			}
		})
	}
}

package requester

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/contract"
)

// boundedRequester is a Requester over no bus, fed presence messages by
// hand (handlePresence), with its warnings caught.
func boundedRequester(t *testing.T, maxInstances int) (*Requester, *logtest.Hook) {
	t.Helper()
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.InfoLevel)
	r := New(nil, Options{MaxInstancesPerAgent: maxInstances, Logger: logrus.NewEntry(logger)})
	t.Cleanup(r.stopLink)
	return r, hook
}

func onlineStatus(t *testing.T, clientID, name string) []byte {
	t.Helper()
	b, err := json.Marshal(contract.Presence{Status: contract.StatusOnline, ClientID: clientID, Name: name, Version: name, Since: 1})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An agent identity that leaves retained online statuses with huge names
// under many client IDs (no Will: they stay online) makes the requester
// hold little: statuses over MaxPresenceBytes are ignored, names and
// versions are cut to MaxPresenceText, and past MaxInstancesPerAgent new
// instances are not admitted (logged once, counted). Without the bounds
// Agents() held every phantom with its whole name.
func TestPresenceBounds(t *testing.T) {
	tests := []struct {
		name         string
		max          int
		instances    int
		nameBytes    int
		wantKept     int
		wantRefused  uint64
		wantTooLarge uint64
		wantWarnings int
	}{
		{"payload over MaxPresenceBytes ignored", 8, 4, 2 * MaxPresenceBytes, 0, 0, 4, 0},
		{"long names cut", 8, 4, 1800, 4, 0, 0, 0},
		{"instances past the bound refused, logged once", 3, 12, 10, 3, 9, 0, 1},
		{"default bound", 0, DefaultMaxInstancesPerAgent + 5, 10, DefaultMaxInstancesPerAgent, 5, 0, 1},
		{"no bound", -1, 40, 10, 40, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, hook := boundedRequester(t, tc.max)
			name := strings.Repeat("é", tc.nameBytes/2)
			for i := range tc.instances {
				id := fmt.Sprintf("phantom-%d", i)
				r.handlePresence(contract.PresenceTopic("evil", id), onlineStatus(t, id, name))
			}
			// Another agent is admitted whatever evil holds.
			r.handlePresence(contract.PresenceTopic("good", "g1"), onlineStatus(t, "g1", "Good"))
			kept, size := 0, 0
			for _, a := range r.Agents() {
				if a.Agent != "evil" {
					continue
				}
				kept++
				size += len(a.Name) + len(a.Version)
				if len(a.Name) > MaxPresenceText || len(a.Version) > MaxPresenceText || !strings.HasPrefix(name, a.Name) {
					t.Fatalf("name kept with %d bytes (%q...)", len(a.Name), a.Name[:min(len(a.Name), 8)])
				}
			}
			if kept != tc.wantKept {
				t.Errorf("%d instances of evil kept, want %d", kept, tc.wantKept)
			}
			if size > 2*MaxPresenceText*kept {
				t.Errorf("%d bytes of names kept for %d instances", size, kept)
			}
			if online := r.OnlineAgents(t.Context()); !containsString(online, "good") {
				t.Errorf("online %v: good missing", online)
			}
			s := r.Stats()
			if s.InstancesRefused != tc.wantRefused || s.PresenceTooLarge != tc.wantTooLarge {
				t.Errorf("refused %d, too large %d; want %d, %d", s.InstancesRefused, s.PresenceTooLarge, tc.wantRefused, tc.wantTooLarge)
			}
			warnings := 0
			for _, e := range hook.AllEntries() {
				if e.Level == logrus.WarnLevel {
					warnings++
				}
			}
			if warnings != tc.wantWarnings {
				t.Errorf("%d warnings, want %d", warnings, tc.wantWarnings)
			}
		})
	}
}

// At the bound, an offline instance makes room for a new one (agents with
// random client IDs leave one behind at each restart); a refused agent is
// logged again only after it was admitted one since.
func TestPresenceBoundReplacesOffline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newPresenceWatch()
	w.maxInstances = 2
	pt := contract.PresenceTopic
	steps := []struct {
		topic, payload string
		refused        bool
		first          bool
	}{
		{pt("a", "1"), `{"status":"online","since":1}`, false, false},
		{pt("a", "2"), `{"status":"online","since":1}`, false, false},
		{pt("a", "3"), `{"status":"online","since":1}`, true, true},
		{pt("a", "4"), `{"status":"online","since":1}`, true, false},
		{pt("a", "1"), `{"status":"offline"}`, false, false}, // known: not new
		{pt("a", "3"), `{"status":"online","since":2}`, false, false},
		{pt("a", "5"), `{"status":"online","since":2}`, true, true},
		{pt("a", "2"), ``, false, false}, // cleared: room again
		{pt("a", "5"), `{"status":"online","since":3}`, false, false},
	}
	for i, s := range steps {
		ch, ok := w.handle(s.topic, []byte(s.payload), now.Add(time.Duration(i)*time.Second))
		if !ok || (ch.refused != "") != s.refused || ch.refusedFirst != s.first {
			t.Fatalf("step %d: ok %v, change %+v; want refused %v first %v", i, ok, ch, s.refused, s.first)
		}
	}
	var ids []string
	for _, a := range w.list(now) {
		ids = append(ids, a.ClientID)
	}
	if got := strings.Join(ids, ","); got != "3,5" {
		t.Fatalf("instances %s, want 3,5", got)
	}
	if len(w.known["a"]) != 2 {
		t.Fatalf("known %d, want 2", len(w.known["a"]))
	}
}

// Each agent's generation moves with its own instances only: churn of one
// agent leaves another's cached data fresh.
func TestAgentGeneration(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newPresenceWatch()
	pt := contract.PresenceTopic
	w.handle(pt("victim", "v1"), []byte(`{"status":"online","since":1}`), now)
	victim := w.agentGeneration("victim")
	if victim == 0 {
		t.Fatal("victim has no generation")
	}
	for i := range 50 {
		w.handle(pt("churn", "c1"), fmt.Appendf(nil, `{"status":"online","since":%d}`, i+1), now)
	}
	if got := w.agentGeneration("victim"); got != victim {
		t.Fatalf("victim's generation moved from %d to %d with another agent's churn", victim, got)
	}
	if w.generation() <= victim || w.agentGeneration("churn") != w.generation() {
		t.Fatalf("generations: global %d, churn %d", w.generation(), w.agentGeneration("churn"))
	}
	w.handle(pt("victim", "v1"), []byte(`{"status":"online","since":2}`), now)
	if got := w.agentGeneration("victim"); got == victim {
		t.Fatal("victim's own change left its generation")
	}
	w.handle(pt("victim", "v1"), nil, now)
	if got := w.agentGeneration("victim"); got != 0 {
		t.Fatalf("forgotten agent's generation %d, want 0", got)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// An agent that loses an instance ends its refusal episode, and one
// forgotten leaves no refusal behind (refusing would otherwise grow with
// every agent name that was ever refused); the per-agent index admit uses
// follows the table.
func TestPresenceRefusingForgotten(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newPresenceWatch()
	w.maxInstances = 1
	pt := contract.PresenceTopic
	consistent := func(t *testing.T) {
		t.Helper()
		n := 0
		for agent, keys := range w.known {
			for key := range keys {
				if a, ok := w.agents[key]; !ok || a.Agent != agent {
					t.Fatalf("index holds %s for %s; table: %+v", key, agent, a)
				}
				n++
			}
		}
		if n != len(w.agents) {
			t.Fatalf("index holds %d instances, table %d", n, len(w.agents))
		}
	}
	w.handle(pt("b", "1"), []byte(`{"status":"online","since":1}`), now)
	w.handle(pt("a", "1"), []byte(`{"status":"online","since":1}`), now)
	if ch, _ := w.handle(pt("a", "2"), []byte(`{"status":"online","since":1}`), now); ch.refused != "a" {
		t.Fatalf("a's second instance: %+v, want refused", ch)
	}
	consistent(t)
	w.handle(pt("a", "1"), nil, now) // cleared: a is forgotten
	if len(w.refusing) != 0 || len(w.known["a"]) != 0 {
		t.Fatalf("after a was forgotten: refusing %v, known %v", w.refusing, w.known)
	}
	consistent(t)
	if ch, _ := w.handle(pt("a", "2"), []byte(`{"status":"online","since":1}`), now); ch.refused != "" {
		t.Fatalf("a's instance after room was made: %+v", ch)
	}
	w.handle(pt("a", "2"), []byte(`{"status":"offline","since":2}`), now)
	if ch, _ := w.handle(pt("a", "3"), []byte(`{"status":"online","since":3}`), now); ch.refused != "" {
		t.Fatalf("a's instance in place of an offline one: %+v", ch)
	}
	consistent(t)
}

package requester

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
)

func TestPresenceWatch(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pt := contract.PresenceTopic
	type step struct {
		topic, payload string
		ok             bool
		online         string // the agents online after the step, comma-separated
		agentGone      string // the agent whose last instance the step took offline
		instanceGone   string // the instance (agent/clientID) it took offline
	}
	tests := []struct {
		name  string
		steps []step
		want  []AgentStatus // Agents() at the end
	}{
		{"one instance online then offline", []step{
			{pt("echo", "a1"), `{"status":"online","clientId":"a1","name":"Echo","version":"1.2","since":1767225600000}`, true, "echo", "", ""},
			{pt("echo", "a1"), `{"status":"offline","clientId":"a1","name":"Echo","version":"1.2"}`, true, "", "echo", "echo/a1"},
		}, []AgentStatus{{Agent: "echo", ClientID: "a1", Name: "Echo", Version: "1.2", Online: false, Since: now}}},
		{"a pool of two, one leaves", []step{
			{pt("echo", "a1"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("echo", "a2"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("echo", "a1"), `{"status":"offline"}`, true, "echo", "", "echo/a1"},
		}, []AgentStatus{{Agent: "echo", ClientID: "a2", Online: true, Since: now}, {Agent: "echo", ClientID: "a1", Since: now}}},
		{"two agents, one leaves", []step{
			{pt("echo", "a1"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("search", "s1"), `{"status":"online"}`, true, "echo,search", "", ""},
			{pt("echo", "a1"), `{"status":"offline"}`, true, "search", "echo", "echo/a1"},
		}, []AgentStatus{{Agent: "search", ClientID: "s1", Online: true, Since: now}, {Agent: "echo", ClientID: "a1", Since: now}}},
		{"one client ID, two agents", []step{
			{pt("echo", "x"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("search", "x"), `{"status":"online"}`, true, "echo,search", "", ""},
		}, []AgentStatus{{Agent: "echo", ClientID: "x", Online: true, Since: now}, {Agent: "search", ClientID: "x", Online: true, Since: now}}},
		{"empty retained payload clears", []step{
			{pt("echo", "a1"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("echo", "a1"), ``, true, "", "echo", "echo/a1"},
		}, []AgentStatus{}},
		{"repeated online counts once", []step{
			{pt("echo", "a1"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("echo", "a1"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("echo", "a1"), `{"status":"offline"}`, true, "", "echo", "echo/a1"},
		}, []AgentStatus{{Agent: "echo", ClientID: "a1", Since: now}}},
		{"interval and connection are kept", []step{
			{pt("echo", "a1"), `{"status":"online","interval":15000,"connection":"c-7"}`, true, "echo", "", ""},
		}, []AgentStatus{{Agent: "echo", ClientID: "a1", Online: true, Since: now, Interval: 15 * time.Second, Connection: "c-7"}}},
		{"topic is the authority, not the payload", []step{
			{pt("echo", "a1"), `{"status":"online","clientId":"someone-else"}`, true, "echo", "", ""},
		}, []AgentStatus{{Agent: "echo", ClientID: "a1", Online: true, Since: now}}},
		{"bad messages change nothing", []step{
			{pt("echo", "a1"), `{"status":"online"}`, true, "echo", "", ""},
			{pt("echo", "a1"), `not json`, false, "echo", "", ""},
			{pt("echo", "a1"), `{"status":"gone"}`, false, "echo", "", ""},
			{pt("echo", "a1"), `["online"]`, false, "echo", "", ""},
			{contract.TopicPrefix + "echo/a+b/status", `{"status":"offline"}`, false, "echo", "", ""},
			{contract.TopicPrefix + "echo/a1/other", `{"status":"offline"}`, false, "echo", "", ""},
			{"ff/v1/mcp/agents/a1/status", `{"status":"offline"}`, false, "echo", "", ""},
			{"elsewhere/a1/status", `{"status":"offline"}`, false, "echo", "", ""},
		}, []AgentStatus{{Agent: "echo", ClientID: "a1", Online: true, Since: now}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newPresenceWatch()
			for i, s := range tc.steps {
				ch, ok := w.handle(s.topic, []byte(s.payload), now)
				online, _ := w.onlineAgents()
				if ok != s.ok || strings.Join(online, ",") != s.online || ch.agentGone != s.agentGone || ch.instanceGone != s.instanceGone {
					t.Errorf("step %d: ok=%v online=%v change=%+v; want %v %q %q %q", i, ok, online, ch, s.ok, s.online, s.agentGone, s.instanceGone)
				}
			}
			got := w.list(now)
			if len(got) != len(tc.want) {
				t.Fatalf("agents %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i].LastHeard != now {
					t.Errorf("agent %d: LastHeard %v, want %v", i, got[i].LastHeard, now)
				}
				got[i].LastHeard = time.Time{}
				if got[i] != tc.want[i] {
					t.Errorf("agent %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPresenceWatchChangedWakes(t *testing.T) {
	w := newPresenceWatch()
	_, changed := w.onlineAgents()
	w.handle(contract.PresenceTopic("echo", "a1"), []byte(`{"status":"online"}`), time.Now())
	select {
	case <-changed:
	default:
		t.Fatal("changed not closed by a presence change")
	}
}

func TestPresenceWatchBounded(t *testing.T) {
	w := newPresenceWatch()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.handle(contract.PresenceTopic("echo", "live"), []byte(`{"status":"online"}`), base)
	for i := range maxKnownAgents + 10 {
		w.handle(contract.PresenceTopic("echo", "dead-"+strconv.Itoa(i)), []byte(`{"status":"offline"}`), base.Add(time.Duration(i+1)*time.Second))
	}
	got := w.list(base.Add(time.Hour))
	if len(got) != maxKnownAgents {
		t.Fatalf("%d agents kept, want %d", len(got), maxKnownAgents)
	}
	if !got[0].Online || got[0].ClientID != "live" {
		t.Fatalf("the online agent was forgotten: %+v", got[0])
	}
	for _, a := range got {
		if a.ClientID == "dead-0" {
			t.Fatal("the oldest offline agent was kept")
		}
	}
}

// An instance offline for longer than OfflineForgotten is no longer
// listed; an online one is, however old its status.
func TestPresenceWatchForgetsLongGone(t *testing.T) {
	w := newPresenceWatch()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.handle(contract.PresenceTopic("echo", "old-online"), []byte(`{"status":"online"}`), base)
	w.handle(contract.PresenceTopic("echo", "gone"), []byte(`{"status":"offline"}`), base)
	w.handle(contract.PresenceTopic("echo", "recent"), []byte(`{"status":"offline"}`), base.Add(OfflineForgotten))
	var ids []string
	for _, a := range w.list(base.Add(OfflineForgotten + time.Minute)) {
		ids = append(ids, a.ClientID)
	}
	if strings.Join(ids, ",") != "old-online,recent" {
		t.Errorf("listed %v, want old-online and recent", ids)
	}
}

// A repeated status changes nothing anyone waits on; an older one than
// the status held is stale; a status without since always applies.
func TestPresenceWatchRepeatsAndStale(t *testing.T) {
	w := newPresenceWatch()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	topic := contract.PresenceTopic("echo", "a1")
	w.handle(topic, []byte(`{"status":"online","since":2000,"interval":30000}`), now)
	gen := w.generation()
	_, changed := w.onlineAgents()

	if _, ok := w.handle(topic, []byte(`{"status":"online","since":2000,"interval":30000}`), now.Add(time.Second)); !ok {
		t.Fatal("a repeat was not understood")
	}
	if w.generation() != gen {
		t.Error("a repeat moved the generation (every tool list would be fetched again)")
	}
	select {
	case <-changed:
		t.Error("a repeat woke the waiters")
	default:
	}

	// A new since says the agent changed (its tools perhaps): caches go.
	w.handle(topic, []byte(`{"status":"online","since":3000,"interval":30000}`), now.Add(2*time.Second))
	if w.generation() == gen {
		t.Error("a new since did not move the generation")
	}
	if ch, ok := w.handle(topic, []byte(`{"status":"offline","since":1000}`), now); !ok || ch.instanceGone != "" {
		t.Errorf("a stale offline status took the instance away: %+v", ch)
	}
	if on, _ := w.agentOnline("echo"); !on {
		t.Fatal("the stale status applied")
	}
	// The Will says no since: it applies.
	if ch, _ := w.handle(topic, []byte(`{"status":"offline"}`), now); ch.agentGone != "echo" {
		t.Errorf("the Will did not take the agent away: %+v", ch)
	}
}

// An instance that promised to repeat its online status and fell silent
// for ExpiryIntervals of its intervals is taken for gone; one that keeps
// repeating, or promised nothing, stays.
func TestPresenceWatchExpires(t *testing.T) {
	w := newPresenceWatch()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.handle(contract.PresenceTopic("echo", "silent"), []byte(`{"status":"online","since":1,"interval":1000}`), t0)
	w.handle(contract.PresenceTopic("echo", "chatty"), []byte(`{"status":"online","since":1,"interval":1000}`), t0)
	w.handle(contract.PresenceTopic("other", "old"), []byte(`{"status":"online"}`), t0)
	if got := w.expire(t0.Add(3 * time.Second)); len(got) != 0 {
		t.Fatalf("expired at 3 intervals: %+v", got)
	}
	w.handle(contract.PresenceTopic("echo", "chatty"), []byte(`{"status":"online","since":1,"interval":1000}`), t0.Add(2500*time.Millisecond))
	got := w.expire(t0.Add(3100 * time.Millisecond))
	if len(got) != 1 || got[0].instanceGone != "echo/silent" || got[0].agentGone != "" {
		t.Fatalf("expire = %+v, want echo/silent alone (chatty keeps echo online)", got)
	}
	if agents, _ := w.onlineAgents(); strings.Join(agents, ",") != "echo,other" {
		t.Errorf("online agents %v", agents)
	}
	if got := w.expire(t0.Add(time.Hour)); len(got) != 1 || got[0].agentGone != "echo" {
		t.Errorf("an hour on: %+v, want echo's last instance gone (other promised nothing)", got)
	}
}

// TestPresenceWatchReconnected: an online status naming another connection
// than the one held says the instance was cut off; a repeat, a change of
// tools (a new since on the same connection), a status that names none and
// a stale replay do not.
func TestPresenceWatchReconnected(t *testing.T) {
	topic := contract.PresenceTopic("echo", "a1")
	tests := []struct {
		name     string
		statuses []string // the last one is judged
		want     bool
	}{
		{"new connection", []string{`{"status":"online","since":1,"connection":"c1"}`, `{"status":"online","since":2,"connection":"c2"}`}, true},
		{"repeat", []string{`{"status":"online","since":1,"connection":"c1"}`, `{"status":"online","since":1,"connection":"c1"}`}, false},
		{"new connection, same since", []string{`{"status":"online","since":1,"connection":"c1"}`, `{"status":"online","since":1,"connection":"c2"}`}, true},
		{"tools changed", []string{`{"status":"online","since":1,"connection":"c1"}`, `{"status":"online","since":2,"connection":"c1"}`}, false},
		{"names none", []string{`{"status":"online","since":1}`, `{"status":"online","since":2}`}, false},
		{"named none before", []string{`{"status":"online","since":1}`, `{"status":"online","since":2,"connection":"c2"}`}, false},
		{"stale replay", []string{`{"status":"online","since":2,"connection":"c2"}`, `{"status":"online","since":1,"connection":"c1"}`}, false},
		{"back from offline", []string{`{"status":"online","since":1,"connection":"c1"}`, `{"status":"offline"}`, `{"status":"online","since":3,"connection":"c2"}`}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newPresenceWatch()
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var ch presenceChange
			for _, s := range tc.statuses {
				var ok bool
				if ch, ok = w.handle(topic, []byte(s), now); !ok {
					t.Fatalf("status %s not understood", s)
				}
			}
			if got := ch.instanceReconnected == "echo/a1"; got != tc.want {
				t.Errorf("reconnected = %v (%+v), want %v", got, ch, tc.want)
			}
		})
	}
}

// TestPresenceWatchForgetUnrepeated: when the link comes back, instances
// that repeat their status stay as they were (the retained statuses may not
// come again soon); the others are forgotten until theirs does.
func TestPresenceWatchForgetUnrepeated(t *testing.T) {
	w := newPresenceWatch()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.handle(contract.PresenceTopic("echo", "repeats"), []byte(`{"status":"online","since":1,"interval":1000}`), now)
	w.handle(contract.PresenceTopic("echo", "silent"), []byte(`{"status":"online","since":1}`), now)
	w.handle(contract.PresenceTopic("other", "silent"), []byte(`{"status":"online","since":1}`), now)
	gen := w.gen
	w.forgetUnrepeated()
	if agents, _ := w.onlineAgents(); strings.Join(agents, ",") != "echo" {
		t.Errorf("online agents after the link came back: %v, want echo (its repeating instance)", agents)
	}
	if !w.instanceOnline("echo", "repeats") || w.instanceOnline("echo", "silent") {
		t.Error("kept the wrong instances")
	}
	if w.gen == gen {
		t.Error("forgetting instances was not a change")
	}
	gen = w.gen
	w.forgetUnrepeated()
	if w.gen != gen {
		t.Error("forgetting nothing was a change")
	}
}

package requester

import (
	"strconv"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
)

func TestPresenceWatch(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		topic, payload string
		ok, lastGone   bool
		online         bool   // anyOnline after the step
		gone           string // the agent the step took offline
	}
	tests := []struct {
		name  string
		steps []step
		want  []AgentStatus // Agents() at the end
	}{
		{"one agent online then offline", []step{
			{contract.PresenceTopic("a1"), `{"status":"online","clientId":"a1","name":"echo","version":"1.2","since":1767225600000}`, true, false, true, ""},
			{contract.PresenceTopic("a1"), `{"status":"offline","clientId":"a1","name":"echo","version":"1.2"}`, true, true, false, "a1"},
		}, []AgentStatus{{ClientID: "a1", Name: "echo", Version: "1.2", Online: false, Since: now}}},
		{"two agents, one leaves", []step{
			{contract.PresenceTopic("a1"), `{"status":"online"}`, true, false, true, ""},
			{contract.PresenceTopic("a2"), `{"status":"online"}`, true, false, true, ""},
			{contract.PresenceTopic("a1"), `{"status":"offline"}`, true, false, true, "a1"},
		}, []AgentStatus{{ClientID: "a2", Online: true, Since: now}, {ClientID: "a1", Since: now}}},
		{"empty retained payload clears", []step{
			{contract.PresenceTopic("a1"), `{"status":"online"}`, true, false, true, ""},
			{contract.PresenceTopic("a1"), ``, true, true, false, "a1"},
		}, []AgentStatus{}},
		{"repeated online counts once", []step{
			{contract.PresenceTopic("a1"), `{"status":"online"}`, true, false, true, ""},
			{contract.PresenceTopic("a1"), `{"status":"online"}`, true, false, true, ""},
			{contract.PresenceTopic("a1"), `{"status":"offline"}`, true, true, false, "a1"},
		}, []AgentStatus{{ClientID: "a1", Since: now}}},
		{"topic is the authority, not the payload", []step{
			{contract.PresenceTopic("a1"), `{"status":"online","clientId":"someone-else"}`, true, false, true, ""},
		}, []AgentStatus{{ClientID: "a1", Online: true, Since: now}}},
		{"bad messages change nothing", []step{
			{contract.PresenceTopic("a1"), `{"status":"online"}`, true, false, true, ""},
			{contract.PresenceTopic("a1"), `not json`, false, false, true, ""},
			{contract.PresenceTopic("a1"), `{"status":"gone"}`, false, false, true, ""},
			{contract.PresenceTopic("a1"), `["online"]`, false, false, true, ""},
			{contract.TopicPrefix + "agents/a+b/status", `{"status":"offline"}`, false, false, true, ""},
			{contract.TopicPrefix + "agents/a1/other", `{"status":"offline"}`, false, false, true, ""},
			{"elsewhere/a1/status", `{"status":"offline"}`, false, false, true, ""},
		}, []AgentStatus{{ClientID: "a1", Online: true, Since: now}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newPresenceWatch()
			for i, s := range tc.steps {
				ok, lastGone, gone := w.handle(s.topic, []byte(s.payload), now)
				online, _ := w.anyOnline()
				if ok != s.ok || lastGone != s.lastGone || online != s.online || gone != s.gone {
					t.Errorf("step %d: ok=%v lastGone=%v online=%v gone=%q; want %v %v %v %q", i, ok, lastGone, online, gone, s.ok, s.lastGone, s.online, s.gone)
				}
			}
			got := w.list()
			if len(got) != len(tc.want) {
				t.Fatalf("agents %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("agent %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPresenceWatchChangedWakes(t *testing.T) {
	w := newPresenceWatch()
	_, changed := w.anyOnline()
	w.handle(contract.PresenceTopic("a1"), []byte(`{"status":"online"}`), time.Now())
	select {
	case <-changed:
	default:
		t.Fatal("changed not closed by a presence change")
	}
}

func TestPresenceWatchBounded(t *testing.T) {
	w := newPresenceWatch()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.handle(contract.PresenceTopic("live"), []byte(`{"status":"online"}`), base)
	for i := range maxKnownAgents + 10 {
		w.handle(contract.PresenceTopic("dead-"+strconv.Itoa(i)), []byte(`{"status":"offline"}`), base.Add(time.Duration(i+1)*time.Second))
	}
	got := w.list()
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

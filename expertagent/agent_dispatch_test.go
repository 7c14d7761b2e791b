package expertagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
)

// TestAgentParseRequestTopic: the hand-written parser splits what
// contract.ParseTopic accepts as a request the same way, and refuses
// every topic that is not shaped as one.
func TestAgentParseRequestTopic(t *testing.T) {
	c := contract.Context{PlatformID: "p", UserID: "u-1", SessionID: "s_2", EntityType: contract.NoEntity, EntityID: "e"}
	tests := []struct {
		name, topic string
		ok          bool
	}{
		{name: "any instance", topic: c.RequestTopic("agent1", contract.AnyInstance), ok: true},
		{name: "one instance", topic: c.RequestTopic("agent1", "agent1-0a1b"), ok: true},
		{name: "reply", topic: c.ReplyTopic("agent1", "i")},
		{name: "presence", topic: contract.PresenceTopic("agent1", "i")},
		{name: "contract v1", topic: contract.V1Prefix + c.Levels() + "/req"},
		{name: "no instance level", topic: contract.TopicPrefix + "agent1/" + c.Levels() + "/req"},
		{name: "a level too many", topic: contract.TopicPrefix + "agent1/_/x/" + c.Levels() + "/req"},
		{name: "prefix only", topic: contract.TopicPrefix + "req"},
		{name: "empty", topic: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agentParseRequestTopic(tc.topic)
			if (err == nil) != tc.ok {
				t.Fatalf("agentParseRequestTopic(%q) error %v, want ok %v", tc.topic, err, tc.ok)
			}
			if !tc.ok {
				return
			}
			want, err := contract.ParseTopic(tc.topic)
			if err != nil || want.Kind != contract.Request {
				t.Fatalf("contract.ParseTopic(%q) = %+v, %v", tc.topic, want, err)
			}
			if got.agent != want.Agent || got.instance != want.Instance || got.ctx != want.Context || got.levels != want.Context.Levels() {
				t.Fatalf("split %+v, contract.ParseTopic %+v", got, want)
			}
		})
	}
}

// agentTopicLink records the topic of every publish.
type agentTopicLink struct {
	agentBenchLink
	topics chan string
}

func (l *agentTopicLink) publish(_ context.Context, topic string, _ []byte, _ bool) error {
	l.topics <- topic
	return nil
}

// TestAgentDecodeDropsForeignTopics: the Agent answers a request for its
// username addressed to any instance or to its client ID, on its own
// reply topic, and drops one for another agent or instance, which the
// broker should never have delivered.
func TestAgentDecodeDropsForeignTopics(t *testing.T) {
	a := NewAgent(AgentOptions{BrokerURL: "tcp://127.0.0.1:1", Username: "agent1", ClientID: "agent1-a"})
	link := &agentTopicLink{topics: make(chan string, 16)}
	agentBenchStart(t, a, link)
	c := contract.Context{PlatformID: "p", UserID: "u", SessionID: "s", EntityType: contract.NoEntity, EntityID: contract.NoEntity}
	reply := c.ReplyTopic("agent1", "agent1-a")
	tests := []struct {
		name, topic string
		answered    bool
	}{
		{name: "any instance", topic: c.RequestTopic("agent1", contract.AnyInstance), answered: true},
		{name: "this instance", topic: c.RequestTopic("agent1", "agent1-a"), answered: true},
		{name: "another instance", topic: c.RequestTopic("agent1", "agent1-b")},
		{name: "another agent", topic: c.RequestTopic("agent2", contract.AnyInstance)},
		{name: "another agent, this client ID", topic: c.RequestTopic("agent2", "agent1-a")},
		{name: "wildcard instance", topic: c.RequestTopic("agent1", "+")},
		{name: "bad context level", topic: contract.TopicPrefix + "agent1/_/p/u/s.1/_/_/req"},
		{name: "empty context level", topic: contract.TopicPrefix + "agent1/_/p/u//_/_/req"},
		{name: "reply topic", topic: c.ReplyTopic("agent1", "agent1-a")},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			corrID := "c" + strings.Repeat("x", i)
			dropped := a.Stats().Dropped
			a.onMessage(tc.topic, []byte(`{"v":2,"correlationId":"`+corrID+`","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}`))
			if !tc.answered {
				// onMessage drops a message before it returns.
				if got := a.Stats().Dropped; got != dropped+1 {
					t.Fatalf("Dropped %d -> %d, want the request dropped", dropped, got)
				}
				return
			}
			select {
			case got := <-link.topics:
				if got != reply {
					t.Fatalf("answered on %s, want %s", got, reply)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no answer")
			}
		})
	}
	select {
	case got := <-link.topics:
		t.Fatalf("published on %s for a dropped request", got)
	default:
	}
}

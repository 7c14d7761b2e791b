package broker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	pahopackets "github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// online is a presence status of docs/protocol.md.
func online(clientID, connection string) string {
	return `{"status":"online","clientId":"` + clientID + `","name":"a","connection":"` + connection + `"}`
}

// watchPresence subscribes the inline client to every presence topic.
func watchPresence(t *testing.T, e *testEnv) chan inlineMsg {
	t.Helper()
	got := make(chan inlineMsg, 64)
	if err := e.Broker.Bus().Subscribe(testContext(t), presenceFilter, chanHandler(got)); err != nil {
		t.Fatal(err)
	}
	return got
}

// expectInline fails unless the next inline message is payload on topic.
func expectInline(t *testing.T, got chan inlineMsg, topic, payload string) {
	t.Helper()
	if m := nextInline(t, got); m.topic != topic || m.payload != payload {
		t.Fatalf("presence %s %.80q, want %s %.80q", m.topic, m.payload, topic, payload)
	}
}

// A presence status over MaxPresenceBytes is dropped, a Will over it
// refused at login: the broker would keep it for good, and every gateway
// would hold and list it.
func TestPresenceStatusBounded(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.MaxPresenceBytes = 1024 })
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	got := watchPresence(t, e)
	topic := presence("agent1", "agent1-a")
	huge := online("agent1-a", strings.Repeat("n", 2048))

	t.Run("publish, MQTT 3.1.1", func(t *testing.T) {
		agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
		mustPublish(t, agent, topic, 1, true, huge)
		mustPublish(t, agent, topic, 1, true, online("agent1-a", "c1"))
		expectInline(t, got, topic, online("agent1-a", "c1")) // the huge one never came
		agent.Disconnect(50)
		expectInline(t, got, topic, "") // cleared: see TestPresenceClearedWhenLeftOnline
	})

	t.Run("publish, MQTT 5", func(t *testing.T) {
		c := dialRaw(t, e.Broker.Addr().String())
		if ack := c.connect("agent1-a", "agent1", pwa, 30); ack.ReasonCode != 0 {
			t.Fatalf("CONNACK %#x", ack.ReasonCode)
		}
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
			TopicName: topic, PacketID: 7, Payload: []byte(huge)})
		if ack := c.mustRecv(packets.Puback); ack.ReasonCode != packets.ErrPayloadFormatInvalid.Code {
			t.Errorf("PUBACK %#x %q, want %#x", ack.ReasonCode, ack.Properties.ReasonString, packets.ErrPayloadFormatInvalid.Code)
		}
	})

	t.Run("will", func(t *testing.T) {
		_, err := e.connect(t, "agent1-w", "agent1", pwa, nil, withWill(presence("agent1", "agent1-w"), strings.Repeat("w", 2048), true))
		if !errors.Is(err, pahopackets.ErrorRefusedNotAuthorised) {
			t.Errorf("login with a huge presence Will: %v, want %v", err, pahopackets.ErrorRefusedNotAuthorised)
		}
		e.mustConnect(t, "agent1-w", "agent1", pwa, nil, withWill(presence("agent1", "agent1-w"), `{"status":"offline"}`, true))
	})
}

// aliases is an Authenticator that logs a username in as the identity
// another username names: the identity's username, not the CONNECT
// packet's, is what the ACL checks topics against.
type aliases struct {
	broker.Authenticator
	as map[string]string
}

func (a aliases) Authenticate(ctx context.Context, username string, password []byte) (acl.Identity, error) {
	if u, ok := a.as[username]; ok {
		username = u
	}
	return a.Authenticator.Authenticate(ctx, username, password)
}

// A connection that ends leaving its own retained "online" (it published
// no "offline", and sent no Will) has its status cleared, as an instance
// stopping for good clears it; an "offline", a Will, a takeover or a
// reconnection that announced itself is left alone.
func TestPresenceClearedWhenLeftOnline(t *testing.T) {
	disconnects := make(chan string, 64)
	e := newEnv(t, func(o *broker.Options) {
		o.Authenticator = aliases{o.Authenticator, map[string]string{"alias1": "agent1"}}
		o.Events = func(ev broker.Event) {
			if ev.Kind == broker.EventDisconnect {
				select {
				case disconnects <- ev.ClientID:
				default: // more than a test waits for: gone fails
				}
			}
		}
	})
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	got := watchPresence(t, e)
	// gone waits until the broker is done with a connection of id: the
	// events hook runs OnDisconnect after the presence hook, whose clear
	// reaches got before OnDisconnect returns.
	gone := func(t *testing.T, id string) {
		t.Helper()
		timeout := time.After(waitFor)
		for {
			select {
			case c := <-disconnects:
				if c == id {
					return
				}
			case <-timeout:
				t.Fatalf("no disconnect of %s within %v", id, waitFor)
			}
		}
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, topic, id string)
	}{
		{"clean disconnect without offline", func(t *testing.T, topic, id string) {
			a := e.mustConnect(t, id, "agent1", pwa, nil)
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			expectInline(t, got, topic, online(id, "c1"))
			a.Disconnect(50)
			expectInline(t, got, topic, "")
			gone(t, id)
		}},
		{"connection lost without a Will", func(t *testing.T, topic, id string) {
			opt, kill := killable()
			a := e.mustConnect(t, id, "agent1", pwa, nil, opt)
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			expectInline(t, got, topic, online(id, "c1"))
			kill()
			expectInline(t, got, topic, "")
			gone(t, id)
		}},
		{"logged in under another name", func(t *testing.T, topic, id string) {
			a := e.mustConnect(t, id, "alias1", pwa, nil)
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			expectInline(t, got, topic, online(id, "c1"))
			a.Disconnect(50)
			expectInline(t, got, topic, "")
			gone(t, id)
		}},
		{"offline before the disconnect", func(t *testing.T, topic, id string) {
			a := e.mustConnect(t, id, "agent1", pwa, nil)
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			mustPublish(t, a, topic, 1, true, `{"status":"offline"}`)
			expectInline(t, got, topic, online(id, "c1"))
			expectInline(t, got, topic, `{"status":"offline"}`)
			a.Disconnect(50)
			gone(t, id)
			e.expectRetained(t, topic, `{"status":"offline"}`)
		}},
		{"the Will", func(t *testing.T, topic, id string) {
			opt, kill := killable()
			a := e.mustConnect(t, id, "agent1", pwa, nil, opt, withWill(topic, `{"status":"offline","clientId":"`+id+`"}`, true))
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			expectInline(t, got, topic, online(id, "c1"))
			kill()
			expectInline(t, got, topic, `{"status":"offline","clientId":"`+id+`"}`)
			gone(t, id)
			e.expectRetained(t, topic, `{"status":"offline","clientId":"`+id+`"}`)
		}},
		{"takeover", func(t *testing.T, topic, id string) {
			a := e.mustConnect(t, id, "agent1", pwa, nil)
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			expectInline(t, got, topic, online(id, "c1"))
			b := e.mustConnect(t, id, "agent1", pwa, nil) // a is cut off
			gone(t, id)                                   // a's
			mustPublish(t, b, topic, 1, true, online(id, "c2"))
			expectInline(t, got, topic, online(id, "c2"))
			e.expectRetained(t, topic, online(id, "c2"))
			b.Disconnect(50) // the latest connection's "online" is still cleared
			expectInline(t, got, topic, "")
			gone(t, id)
		}},
		{"reconnected and announced", func(t *testing.T, topic, id string) {
			a := e.mustConnect(t, id, "agent1", pwa, nil)
			mustPublish(t, a, topic, 1, true, online(id, "c1"))
			expectInline(t, got, topic, online(id, "c1"))
			a.Disconnect(50)
			expectInline(t, got, topic, "")
			gone(t, id)
			b := e.mustConnect(t, id, "agent1", pwa, nil)
			mustPublish(t, b, topic, 1, true, online(id, "c2"))
			expectInline(t, got, topic, online(id, "c2"))
			e.expectRetained(t, topic, online(id, "c2"))
			b.Disconnect(50) // the latest connection's "online" is still cleared
			expectInline(t, got, topic, "")
			gone(t, id)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "agent1-" + strings.ReplaceAll(tc.name, " ", "-")
			tc.run(t, presence("agent1", id), id)
			// Every connection of the case is gone (gone): a clear it
			// caused would be here already.
			select {
			case m := <-got:
				t.Errorf("then %s %.80q", m.topic, m.payload)
			default:
			}
		})
	}
}

// testEventually is eventually for *testing.T.
func testEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually(t, what, cond)
}

// expectRetained fails unless topic's retained message is payload.
func (e *testEnv) expectRetained(t *testing.T, topic, payload string) {
	t.Helper()
	got := make(chan inlineMsg, 4)
	if err := e.Broker.Bus().Subscribe(testContext(t), topic, chanHandler(got)); err != nil {
		t.Fatal(err)
	}
	select { // retained messages are delivered before Subscribe returns
	case m := <-got:
		if m.payload != payload {
			t.Errorf("retained %.80q, want %.80q", m.payload, payload)
		}
	default:
		t.Errorf("nothing retained, want %.80q", payload)
	}
}

// A clear is published with no lock held that other presence publishes
// need: the hooks it runs (here an inline handler that waits for another
// agent's status) do not hold back the statuses of other topics.
func TestPresenceClearHoldsNoOneBack(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	topicA, topicB := presence("agent1", "agent1-a"), presence("agent1", "agent1-b")
	cleared, seenB, waited := make(chan struct{}), make(chan struct{}), make(chan bool, 1)
	var once sync.Once
	handler := func(topic string, payload []byte) {
		switch {
		case topic == topicB:
			once.Do(func() { close(seenB) })
		case topic == topicA && len(payload) == 0:
			close(cleared)
			select { // inside the clear's publish
			case <-seenB:
				waited <- false
			case <-time.After(waitFor):
				waited <- true
			}
		}
	}
	if err := e.Broker.Bus().Subscribe(testContext(t), presenceFilter, handler); err != nil {
		t.Fatal(err)
	}
	a := e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	b := e.mustConnect(t, "agent1-b", "agent1", pwa, nil)
	mustPublish(t, a, topicA, 1, true, online("agent1-a", "c1"))
	a.Disconnect(50)
	select {
	case <-cleared:
	case <-time.After(waitFor):
		t.Fatal("agent1-a's status not cleared")
	}
	mustPublish(t, b, topicB, 1, true, online("agent1-b", "c1"))
	if <-waited {
		t.Errorf("agent1-b's status waited %v for agent1-a's clear", waitFor)
	}
}

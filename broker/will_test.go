package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
	mqtt "github.com/mochi-mqtt/server/v2"
	mochipk "github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
)

// An agent's Will on its own presence topic is published (and retained)
// when its connection dies without a DISCONNECT.
func TestWillOnPresenceDelivered(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)

	in := newInbox()
	gw := e.mustConnect(t, "gw-1", "gw", pwp, in)
	mustSubscribe(t, gw, presenceFilter)
	// mochi sends the SUBACK before it looks for retained messages: a
	// retained publish in between reaches gw twice, live and retained.
	// gw's packets are handled in order, so once this one is acknowledged
	// the subscription is settled.
	mustPublish(t, gw, ctxReq, 1, false, "settle")

	kill, cut := killable()
	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil, kill, withWill(presence("agent1", "agent1-a"), "offline", true))
	mustPublish(t, agent, presence("agent1", "agent1-a"), 1, true, "online")
	in.expectNext(t, presence("agent1", "agent1-a"), "online")

	cut()
	in.expectNext(t, presence("agent1", "agent1-a"), "offline")

	late := newInbox()
	gw2 := e.mustConnect(t, "gw-2", "gw", pwp, late)
	mustSubscribe(t, gw2, presenceFilter)
	if m := late.expectNext(t, presence("agent1", "agent1-a"), "offline"); !m.retained {
		t.Error("the Will was not retained")
	}
}

// mochi publishes Wills without asking the ACL, so a client whose Will it
// could not publish is refused at login.
func TestWillRefused(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)
	pwc := e.addIdentity(t, "device", acl.RoleClient)
	e.Policy.SetRules([]acl.Rule{{ID: 1, Username: "device", Access: acl.AccessWrite, Filter: "devices/device/#"}})

	for _, tc := range []struct {
		name, clientID, username, password, will string
		retained, ok                             bool
	}{
		{"agent on own presence", "agent1-a", "agent1", pwa, presence("agent1", "agent1-a"), true, true},
		{"agent on another instance's presence", "agent1-b", "agent1", pwa, presence("agent1", "agent1-c"), true, false},
		{"agent on its client ID's presence under another username", "agent1-g", "agent1", pwa, presence("agent2", "agent1-g"), true, false},
		{"agent on its own reply topic", "agent1-d", "agent1", pwa, ctxRes("agent1", "agent1-d"), false, false},
		{"agent on a request topic", "agent1-e", "agent1", pwa, ctxReq, false, false},
		{"agent elsewhere under ff/v2/mcp/", "agent1-f", "agent1", pwa, "ff/v2/mcp/agent1/agent1-f", false, false},
		{"agent on its v1 presence", "agent1-h", "agent1", pwa, "ff/v1/mcp/agents/agent1-h/status", true, false},
		{"platform on a request topic", "gw-a", "gw", pwp, ctxReq, false, false},
		{"platform on its presence", "gw-b", "gw", pwp, presence("gw", "gw-b"), true, false},
		{"client without a rule", "device-a", "device", pwc, "alarms/device", false, false},
		{"client under its rule", "device-b", "device", pwc, "devices/device/state", true, true},
		{"client on $SYS", "device-c", "device", pwc, "$SYS/broker/x", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.connect(t, tc.clientID, tc.username, tc.password, nil, withWill(tc.will, "gone", tc.retained))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && err == nil:
				c.Disconnect(0)
				t.Fatal("connected with a Will it may not publish")
			case !tc.ok && !errors.Is(err, packets.ErrorRefusedNotAuthorised):
				t.Fatalf("error = %v, want %v", err, packets.ErrorRefusedNotAuthorised)
			}
		})
	}
}

// willSentHook publishes requests while mochi sends a client's Will, before
// it marks the client closed: what a gateway does on hearing the Will.
type willSentHook struct {
	mqtt.HookBase
	send func()
}

func (h *willSentHook) ID() string                              { return "test-will-sent" }
func (h *willSentHook) Provides(b byte) bool                    { return b == mqtt.OnWillSent }
func (h *willSentHook) OnWillSent(*mqtt.Client, mochipk.Packet) { h.send() }

// A request sent the moment an instance's Will goes out reaches the live
// member of its pool, never the dying one (mochi publishes the Will before
// it closes the client): both turns of the round robin go to the survivor.
func TestSharedRequestAtWillGoesToLiveMember(t *testing.T) {
	e := newEnv(t)
	pw := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	kill, cut := killable()
	dying := e.mustConnect(t, "agent1-a", "agent1", pw, newInbox(), kill,
		withWill(presence("agent1", "agent1-a"), `{"status":"offline"}`, true))
	mustSubscribe(t, dying, sharedRequests)
	live := newInbox()
	b := e.mustConnect(t, "agent1-b", "agent1", pw, live)
	mustSubscribe(t, b, sharedRequests)
	sent := make(chan struct{})
	if err := e.Broker.AddHook(&willSentHook{send: func() {
		for i := range 2 {
			_ = e.Broker.Bus().Publish(context.Background(), ctxReq, []byte(fmt.Sprintf("at-will-%d", i)))
		}
		close(sent)
	}}); err != nil {
		t.Fatal(err)
	}
	cut()
	<-sent
	live.expectNext(t, ctxReq, "at-will-0")
	live.expectNext(t, ctxReq, "at-will-1")
}

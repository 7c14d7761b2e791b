package broker_test

import (
	"strings"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// An agent may not widen its subscription beyond its own requests: not
// another agent's, not another instance's, not replies or presence, not the
// v1 tree. Each refused filter gets SUBACK failure, and a message it would
// have matched never arrives.
func TestAgentSubscribeRefused(t *testing.T) {
	e := newEnv(t)
	pw1 := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pw2 := e.addIdentity(t, "agent2", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)

	in := newInbox()
	agent := e.mustConnect(t, "agent1-a", "agent1", pw1, in)
	refused := []string{
		"ff/v2/mcp/#",
		"#",
		"+/v2/#",
		"ff/+/mcp/+/+/+/+/+/+/+/res",
		"ff/v2/mcp/+/+/+/+/+/+/+/res",
		ctxReplies,
		presenceFilter,
		presence("agent1", "+"),
		"$SYS/#",
		"$share/agent1/ff/v2/mcp/+/+/+/+/+/+/+/res",
		"$share/agent1/#",
		"$SHARE/agent1/" + requestFilter, // mochi reads the share prefix in any case
		// Another agent's requests, plain or shared, or every agent's.
		requestFilterOf("agent2"),
		sharedRequestsOf("agent2"),
		"$share/agent1/" + requestFilterOf("agent2"),
		"ff/v2/mcp/+/_/+/+/+/+/+/req",
		"ff/v2/mcp/+/+/+/+/+/+/+/req",
		// Its own pool's requests under another group, every instance's,
		// another instance's.
		"$share/others/" + requestFilter,
		"ff/v2/mcp/agent1/+/+/+/+/+/+/req",
		"ff/v2/mcp/agent1/agent1-b/+/+/+/+/+/req",
		"ff/v2/mcp/agent1/#",
		// The v1 tree.
		"ff/v1/mcp/#",
		"ff/v1/mcp/+/+/+/+/+/req",
		"$share/agent1/ff/v1/mcp/+/+/+/+/+/req",
	}
	codes := subscribe(t, agent, refused...)
	for i, f := range refused {
		t.Run(f, func(t *testing.T) {
			if codes[i] != 0x80 {
				t.Errorf("SUBACK code = %#x, want 0x80", codes[i])
			}
		})
	}
	// Its pool's requests and its own instance's.
	mustSubscribe(t, agent, requestFilter, "ff/v2/mcp/agent1/agent1-a/+/+/+/+/+/req")

	other := e.mustConnect(t, "agent2-a", "agent2", pw2, nil)
	gw := e.mustConnect(t, "gw-1", "gw", pwp, nil)
	mustPublish(t, other, ctxRes("agent2", "agent2-a"), 1, false, "a reply agent1 must not see")
	mustPublish(t, other, presence("agent2", "agent2-a"), 1, false, `{"status":"online"}`)
	mustPublish(t, gw, requestTopic("agent2", "_", ctxLevels), 1, false, "a request for agent2")
	mustPublish(t, gw, requestTopic("agent1", "agent1-b", ctxLevels), 1, false, "a request for another instance")
	mustPublish(t, gw, requestTopic("agent1", "agent1-a", ctxLevels), 1, false, "for this instance")
	in.expectNext(t, requestTopic("agent1", "agent1-a", ctxLevels), "for this instance")
	mustPublish(t, gw, ctxReq, 1, false, "sentinel")
	in.expectNext(t, ctxReq, "sentinel")
}

// Only a platform publishes requests: an agent's /req (here for another
// agent's pool) is dropped (QoS 0) or dropped with a disconnect (a v3
// client at QoS 1, which has no other way to hear the refusal). A
// legitimate subscriber never sees it.
func TestAgentPublishRequestRefused(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(map[byte]string{0: "qos0", 1: "qos1"}[qos], func(t *testing.T) {
			e := newEnv(t)
			pw1 := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
			pw2 := e.addIdentity(t, "agent2", acl.RoleExpertAgent)
			pwp := e.addIdentity(t, "gw", acl.RolePlatform)
			req2 := requestTopic("agent2", "_", ctxLevels)

			in := newInbox()
			listener := e.mustConnect(t, "agent2-a", "agent2", pw2, in)
			mustSubscribe(t, listener, sharedRequestsOf("agent2"))

			lost := make(chan error, 1)
			forger := e.mustConnect(t, "agent1-a", "agent1", pw1, nil, func(o *paho.ClientOptions) {
				o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
			})
			tok := forger.Publish(req2, qos, false, "forged request")
			if qos == 0 {
				_ = wait(t, tok) // a QoS 0 publish completes once written
				// mochi handles one client's packets in order: once this is
				// acknowledged, the forged request has been routed (or not).
				mustPublish(t, forger, presence("agent1", "agent1-a"), 1, false, "online")
			} else {
				if err := wait(t, tok); err == nil {
					t.Fatal("QoS 1 forged request acknowledged; want the connection closed")
				}
				select {
				case <-lost:
				case <-timeAfter():
					t.Fatal("forger still connected")
				}
			}

			gw := e.mustConnect(t, "gw-1", "gw", pwp, nil)
			mustPublish(t, gw, req2, 1, false, "sentinel")
			in.expectNext(t, req2, "sentinel")
		})
	}
}

// Nobody but an agent instance may publish a reply, and only under its own
// username and client ID; presence likewise. A gateway trusts the agent and
// instance levels of what it hears because of this.
func TestSpoofingRefused(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	e.addIdentity(t, "agent2", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)
	pwp2 := e.addIdentity(t, "gw2", acl.RolePlatform)
	pwc := e.addIdentity(t, "device", acl.RoleClient)

	in := newInbox()
	gw := e.mustConnect(t, "gw-1", "gw", pwp, in)
	mustSubscribe(t, gw, ctxReplies, presenceFilter)

	for _, tc := range []struct {
		name, clientID, username, password, topic string
	}{
		{"platform publishing a reply as an agent", "gw2-1", "gw2", pwp2, ctxRes("agent1", "agent1-a")},
		{"platform publishing a reply as itself", "gw2-3", "gw2", pwp2, ctxRes("gw2", "gw2-3")},
		{"client publishing a reply", "device-1", "device", pwc, ctxRes("device", "device-1")},
		{"client publishing a request", "device-2", "device", pwc, ctxReq},
		{"agent replying under another username", "agent1-b", "agent1", pwa, ctxRes("agent2", "agent1-b")},
		{"agent replying under another client ID", "agent1-c", "agent1", pwa, ctxRes("agent1", "agent1-x")},
		{"agent replying for its pool", "agent1-d", "agent1", pwa, ctxRes("agent1", "_")},
		{"agent replying on v1", "agent1-e", "agent1", pwa, "ff/v1/mcp/" + ctxLevels + "/res"},
		{"agent forging another instance's presence", "agent1-f", "agent1", pwa, presence("agent1", "agent1-y")},
		{"agent forging another agent's presence", "agent1-g", "agent1", pwa, presence("agent2", "agent1-g")},
		{"agent announcing itself on v1", "agent1-h", "agent1", pwa, "ff/v1/mcp/agents/agent1-h/status"},
		{"platform publishing presence", "gw2-2", "gw2", pwp2, presence("gw2", "gw2-2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.mustConnect(t, tc.clientID, tc.username, tc.password, nil)
			// QoS 1: the token completes (with an error, as mochi
			// disconnects a v3 client for a refused QoS 1 publish) only
			// once the broker has handled the publish.
			if err := publish(t, c, tc.topic, 1, false, "spoofed"); err == nil {
				t.Error("spoofed publish acknowledged")
			}
		})
	}

	agent := e.mustConnect(t, "agent1-z", "agent1", pwa, nil)
	mustPublish(t, agent, ctxRes("agent1", "agent1-z"), 1, false, "sentinel")
	in.expectNext(t, ctxRes("agent1", "agent1-z"), "sentinel")
}

// A platform subscribes to the reply filter of one context at a time and
// to presence, and publishes requests, to an agent's pool or to one of its
// instances, that reach the agent.
func TestPlatformOwnTopics(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)

	agent := e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	startResponder(t, agent, sharedRequests, 1)
	startResponder(t, agent, "ff/v2/mcp/agent1/agent1-a/+/+/+/+/+/req", 1)

	in := newInbox()
	gw := e.mustConnect(t, "gw-1", "gw", pwp, in)
	refused := []string{
		"ff/v2/mcp/+/+/+/+/+/+/+/res",
		"ff/v2/mcp/+/+/plat1/user1/+/_/_/res",
		"ff/v2/mcp/+/+/" + ctxLevels + "/#",
		ctxReq,
		requestFilter,
		"$share/gw/" + ctxReplies,
		"ff/v2/mcp/#",
		"ff/v1/mcp/+/+/+/+/+/res",
		"ff/v1/mcp/agents/+/status",
	}
	codes := subscribe(t, gw, refused...)
	for i, f := range refused {
		if codes[i] != 0x80 {
			t.Errorf("platform subscribe %q: code %#x, want 0x80", f, codes[i])
		}
	}
	mustSubscribe(t, gw, ctxReplies, presenceFilter, presence("agent1", "+"), presence("agent1", "agent1-a"))

	mustPublish(t, gw, ctxReq, 1, false, "hello")
	in.expectNext(t, ctxRes("agent1", "agent1-a"), "re:hello")
	mustPublish(t, gw, requestTopic("agent1", "agent1-a", ctxLevels), 1, false, "you")
	in.expectNext(t, ctxRes("agent1", "agent1-a"), "re:you")

	mustPublish(t, agent, presence("agent1", "agent1-a"), 1, false, "online")
	m := in.next(t)
	if m.topic != presence("agent1", "agent1-a") || m.payload != "online" {
		t.Fatalf("presence message = %+v", m)
	}
}

// Operator rules open topics outside ff/v2/ (and ff/v1/mcp/) to plain
// clients. The policy can change while clients are connected, and
// deliveries are checked too: a subscription granted under a rule since
// removed no longer receives.
func TestOperatorRules(t *testing.T) {
	e := newEnv(t)
	pwc := e.addIdentity(t, "device", acl.RoleClient)
	in := newInbox()
	c := e.mustConnect(t, "device-1", "device", pwc, in)
	if codes := subscribe(t, c, "sensors/#"); codes[0] != 0x80 {
		t.Fatalf("subscribe without a rule: code %#x, want 0x80", codes[0])
	}

	other := acl.Rule{ID: 2, Username: "", Access: acl.AccessRead, Filter: "other/#"}
	e.Policy.SetRules([]acl.Rule{{ID: 1, Username: "device", Access: acl.AccessReadWrite, Filter: "sensors/#"}, other})
	if codes := subscribe(t, c, "sensors/#", "sensors/+/t", "other/x"); codes[0] != 1 || codes[1] != 1 || codes[2] != 1 {
		t.Fatalf("subscribe under the rules: codes %#x, want granted", codes)
	}
	mustPublish(t, c, "sensors/a/t", 1, false, "21.5")
	in.expectNext(t, "sensors/a/t", "21.5")

	e.Policy.SetRules([]acl.Rule{other})
	// Inline publishes are routed before Publish returns: the order is
	// exact.
	bus := e.Broker.Bus()
	ctx := testContext(t)
	if err := bus.Publish(ctx, "sensors/b/t", []byte("not delivered")); err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(ctx, "other/x", []byte("sentinel")); err != nil {
		t.Fatal(err)
	}
	in.expectNext(t, "other/x", "sentinel")
}

// A client of the retired contract v1 is refused, and the broker says so
// once per connection, naming the client: an old agent would otherwise
// fail with no word of why.
func TestV1ClientWarnedOnce(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	e := newEnv(t, func(o *broker.Options) { o.Logger = logrus.NewEntry(logger) })
	pw := e.addIdentity(t, "old-agent", acl.RoleExpertAgent)
	c := e.mustConnect(t, "old-agent-1", "old-agent", pw, newInbox())
	codes := subscribe(t, c, "$share/old/ff/v1/mcp/+/+/+/+/+/req", "ff/v1/mcp/agents/old-agent-1/status")
	for i, code := range codes {
		if code < 0x80 {
			t.Errorf("v1 filter %d granted (SUBACK %#x)", i, code)
		}
	}
	// QoS 0: a refused QoS 1 publish would end the connection.
	_ = publish(t, c, "ff/v1/mcp/agents/old-agent-1/status", 0, false, `{"status":"online"}`)
	// A marker after: once its SUBACK is in, the broker has handled the rest.
	mustSubscribe(t, c, requestFilterOf("old-agent"))

	var warned []*logrus.Entry
	for _, en := range hook.AllEntries() {
		if en.Level == logrus.WarnLevel && strings.Contains(en.Message, "contract v1") {
			warned = append(warned, en)
		}
	}
	if len(warned) != 1 || warned[0].Data["client"] != "old-agent-1" || warned[0].Data["username"] != "old-agent" {
		t.Fatalf("v1 warnings: %d, first %v; want one naming old-agent-1", len(warned), warned)
	}
}

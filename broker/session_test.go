package broker_test

import (
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/acl"
)

// A session that outlives its connection (clean session off) keeps its
// identity: a QoS 1 request routed while the agent is away is queued for
// it (not refused for want of an identity) and delivered when it is back.
func TestPersistentSessionQueued(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pwp := e.addIdentity(t, "gw", acl.RolePlatform)
	persistent := func(o *paho.ClientOptions) { o.SetCleanSession(false) }

	agent := e.mustConnect(t, "agent1-p", "agent1", pwa, nil, persistent)
	mustSubscribe(t, agent, requestFilter)
	agent.Disconnect(50)
	eventually(t, "agent disconnected", func() bool { return e.Broker.ClientCount() == 0 })

	gw := e.mustConnect(t, "gw-1", "gw", pwp, nil)
	mustPublish(t, gw, ctxReq, 1, false, "while you were away")

	in := newInbox()
	e.mustConnect(t, "agent1-p", "agent1", pwa, in, persistent)
	in.expectNext(t, ctxReq, "while you were away")
}

package broker_test

import (
	"errors"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/toolbus/toolbus/acl"
)

// A refusal tells the client only whether its credentials were at fault:
// "bad user name or password" (0x04) for an unknown user and a wrong
// password alike, so that nobody can probe which identities exist; "not
// authorized" (0x05) when the password was right (a disabled identity) or
// does not matter (a reserved client ID).
func TestLoginRefused(t *testing.T) {
	e := newEnv(t)
	agentPW := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	offPW := e.addIdentity(t, "off", acl.RoleExpertAgent)
	if err := e.Store.SetDisabled(testContext(t), "off", true); err != nil {
		t.Fatal(err)
	}

	bad, denied := packets.ErrorRefusedBadUsernameOrPassword, packets.ErrorRefusedNotAuthorised
	for _, tc := range []struct {
		name, clientID, username, password string
		want                               error
	}{
		{"anonymous", "anon-1", "", "", bad},
		{"unknown user", "ghost-1", "ghost", "pw-ghost", bad},
		{"wrong password", "agent1-a", "agent1", "not-" + agentPW, bad},
		{"no password", "agent1-b", "agent1", "", bad},
		{"disabled identity, right password", "off-1", "off", offPW, denied},
		{"disabled identity, wrong password", "off-2", "off", "not-" + offPW, bad},
		{"username with a bad character", "x-1", "agent1/#", agentPW, bad},
		{"inline client ID", "inline", "agent1", agentPW, denied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.connect(t, tc.clientID, tc.username, tc.password, nil)
			if err == nil {
				c.Disconnect(0)
				t.Fatal("connected; want refused")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("connect error = %v, want %v", err, tc.want)
			}
		})
	}
	if n := e.Broker.ClientCount(); n != 0 {
		t.Errorf("ClientCount = %d after refused logins, want 0", n)
	}
}

func TestLoginAccepted(t *testing.T) {
	e := newEnv(t)
	pw := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	e.mustConnect(t, "agent1-a", "agent1", pw, nil)
	// The second login of the same identity takes the store's cache path.
	e.mustConnect(t, "agent1-b", "agent1", pw, nil)
	eventually(t, "two clients counted", func() bool { return e.Broker.ClientCount() == 2 })
}

// A client ID names a session: only the identity holding it may take it over.
func TestClientIDTakeover(t *testing.T) {
	e := newEnv(t)
	pw1 := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	pw2 := e.addIdentity(t, "agent2", acl.RoleExpertAgent)
	first := e.mustConnect(t, "shared-id", "agent1", pw1, nil)

	if c, err := e.connect(t, "shared-id", "agent2", pw2, nil); err == nil {
		c.Disconnect(0)
		t.Fatal("another identity took over the client ID")
	}
	if !first.IsConnectionOpen() {
		t.Fatal("the owner was disconnected by a refused takeover")
	}

	e.mustConnect(t, "shared-id", "agent1", pw1, nil)
	eventually(t, "old connection taken over", func() bool { return !first.IsConnectionOpen() })
}

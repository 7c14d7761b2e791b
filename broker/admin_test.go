package broker_test

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
)

// TestClientsAndDisconnect: Clients lists the connected clients (not the
// inline one) with their login time; Disconnect cuts every client of one
// username and no other.
func TestClientsAndDisconnect(t *testing.T) {
	e := newEnv(t)
	pw := e.addIdentity(t, "dev1", acl.RoleClient)
	other := e.addIdentity(t, "dev2", acl.RoleClient)
	before := time.Now()
	a := e.mustConnect(t, "dev1-a", "dev1", pw, nil)
	b := e.mustConnect(t, "dev1-b", "dev1", pw, nil)
	c := e.mustConnect(t, "dev2-a", "dev2", other, nil)
	// The inline client is subscribed too; it must not be listed.
	if err := e.Broker.Bus().Subscribe(testContext(t), "x/y", func(string, []byte) {}); err != nil {
		t.Fatal(err)
	}

	cls := e.Broker.Clients()
	if len(cls) != 3 {
		t.Fatalf("clients = %+v, want 3", cls)
	}
	for i, want := range []struct{ id, user string }{{"dev1-a", "dev1"}, {"dev1-b", "dev1"}, {"dev2-a", "dev2"}} {
		got := cls[i]
		if got.ClientID != want.id || got.Username != want.user || got.Listener != "tcp" || got.ProtocolVersion != 4 ||
			!got.CleanSession || got.Remote == "" || got.ConnectedSince.Before(before.Add(-time.Second)) {
			t.Errorf("client %d = %+v, want %s of %s, connected since the test began", i, got, want.id, want.user)
		}
	}

	if n := e.Broker.Disconnect("dev1"); n != 2 {
		t.Fatalf("Disconnect(dev1) = %d, want 2", n)
	}
	testenv.Poll(t, 10*time.Second, "dev1's clients disconnected", func() bool {
		return !a.IsConnectionOpen() && !b.IsConnectionOpen()
	})
	if !c.IsConnectionOpen() {
		t.Fatal("dev2 was disconnected too")
	}
	if cls := e.Broker.Clients(); len(cls) != 1 || cls[0].ClientID != "dev2-a" {
		t.Fatalf("clients after Disconnect = %+v", cls)
	}
	if n := e.Broker.Disconnect("nobody"); n != 0 {
		t.Fatalf("Disconnect(nobody) = %d", n)
	}
}

package broker_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
)

// CloseTCP drops the TCP clients (their Wills fire) and refuses new ones
// while the broker and its inline bus keep running; ReopenTCP listens on the
// same port again.
func TestCloseAndReopenTCP(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	got := make(chan string, 16)
	bus := e.Broker.Bus()
	if err := bus.Subscribe(testContext(t), presenceFilter, func(_ string, p []byte) { got <- string(p) }); err != nil {
		t.Fatal(err)
	}
	c := e.mustConnect(t, "agent1-a", "agent1", pwa, nil, withWill(presence("agent1", "agent1-a"), "offline", true))
	mustPublish(t, c, presence("agent1", "agent1-a"), 1, true, "online")
	expectPresence(t, got, "online")
	addr := e.Broker.Addr().String()

	for range 2 { // closing twice is a no-op
		if err := e.Broker.CloseTCP(); err != nil {
			t.Fatal(err)
		}
	}
	expectPresence(t, got, "offline")
	eventually(t, "the client gone", func() bool { return e.Broker.ClientCount() == 0 })
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("the closed listener accepted a connection")
	}
	if err := e.Broker.Ready(testContext(t)); err == nil {
		t.Error("Ready with the TCP listener closed")
	}
	if err := bus.Publish(testContext(t), ctxReq, []byte("inline still works")); err != nil {
		t.Errorf("inline publish with the listener closed: %v", err)
	}

	for range 2 { // reopening twice is a no-op
		if err := e.Broker.ReopenTCP(testContext(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.Broker.Addr().String(); got != addr {
		t.Errorf("reopened on %s, want %s", got, addr)
	}
	if err := e.Broker.Ready(testContext(t)); err != nil {
		t.Errorf("Ready after reopen: %v", err)
	}
	c = e.mustConnect(t, "agent1-a", "agent1", pwa, nil, withWill(presence("agent1", "agent1-a"), "offline", true))
	mustPublish(t, c, presence("agent1", "agent1-a"), 1, true, "online again")
	expectPresence(t, got, "online again")
}

// CloseTCP and ReopenTCP refuse a broker that is not running, or that has
// no TCP listener.
func TestCloseReopenTCPRefused(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.Addr = ""; o.WSAddr = "127.0.0.1:0" })
	if err := e.Broker.CloseTCP(); !errors.Is(err, broker.ErrNoTCPListener) {
		t.Errorf("CloseTCP without a TCP listener: %v", err)
	}
	if err := e.Broker.ReopenTCP(context.Background()); !errors.Is(err, broker.ErrNoTCPListener) {
		t.Errorf("ReopenTCP without a TCP listener: %v", err)
	}
	if err := e.Broker.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Broker.ReopenTCP(context.Background()); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("ReopenTCP after Close: %v", err)
	}
}

package broker_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/internal/testenv"
)

// The TLS and WebSocket listeners serve the same broker, bound by Start.
func TestTLSAndWebSocketListeners(t *testing.T) {
	cert, pool := testenv.SelfSignedCert(t)
	e := newEnv(t, func(o *broker.Options) {
		o.TLSAddr = "127.0.0.1:0"
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		o.WSAddr = "127.0.0.1:0"
	})
	if e.Broker.TLSAddr() == nil || e.Broker.WSAddr() == nil {
		t.Fatalf("TLSAddr %v WSAddr %v after Start", e.Broker.TLSAddr(), e.Broker.WSAddr())
	}
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)

	for _, tc := range []struct {
		name string
		url  string
		opt  clientOption
	}{
		{"tls", "ssl://" + e.Broker.TLSAddr().String(), func(o *paho.ClientOptions) {
			o.SetTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		}},
		{"websocket", "ws://" + e.Broker.WSAddr().String() + "/mqtt", func(*paho.ClientOptions) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := e.mustConnect(t, "agent1-"+tc.name, "agent1", pwa, nil, withBroker(tc.url), tc.opt)
			startResponder(t, agent, requestFilter, 1)
			res := make(chan inlineMsg, 4)
			ctx := testContext(t)
			levels := "plat1/user1/" + tc.name + "/_/_"
			if err := e.Broker.Bus().Subscribe(ctx, mcpPrefix+"+/+/"+levels+"/res", chanHandler(res)); err != nil {
				t.Fatal(err)
			}
			// A large payload spans several WebSocket frames and TLS records.
			big := make([]byte, 200<<10)
			for i := range big {
				big[i] = 'a' + byte(i%26)
			}
			if err := e.Broker.Bus().Publish(ctx, requestTopic("agent1", "_", levels), big); err != nil {
				t.Fatal(err)
			}
			if m := nextInline(t, res); m.topic != replyTopic("agent1", "agent1-"+tc.name, levels) || m.payload != "re:"+string(big) {
				t.Fatalf("response of %d bytes, want %d", len(m.payload), len(big)+3)
			}
		})
	}
}

// A connection that never sends CONNECT is closed after ConnectTimeout.
func TestConnectTimeout(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) { o.ConnectTimeout = 200 * time.Millisecond })
	c, err := net.DialTimeout("tcp", e.Broker.Addr().String(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte from a broker that got no CONNECT")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the broker kept a silent connection open")
	}
}

// MaxClients bounds the logged-in clients (CONNACK refusal) and, with some
// room for logins in progress, the open connections of a listener.
func TestMaxClients(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.MaxClients = 1
		o.ConnectTimeout = time.Minute // so that only the limit can close a silent connection
	})
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	e.mustConnect(t, "agent1-a", "agent1", pwa, nil)
	if c, err := e.connect(t, "agent1-b", "agent1", pwa, nil); err == nil {
		c.Disconnect(0)
		t.Fatal("second client logged in with MaxClients 1")
	} else if !errors.Is(err, packets.ErrorRefusedServerUnavailable) {
		t.Fatalf("error = %v, want %v", err, packets.ErrorRefusedServerUnavailable)
	}

	// One connection is logged in; 64 more may wait for their login.
	for range 64 {
		c, err := net.DialTimeout("tcp", e.Broker.Addr().String(), waitFor)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	over, err := net.DialTimeout("tcp", e.Broker.Addr().String(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatal("read a byte")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection over the limit was kept open")
	}
}

// Connections that never log in have a budget of their own, in all and per
// source address, so that a flood of them cannot lock out clients that log
// in; logged-in clients do not count against it.
func TestPreAuthBudget(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.ConnectTimeout = time.Minute // so that only the budget can close a silent connection
		o.MaxPreAuthConns, o.MaxPreAuthPerSource = 6, 4
	})
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	for i := range 5 { // logged in: not waiting
		e.mustConnect(t, fmt.Sprintf("agent1-%d", i), "agent1", pwa, nil)
	}
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: waitFor}
		c, err := d.Dial("tcp", e.Broker.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var held []net.Conn
	for i := range 6 { // one source: 4 wait, 2 are closed
		c := dial("127.0.0.2")
		if open := stillOpen(t, c); open != (i < 4) {
			t.Fatalf("silent connection %d from one source open = %v", i, open)
		}
		if i < 4 {
			held = append(held, c)
		}
	}
	if c, err := e.connect(t, "agent1-x", "agent1", pwa, nil); err != nil {
		t.Fatalf("a login while one source holds its budget: %v", err)
	} else {
		c.Disconnect(0)
	}
	for i := range 3 { // another source: 2 more wait, then the budget is spent
		if open := stillOpen(t, dial("127.0.0.3")); open != (i < 2) {
			t.Fatalf("silent connection %d from a second source open = %v", i, open)
		}
	}
	for _, c := range held { // they go: the budget is free again
		_ = c.Close()
	}
	testenv.Poll(t, waitFor, "a login once the silent connections are gone", func() bool {
		c, err := e.connect(t, "agent1-y", "agent1", pwa, nil)
		if err == nil {
			c.Disconnect(0)
		}
		return err == nil
	})
}

// stillOpen reports whether the broker keeps c open: a read that times out
// (nothing to read) rather than ending.
func stillOpen(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

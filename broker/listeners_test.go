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
// in; logged-in clients do not count against it. When it is spent, the
// connection that has waited longest goes: a few addresses holding their
// sockets open (nine of them held the whole default budget) cannot keep a
// client from logging in.
func TestPreAuthBudget(t *testing.T) {
	const sources, perSource = 5, 4
	e := newEnv(t, func(o *broker.Options) {
		o.ConnectTimeout = time.Minute // so that only the budget can close a silent connection
		o.MaxPreAuthConns, o.MaxPreAuthPerSource = (sources-1)*perSource, perSource
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
	// waiting waits until the budget counts want connections from each
	// source: those still open, the broker's way.
	waiting := func(t *testing.T, want map[string]int) {
		t.Helper()
		eventually(t, fmt.Sprintf("waiting connections %v", want), func() bool {
			for src, n := range want {
				if e.Broker.PreAuthWaiting(src) != n {
					return false
				}
			}
			return true
		})
	}
	// Four sources fill the budget in all, each its own.
	held := make([][]net.Conn, sources)
	for s := 1; s < sources; s++ {
		for range perSource {
			held[s] = append(held[s], dial(fmt.Sprintf("127.0.0.%d", s+1)))
		}
	}
	waiting(t, map[string]int{"": (sources - 1) * perSource}) // none closed while the budget had room

	t.Run("a login while the budget is spent", func(t *testing.T) {
		if c, err := e.connect(t, "agent1-x", "agent1", pwa, nil); err != nil {
			t.Fatalf("a login while silent sockets hold the budget: %v", err)
		} else {
			c.Disconnect(0)
		}
		closed(t, held[1][0]) // the connection that waited longest
		waiting(t, map[string]int{"": (sources-1)*perSource - 1, "127.0.0.2": perSource - 1})
		held[1] = held[1][1:]
	})

	t.Run("one source over its share", func(t *testing.T) {
		dial("127.0.0.3") // source 2's fifth
		closed(t, held[2][0])
		// Its newest is open (its oldest, not it, made room) and no other
		// source's connection closed for it.
		waiting(t, map[string]int{"": (sources-1)*perSource - 1, "127.0.0.3": perSource, "127.0.0.4": perSource})
	})
}

// closed fails unless the broker closes c: a read ends (rather than
// timing out).
func closed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil:
		t.Fatalf("connection from %s: the broker wrote before CONNECT", c.LocalAddr())
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection from %s still open after %v", c.LocalAddr(), waitFor)
	}
}

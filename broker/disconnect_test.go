package broker_test

import (
	"bytes"
	"sync"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/toolbus/toolbus/acl"
)

// holdPing holds the read loop of one client once it has handled its
// PINGREQ (and answered PINGRESP) until released, so that the broker cuts
// the client off between two of its packets.
type holdPing struct {
	mqtt.HookBase
	clientID string
	held     chan struct{} // closed once the PINGREQ is held
	release  chan struct{}
}

func (h *holdPing) ID() string { return "test-hold-ping" }

func (h *holdPing) Provides(b byte) bool { return b == mqtt.OnPacketProcessed }

func (h *holdPing) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, _ error) {
	if cl.ID == h.clientID && pk.FixedHeader.Type == packets.Pingreq {
		close(h.held)
		<-h.release
	}
}

// When the broker cuts a client off (its identity is disconnected, or its
// listener closes), the client hears DISCONNECT with the reason and its
// Will is published, even when its read loop is between two packets at
// that moment: mochi's DisconnectClient dropped the Will then, and an agent
// cut off stayed online in its retained presence.
func TestServerDisconnectPublishesWill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason packets.Code
		cut    func(t *testing.T, e *testEnv) (wait func())
	}{
		{"identity disconnected", packets.ErrNotAuthorized, func(t *testing.T, e *testEnv) func() {
			if n := e.Broker.Disconnect("agent1"); n != 1 {
				t.Errorf("Disconnect(agent1) = %d, want 1", n)
			}
			return func() {}
		}},
		{"listener closed", packets.ErrServerShuttingDown, func(t *testing.T, e *testEnv) func() {
			// CloseTCP waits for the held read loop: it runs aside.
			done := make(chan error, 1)
			go func() { done <- e.Broker.CloseTCP() }()
			return func() {
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("CloseTCP: %v", err)
					}
				case <-timeAfter():
					t.Error("CloseTCP did not return")
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
			got := make(chan string, 16)
			if err := e.Broker.Bus().Subscribe(testContext(t), presenceFilter, func(_ string, p []byte) { got <- string(p) }); err != nil {
				t.Fatal(err)
			}
			hold := &holdPing{clientID: "agent1-a", held: make(chan struct{}), release: make(chan struct{})}
			release := sync.OnceFunc(func() { close(hold.release) })
			t.Cleanup(release) // before the broker's Close, which waits for the loop
			if err := e.Broker.AddHook(hold); err != nil {
				t.Fatal(err)
			}

			c := dialRaw(t, e.Broker.Addr().String())
			if ack := c.connectWill("agent1-a", "agent1", pwa, presence("agent1", "agent1-a"), "offline"); ack.ReasonCode != 0 {
				t.Fatalf("CONNACK %#x", ack.ReasonCode)
			}
			c.send(packets.Packet{
				FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
				TopicName:   presence("agent1", "agent1-a"),
				PacketID:    1,
				Payload:     []byte("online"),
			})
			c.mustRecv(packets.Puback)
			expectPresence(t, got, "online")

			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			select {
			case <-hold.held:
			case <-timeAfter():
				t.Fatal("the PINGREQ was not held")
			}
			c.mustRecv(packets.Pingresp)
			wait := tc.cut(t, e)
			if pk := c.mustRecv(packets.Disconnect); pk.ReasonCode != tc.reason.Code {
				t.Errorf("DISCONNECT reason %#x, want %#x", pk.ReasonCode, tc.reason.Code)
			}
			if pk, err := c.recv(); err == nil {
				t.Fatalf("after DISCONNECT: %s, want the connection closed", packets.PacketNames[pk.FixedHeader.Type])
			}
			release()
			expectPresence(t, got, "offline")
			wait()
			eventually(t, "the client gone", func() bool { return e.Broker.ClientCount() == 0 })
		})
	}
}

// A client that has stopped reading, with no deadline of its own (MQTT
// 3.1.1, keepalive 0), does not hold up Disconnect: the broker gives its
// DISCONNECT a bounded time, then closes the connection, and the Will is
// published all the same.
func TestDisconnectStalledClient(t *testing.T) {
	e := newEnv(t)
	pwa := e.addIdentity(t, "agent1", acl.RoleExpertAgent)
	got := make(chan string, 16)
	if err := e.Broker.Bus().Subscribe(testContext(t), presenceFilter, func(_ string, p []byte) { got <- string(p) }); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, e.Broker.Addr().String())
	c.version = 4
	if ack := c.connectWith("agent1-a", "agent1", pwa, 0, func(p *packets.ConnectParams) {
		p.WillFlag, p.WillTopic, p.WillPayload, p.WillQos, p.WillRetain = true, presence("agent1", "agent1-a"), []byte("offline"), 1, true
	}); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	c.send(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: requestFilter}},
	})
	c.mustRecv(packets.Suback)

	// The client reads no more: 20 MiB of requests fill both sockets'
	// buffers, and mochi's write to it blocks.
	big := bytes.Repeat([]byte("x"), 100<<10)
	for range 200 {
		if err := e.Broker.Bus().Publish(testContext(t), ctxReq, big); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan int, 1)
	go func() { done <- e.Broker.Disconnect("agent1") }()
	select {
	case n := <-done:
		if n != 1 {
			t.Errorf("Disconnect = %d, want 1", n)
		}
	case <-timeAfter():
		_ = c.conn.Close() // lets the broker's cleanup finish
		t.Fatalf("Disconnect still blocked on the stalled client after %s", waitFor)
	}
	expectPresence(t, got, "offline")
}

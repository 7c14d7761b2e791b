package expertagent_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/toolbus/toolbus/expertagent"
)

// scriptedBroker is an MQTT 3.1.1 broker on a real socket that answers
// each SUBSCRIBE with the next code of its script (then 0x01), the way mochi
// answers when the packet ID collides with one of its own (0x91). It serves
// one connection at a time and takes the next when the client reconnects.
type scriptedBroker struct {
	url        string
	subscribes atomic.Int32 // SUBSCRIBE packets received

	mu    sync.Mutex
	codes []byte
	conn  net.Conn // the connection being served
}

func newScriptedBroker(t *testing.T, codes []byte) *scriptedBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &scriptedBroker{url: "tcp://" + ln.Addr().String(), codes: codes}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = ln.Close()
		b.drop()
		<-done
	})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conn = conn
			b.mu.Unlock()
			b.serve(conn)
		}
	}()
	return b
}

// nextCode pops the script.
func (b *scriptedBroker) nextCode() byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.codes) == 0 {
		return 0x01
	}
	code := b.codes[0]
	b.codes = b.codes[1:]
	return code
}

// drop closes the connection being served: the client sees it lost.
func (b *scriptedBroker) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.Close()
	}
}

func (b *scriptedBroker) serve(conn net.Conn) {
	defer conn.Close()
	for {
		p, err := packets.ReadPacket(conn)
		if err != nil {
			return
		}
		switch p := p.(type) {
		case *packets.ConnectPacket:
			_ = packets.NewControlPacket(packets.Connack).Write(conn)
		case *packets.SubscribePacket:
			b.subscribes.Add(1)
			ack := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			ack.MessageID = p.MessageID
			for range p.Topics {
				ack.ReturnCodes = append(ack.ReturnCodes, b.nextCode())
			}
			_ = ack.Write(conn)
		case *packets.PingreqPacket:
			_ = packets.NewControlPacket(packets.Pingresp).Write(conn)
		case *packets.DisconnectPacket:
			return
		}
	}
}

// TestPahoBusSubackCodes: any SUBACK code from 0x80 up is a refusal (mochi
// sends MQTT 5 codes to 3.1.1 clients), and "packet identifier in use"
// (0x91) is tried again with another SUBSCRIBE.
func TestPahoBusSubackCodes(t *testing.T) {
	tests := []struct {
		name    string
		codes   []byte
		wantErr string
	}{
		{"granted", []byte{0x01}, ""},
		{"id in use, then granted", []byte{0x91, 0x91, 0x01}, ""},
		{"refused", []byte{0x80}, "SUBACK 0x80"},
		{"not authorized (MQTT 5 code)", []byte{0x87}, "SUBACK 0x87"},
		{"id in use every time", []byte{0x91, 0x91, 0x91, 0x91, 0x91, 0x91}, "SUBACK 0x91"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			bus, err := expertagent.DialPahoBus(ctx, expertagent.PahoBusOptions{BrokerURL: newScriptedBroker(t, tc.codes).url, Username: "u", Password: "p"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bus.Close() })
			err = bus.Subscribe(ctx, "ff/v1/mcp/p/u/s/_/_/res", func(string, []byte) {})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Subscribe: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Subscribe: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// TestPahoBusResubscribeSharedInUse: after a reconnect, a shared
// subscription ("$share/<group>/...") answered "packet identifier in use"
// (0x91) is subscribed again. paho keys SubscribeMultiple's results by the
// whole filter, prefix included: looked up without it, the refusal read as
// granted and the route stayed without a subscription.
func TestPahoBusResubscribeSharedInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first SUBSCRIBE is granted, the first one after the reconnect is
	// refused as in use, the next granted.
	broker := newScriptedBroker(t, []byte{0x01, 0x91, 0x01})
	bus, err := expertagent.DialPahoBus(ctx, expertagent.PahoBusOptions{BrokerURL: broker.url, Username: "u", Password: "p",
		MaxReconnectInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	if err := bus.Subscribe(ctx, "$share/agents/ff/v1/mcp/+/+/+/+/+/req", func(string, []byte) {}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	broker.drop()
	for broker.subscribes.Load() < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d SUBSCRIBEs, want 3: the refused one after the reconnect was not sent again", broker.subscribes.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

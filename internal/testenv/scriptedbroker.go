package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// ScriptedBroker is an MQTT 3.1.1 broker on a real socket that answers
// each SUBSCRIBE with the next code of its script (then 0x01), the way
// mochi answers when the packet ID collides with one of its own (0x91), or
// not at all (NoSuback). It serves one connection at a time and takes the
// next when the client reconnects.
type ScriptedBroker struct {
	URL        string
	Subscribes atomic.Int32 // SUBSCRIBE packets received

	mu    sync.Mutex
	codes []byte
	conn  net.Conn // the connection being served
}

// NoSuback in a ScriptedBroker's script leaves the SUBSCRIBE whose filter
// draws it without any SUBACK, as a broker that lost it would.
const NoSuback byte = 0xFF

// NewScriptedBroker starts a ScriptedBroker on 127.0.0.1 that answers SUBSCRIBEs with codes; the test's cleanup stops it.
func NewScriptedBroker(t *testing.T, codes []byte) *ScriptedBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &ScriptedBroker{URL: "tcp://" + ln.Addr().String(), codes: codes}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = ln.Close()
		b.Drop()
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
func (b *ScriptedBroker) nextCode() byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.codes) == 0 {
		return 0x01
	}
	code := b.codes[0]
	b.codes = b.codes[1:]
	return code
}

// Drop closes the connection being served: the client sees it lost.
func (b *ScriptedBroker) Drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.Close()
	}
}

func (b *ScriptedBroker) serve(conn net.Conn) {
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
			b.Subscribes.Add(1)
			ack := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
			ack.MessageID = p.MessageID
			answer := true
			for range p.Topics {
				code := b.nextCode()
				answer = answer && code != NoSuback
				ack.ReturnCodes = append(ack.ReturnCodes, code)
			}
			if answer {
				_ = ack.Write(conn)
			}
		case *packets.PingreqPacket:
			_ = packets.NewControlPacket(packets.Pingresp).Write(conn)
		case *packets.DisconnectPacket:
			return
		}
	}
}

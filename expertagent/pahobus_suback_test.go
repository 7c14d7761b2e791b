package expertagent_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/toolbus/toolbus/expertagent"
)

// scriptedBroker accepts one MQTT 3.1.1 client on a real socket and answers
// each SUBSCRIBE with the next code of codes (then 0x01), the way mochi
// answers when the packet ID collides with one of its own (0x91).
func scriptedBroker(t *testing.T, codes []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
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
				ack := packets.NewControlPacket(packets.Suback).(*packets.SubackPacket)
				ack.MessageID = p.MessageID
				code := byte(1)
				if len(codes) > 0 {
					code, codes = codes[0], codes[1:]
				}
				ack.ReturnCodes = []byte{code}
				_ = ack.Write(conn)
			case *packets.PingreqPacket:
				_ = packets.NewControlPacket(packets.Pingresp).Write(conn)
			case *packets.DisconnectPacket:
				return
			}
		}
	}()
	return "tcp://" + ln.Addr().String()
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
			bus, err := expertagent.DialPahoBus(ctx, expertagent.PahoBusOptions{BrokerURL: scriptedBroker(t, tc.codes), Username: "u", Password: "p"})
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

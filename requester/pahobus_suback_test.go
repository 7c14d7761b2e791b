package requester_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
)

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
			bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: testenv.NewScriptedBroker(t, tc.codes).URL, Username: "u", Password: "p"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bus.Close() })
			c := contract.Context{PlatformID: "p", UserID: "u", SessionID: "s", EntityType: contract.NoEntity, EntityID: contract.NoEntity}
			err = bus.Subscribe(ctx, c.ReplyFilter(), func(string, []byte) {})
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
	broker := testenv.NewScriptedBroker(t, []byte{0x01, 0x91, 0x01})
	bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: broker.URL, Username: "u", Password: "p",
		MaxReconnectInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	if err := bus.Subscribe(ctx, contract.SharedRequestFilter("agent1"), func(string, []byte) {}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	broker.Drop()
	for broker.Subscribes.Load() < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d SUBSCRIBEs, want 3: the refused one after the reconnect was not sent again", broker.Subscribes.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

package requester_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
)

// TestPahoBusResubscribeRefused: a context's reply filter the broker
// refuses when the bus subscribes it again after a reconnect is reported
// to OnRefused, and its route is forgotten: subscribing it again sends a
// new SUBSCRIBE.
func TestPahoBusResubscribeRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Granted, refused after the reconnect, granted again.
	broker := testenv.NewScriptedBroker(t, []byte{0x00, 0x80, 0x00})
	bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: broker.URL, Username: "u", Password: "p",
		MaxReconnectInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	refused := make(chan string, 4)
	stop := bus.OnRefused(func(filter string, _ error) { refused <- filter })
	defer stop()
	filter := rqCtx(1).ReplyFilter()
	if err := bus.Subscribe(ctx, filter, func(string, []byte) {}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	broker.Drop()
	select {
	case got := <-refused:
		if got != filter {
			t.Fatalf("refused %q, want %q", got, filter)
		}
	case <-ctx.Done():
		t.Fatal("the refusal after the reconnect was not reported")
	}
	if err := bus.Subscribe(ctx, filter, func(string, []byte) {}); err != nil {
		t.Fatalf("Subscribe after the refusal: %v", err)
	}
	if n := broker.Subscribes.Load(); n != 3 {
		t.Fatalf("%d SUBSCRIBEs, want 3 (the first, the refused one, the new one)", n)
	}
}

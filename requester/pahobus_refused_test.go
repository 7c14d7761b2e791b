package requester_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
)

// TestPahoBusResubscribeRefused: a context's reply filter the broker
// refuses when the bus subscribes it again after a reconnect, or never
// acknowledges within ResubscribeTimeout, is reported to OnRefused and its
// route is forgotten: subscribing it again sends a new SUBSCRIBE instead of
// waiting on a subscription that may not exist.
func TestPahoBusResubscribeRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second byte // the broker's answer to the SUBSCRIBE after the reconnect
		want   string
	}{
		{"refused", 0x80, "SUBACK 0x80"},
		{"unanswered", testenv.NoSuback, "no SUBACK within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			broker := testenv.NewScriptedBroker(t, []byte{0x00, tc.second, 0x00})
			bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: broker.URL, Username: "u", Password: "p",
				MaxReconnectInterval: 100 * time.Millisecond, ResubscribeTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bus.Close() })
			filter := rqCtx(1).ReplyFilter()
			refused := make(chan error, 4)
			stop := bus.OnRefused(func(f string, err error) {
				if f == filter {
					refused <- err
				}
			})
			defer stop()
			if err := bus.Subscribe(ctx, filter, func(string, []byte) {}); err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			broker.Drop()
			select {
			case err := <-refused:
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("refusal %v, want one saying %q", err, tc.want)
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
		})
	}
}

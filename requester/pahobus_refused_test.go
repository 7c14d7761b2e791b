package requester_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/requester"
)

// TestPahoBusResubscribeRefused: a context's reply filter the broker
// refuses when the bus subscribes it again after a reconnect, or never
// acknowledges within ResubscribeTimeout, is reported to OnRefused and its
// route is forgotten: subscribing it again sends a new SUBSCRIBE instead of
// waiting on a subscription that may not exist. A resubscription cut short
// by the next loss is no refusal: the connection after it subscribes the
// filter again.
func TestPahoBusResubscribeRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  []byte // the broker's answers, from the first SUBSCRIBE on
		timeout time.Duration
		// dropAgain drops the connection while the resubscription waits
		// for the SUBACK the script withholds.
		dropAgain bool
		want      string
	}{
		{"refused", []byte{0x00, 0x80, 0x00}, 10 * time.Second, false, "SUBACK 0x80"},
		{"unanswered", []byte{0x00, testenv.NoSuback, 0x00}, 100 * time.Millisecond, false, "no SUBACK within"},
		{"lost while waiting", []byte{0x00, testenv.NoSuback, 0x80, 0x00}, time.Minute, true, "SUBACK 0x80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			broker := testenv.NewScriptedBroker(t, tc.script)
			bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: broker.URL, Username: "u", Password: "p",
				MaxReconnectInterval: 100 * time.Millisecond, ResubscribeTimeout: tc.timeout})
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
			if tc.dropAgain {
				rqPoll(t, "the resubscription", func() bool { return broker.Subscribes.Load() == 2 })
				broker.Drop()
			}
			// The first refusal reported must be the broker's.
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
			if n, want := broker.Subscribes.Load(), int32(len(tc.script)); n != want {
				t.Fatalf("%d SUBSCRIBEs, want %d (one per answer of the script)", n, want)
			}
		})
	}
}

// TestPahoBusAllRepliesRefused: with AllReplies, the one filter every
// reply comes through refused after a reconnect leaves the bus deaf:
// Publish fails with ErrLinkLost (no request goes out whose reply could
// not come back) until a retry or the next connection subscribes it.
func TestPahoBusAllRepliesRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// resubscribeTimeout short: the unanswered retry is given up and
		// the next one is granted; long: the bus stays deaf until the
		// test drops the connection and the next one is granted.
		resubscribeTimeout time.Duration
	}{
		{"retry granted", time.Second},
		{"next connection granted", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Granted, refused after the reconnect, the first retry
			// unanswered, then granted.
			broker := testenv.NewScriptedBroker(t, []byte{0x00, 0x80, testenv.NoSuback, 0x00})
			all := contract.GatewayReplyFilter(rqCtx(1).PlatformID)
			bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{BrokerURL: broker.URL, Username: "u", Password: "p",
				AllReplies: all, MaxReconnectInterval: 100 * time.Millisecond, ResubscribeTimeout: tc.resubscribeTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bus.Close() })
			refused := make(chan struct{}, 4)
			stop := bus.OnRefused(func(f string, _ error) {
				if f == all {
					refused <- struct{}{}
				}
			})
			defer stop()
			broker.Drop()
			select {
			case <-refused:
			case <-ctx.Done():
				t.Fatal("the refusal of AllReplies was not reported")
			}
			publish := func() error {
				return bus.Publish(ctx, rqCtx(1).RequestTopic("agent1", contract.AnyInstance), []byte("{}"))
			}
			if tc.resubscribeTimeout == time.Minute {
				// Deaf for as long as the retry waits for its SUBACK.
				rqPoll(t, "the retry's SUBSCRIBE", func() bool { return broker.Subscribes.Load() == 3 })
				if err := publish(); !errors.Is(err, requester.ErrLinkLost) || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("Publish while deaf: %v, want ErrLinkLost naming the refusal", err)
				}
				broker.Drop()
			}
			rqPoll(t, "Publish to go through", func() bool { return publish() == nil })
			if n := broker.Subscribes.Load(); n != 4 {
				t.Fatalf("%d SUBSCRIBEs, want 4 (granted, refused, unanswered, granted)", n)
			}
		})
	}
}

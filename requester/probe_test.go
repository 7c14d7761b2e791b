package requester_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/requester"
)

func TestProbeResultHoldsBackWrites(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		trip, ack time.Duration
		want      bool
	}{
		{"loopback, nodelay", 200 * time.Microsecond, 90 * time.Microsecond, false},
		{"loopback, Nagle", 44 * ms, 90 * time.Microsecond, true},
		{"far broker, nodelay", 62 * ms, 30 * ms, false},
		// 30 ms away, the stall is what of the delayed ACK outlasts the trip
		// back: 1.5 round trips + 40 ms instead of 2 round trips.
		{"far broker, Nagle", 85 * ms, 30 * ms, true},
		{"noisy loopback", 8 * ms, 2 * ms, false},
		{"BSD delayed ACK", 201 * ms, ms, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := requester.ProbeResult{RoundTrip: tc.trip, AckRoundTrip: tc.ack, Trips: 5}
			if got := r.HoldsBackWrites(); got != tc.want {
				t.Errorf("HoldsBackWrites(%v, ack %v) = %v, want %v", tc.trip, tc.ack, got, tc.want)
			}
		})
	}
}

// The probe's topics are the platform identity's own (acl.Policy): two
// connections of one identity reach each other there, on the real broker.
func TestProbeBroker(t *testing.T) {
	e := rqStartBroker(t)
	a, b := e.pahoBus(t, "probe-a"), e.pahoBus(t, "probe-b")
	ping, pong := acl.ProbeTopic(e.PlatformUser, "t1-ping"), acl.ProbeTopic(e.PlatformUser, "t1-pong")

	got, err := requester.ProbeBroker(rqContext(t), a, b, ping, pong, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got.Trips != 5 || got.AckRoundTrip <= 0 || got.RoundTrip < got.AckRoundTrip {
		t.Errorf("ProbeBroker = %+v: want 5 trips, each longer than its acknowledgement", got)
	}

}

func TestProbeBrokerErrors(t *testing.T) {
	e := rqStartBroker(t)
	a, b := e.pahoBus(t, "probe-a"), e.pahoBus(t, "probe-b")
	own := acl.ProbeTopic(e.PlatformUser, "")

	t.Run("no trips", func(t *testing.T) {
		if _, err := requester.ProbeBroker(rqContext(t), a, b, own+"p", own+"q", 0); err == nil {
			t.Error("no error")
		}
	})
	t.Run("refused topic", func(t *testing.T) {
		// Another identity's probe topic: the broker refuses the subscription.
		_, err := requester.ProbeBroker(rqContext(t), a, b, acl.ProbeTopic(e.AgentUser, "p"), own+"q", 3)
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("err = %v, want a refused subscription", err)
		}
	})
	t.Run("no echo in time", func(t *testing.T) {
		// b's echoes go nowhere, as from a stuck peer: only the deadline ends it.
		ctx, cancel := context.WithTimeout(rqContext(t), 300*time.Millisecond)
		defer cancel()
		_, err := requester.ProbeBroker(ctx, a, mutedBus{b}, own+"p", own+"q", 3)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
	})
}

// mutedBus is a Bus whose publishes are dropped.
type mutedBus struct{ requester.Bus }

func (mutedBus) Publish(context.Context, string, []byte) error { return nil }

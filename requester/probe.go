package requester

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// A probe's loop is two round trips to the broker. A broker that holds
// its small writes back adds what of the peer's delayed ACK (40 ms on
// Linux, up to 200 ms elsewhere) outlasts half a round trip; nothing else
// adds a fixed excess of that size, at any distance up to a few tens of
// milliseconds.
const (
	probeStallExcess = 20 * time.Millisecond
	probeAckTrips    = 2
)

// ProbeResult is what ProbeBroker measured: medians over its round trips.
type ProbeResult struct {
	// RoundTrip is a message's way from one connection through the broker
	// to the other, which sends it back through the broker: the shape of
	// a tool call's request and reply.
	RoundTrip time.Duration
	// AckRoundTrip is the broker's acknowledgement of a QoS 1 publish: one
	// packet each way, the network's round trip and the broker's turn.
	AckRoundTrip time.Duration
	// Trips is how many round trips the medians are of.
	Trips int
}

// HoldsBackWrites reports whether the broker holds its small writes back
// (Nagle's algorithm on its sockets, as Mosquitto leaves it without
// set_tcp_nodelay): a reply that follows the broker's own acknowledgement
// on the same connection then waits for the peer's delayed ACK, so the
// round trip exceeds two acknowledgement round trips by tens of
// milliseconds. A broker far away hides part of the stall, and one more
// than about 40 ms away all of it.
func (r ProbeResult) HoldsBackWrites() bool {
	return r.RoundTrip-probeAckTrips*r.AckRoundTrip >= probeStallExcess
}

// ProbeBroker measures n round trips through a broker between a and b, two
// connections to it: a publishes on ping (at QoS 1, waiting for the
// broker's acknowledgement), b, subscribed to ping, publishes each message
// again on pong, and a, subscribed to pong, receives it. This is the
// path of a tool call: the broker acknowledges the gateway's request, and
// the reply follows on the same connection a moment later. Both
// subscriptions are removed before it returns. ctx bounds the whole probe.
func ProbeBroker(ctx context.Context, a, b Bus, ping, pong string, n int) (ProbeResult, error) {
	if n <= 0 {
		return ProbeResult{}, errors.New("requester: probe: no round trips asked for")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Handlers only hand off (see MessageHandler): b's echo publishes from
	// a goroutine of its own, stopped by cancel and waited for.
	echo := make(chan []byte, n)
	back := make(chan []byte, n)
	if err := b.Subscribe(ctx, ping, func(_ string, p []byte) { offer(echo, p) }); err != nil {
		return ProbeResult{}, fmt.Errorf("requester: probe: subscribe %s: %w", ping, err)
	}
	defer unsubscribeSoon(ctx, b, ping)
	if err := a.Subscribe(ctx, pong, func(_ string, p []byte) { offer(back, p) }); err != nil {
		return ProbeResult{}, fmt.Errorf("requester: probe: subscribe %s: %w", pong, err)
	}
	defer unsubscribeSoon(ctx, a, pong)

	echoDone := make(chan struct{})
	var echoErr error // set before echoDone is closed
	go func() {
		defer close(echoDone)
		for {
			select {
			case p := <-echo:
				if echoErr = b.Publish(ctx, pong, p); echoErr != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() { cancel(); <-echoDone }()

	trips := make([]time.Duration, 0, n)
	acks := make([]time.Duration, 0, n)
	for i := range n {
		want := strconv.Itoa(i)
		start := time.Now()
		if err := a.Publish(ctx, ping, []byte(want)); err != nil {
			return ProbeResult{}, fmt.Errorf("requester: probe: publish: %w", err)
		}
		acks = append(acks, time.Since(start))
		for done := false; !done; {
			select {
			case p := <-back:
				// A message of an earlier trip (QoS 1 may deliver twice) is
				// not this one's answer.
				done = string(p) == want
			case <-echoDone:
				if echoErr == nil { // it stopped for ctx
					echoErr = ctx.Err()
				}
				return ProbeResult{}, fmt.Errorf("requester: probe: echo: %w", echoErr)
			case <-ctx.Done():
				return ProbeResult{}, fmt.Errorf("requester: probe: trip %d of %d: %w", i+1, n, ctx.Err())
			}
		}
		trips = append(trips, time.Since(start))
	}
	return ProbeResult{RoundTrip: median(trips), AckRoundTrip: median(acks), Trips: n}, nil
}

// offer hands p over without blocking: the channels hold every trip's
// message, so only duplicates beyond that are dropped.
func offer(ch chan []byte, p []byte) {
	select {
	case ch <- p:
	default:
	}
}

// unsubscribeSoon removes filter, bounded even when ctx is already done.
func unsubscribeSoon(ctx context.Context, bus Bus, filter string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = bus.Unsubscribe(ctx, filter)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

package expertagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/contract"
)

// agentSubackFailure is the SUBACK return code of a refused subscription
// (MQTT 3.1.1). Any code from it up is a refusal: some brokers (mochi)
// send MQTT 5 reason codes such as 0x91 to 3.1.1 clients too.
const agentSubackFailure = 0x80

// presencePayload is the retained presence message for status.
// An online status says since when (the latest announce, the same in the
// periodic repeats) and how often it is repeated.
func (a *Agent) presencePayload(status string) ([]byte, error) {
	p := contract.Presence{Status: status, ClientID: a.opts.ClientID, Name: a.opts.Name, Version: a.opts.Version,
		Since: time.Now().UnixMilli()}
	if status == contract.StatusOnline {
		if since := a.onlineSince.Load(); since != 0 {
			p.Since = since
		}
		if a.opts.PresenceEvery > 0 {
			p.Interval = a.opts.PresenceEvery.Milliseconds()
		}
		if conn := a.connection.Load(); conn != nil {
			p.Connection = *conn
		}
	}
	return json.Marshal(p)
}

func (a *Agent) publishPresence(ctx context.Context, status string) error {
	p, err := a.presencePayload(status)
	if err != nil {
		return fmt.Errorf("presence: %w", err)
	}
	if err := a.publish(ctx, contract.PresenceTopic(a.opts.Username, a.opts.ClientID), p, true); err != nil {
		return fmt.Errorf("publish %s presence: %w", status, err)
	}
	return nil
}

// subscribe subscribes to the request filters; a refusal of either
// (SUBACK 0x80) is an error.
func (a *Agent) subscribe(ctx context.Context) error {
	if err := a.link.subscribe(ctx, a.filters...); err != nil {
		return fmt.Errorf("%w: %w", ErrAgentSubscribe, err)
	}
	return nil
}

func (a *Agent) unsubscribe(ctx context.Context) error {
	if err := a.link.unsubscribe(ctx, a.filters...); err != nil {
		return fmt.Errorf("unsubscribe %s: %w", strings.Join(a.filters, ", "), err)
	}
	return nil
}

// agentPublishOverhead is what a QoS 1 PUBLISH adds to its topic and
// payload, at most: the fixed header (a byte and up to four of remaining
// length), the topic's length, the packet identifier, and an MQTT 5
// properties length, should the link ever speak MQTT 5.
const agentPublishOverhead = 1 + 4 + 2 + 2 + 1

// fits reports whether a PUBLISH of payload on topic stays within
// MaxPacketSize: a length check, no encoding.
func (a *Agent) fits(topic string, payload []byte) bool {
	return a.opts.MaxPacketSize < 0 || agentPublishOverhead+len(topic)+len(payload) <= a.opts.MaxPacketSize
}

// reply publishes one envelope (agentEnvelope, agentResponseEnvelope) on a
// reply topic of this instance.
func (a *Agent) reply(ctx context.Context, topic string, envelope []byte) error {
	if err := a.publish(ctx, topic, envelope, false); err != nil {
		a.stats.publishErrors.Add(1)
		return err
	}
	return nil
}

// publish sends at QoS 1 and waits for the PUBACK, at most agentOpTimeout.
// It is never called from the link's delivery goroutine: paho's router
// would wait for itself.
//
// Replies stay QoS 1, although a QoS 0 reply would spare the broker a
// PUBACK and the agent a read per call: paho keeps a QoS 1 publish and
// sends it again once a lost connection is back (it drops QoS 0 ones
// silently while reconnecting), the PUBACK is how the Agent learns that
// a reply was lost (PublishErrors).
func (a *Agent) publish(ctx context.Context, topic string, payload []byte, retained bool) error {
	if err := a.link.publish(ctx, topic, payload, retained); err != nil {
		return fmt.Errorf("publish %s: %w", topic, err)
	}
	return nil
}

// agentTimers recycles the timers of agentWaitToken: every reply waits for
// its PUBACK, and a fresh timer per wait was two allocations per call.
var agentTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// agentWaitToken waits for tok, at most until ctx is done and never longer
// than agentOpTimeout.
func agentWaitToken(ctx context.Context, tok mqtt.Token) error {
	t := agentTimers.Get().(*time.Timer)
	t.Reset(agentOpTimeout)
	defer func() {
		t.Stop() // since Go 1.23 no stale tick survives Stop: the timer is clean for the next user
		agentTimers.Put(t)
	}()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no acknowledgement from the broker after %s", agentOpTimeout)
	}
}

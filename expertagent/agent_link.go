package expertagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/pahoconn"
)

// agentLink is the Agent's connection to the broker. Production has one,
// paho (agentPahoLink); the interface is the seam where tests script a
// broker that a real one cannot imitate on cue (one that never
// acknowledges, or stays unreachable for a whole operation timeout). It
// calls the Agent's onMessage for each request and signals each
// (re)connection on a.connected; it does not re-subscribe by itself.
type agentLink interface {
	// connect makes the first connection (not retried); later ones are
	// automatic.
	connect(ctx context.Context) error
	// subscribe subscribes to filters at QoS 0, in one SUBSCRIBE, and
	// fails if the broker refuses any of them. Gateways publish requests
	// at QoS 0, so QoS 1 would deliver nothing more; on NATS it would make
	// each subscription a JetStream consumer, which a reconnect must delete
	// first (for seconds, when the node that held it is gone).
	subscribe(ctx context.Context, filters ...string) error
	unsubscribe(ctx context.Context, filters ...string) error
	// publish sends at QoS 1 and waits for the PUBACK, at most until ctx is
	// done or agentOpTimeout.
	publish(ctx context.Context, topic string, payload []byte, retained bool) error
	isOpen() bool
	// close disconnects (the broker drops the Will) and stops the link.
	close()
}

// newLink returns the link for the Agent's options.
func (a *Agent) newLink() agentLink {
	// The Will says no since: paho sends the one payload for every
	// connection, and a since from the first would make gateways take the
	// Will of a later one for a stale status.
	will, _ := json.Marshal(contract.Presence{Status: contract.StatusOffline, ClientID: a.opts.ClientID, Name: a.opts.Name, Version: a.opts.Version})
	return &agentPahoLink{client: mqtt.NewClient(a.pahoOptions(will))}
}

// The Agent's MQTT timing.
const (
	agentKeepAlive            = 30 * time.Second
	agentPingTimeout          = 10 * time.Second
	agentMaxReconnectInterval = 30 * time.Second
)

// signalConnected tells serve that a connection is up (again).
func (a *Agent) signalConnected() {
	select {
	case a.connected <- struct{}{}:
	default: // a signal is already pending: one subscribe serves both
	}
}

// agentPahoLink is the Agent's link through paho: tcp://, ssl://, ws://,
// wss://, unix:// brokers, and a proxy from ALL_PROXY.
type agentPahoLink struct{ client mqtt.Client }

// pahoOptions configures the paho client. paho does not re-subscribe after
// a reconnect, so OnConnect signals serve, which subscribes again; messages
// are dispatched by the default handler (subscriptions carry no handler of
// their own).
func (a *Agent) pahoOptions(will []byte) *mqtt.ClientOptions {
	o := mqtt.NewClientOptions()
	urls := pahoconn.SplitURLs(a.opts.BrokerURL)
	for _, u := range urls {
		o.AddBroker(agentBrokerURL(u))
	}
	// MQTT 3.1.1, explicitly: otherwise paho tries a refused login again
	// as MQTT 3.1, which a broker counts as one more failed login, and
	// whose refusal (by then "server unavailable", the login throttled)
	// hides the first one's reason.
	o.SetProtocolVersion(4)
	o.SetClientID(a.opts.ClientID).
		SetUsername(a.opts.Username).
		SetPassword(a.opts.Password).
		SetCleanSession(true).
		SetAutoReconnect(true).
		SetConnectRetry(false).
		SetResumeSubs(false).
		SetConnectTimeout(a.opts.ConnectTimeout).
		SetWriteTimeout(agentOpTimeout).
		SetKeepAlive(agentKeepAlive).
		SetPingTimeout(agentPingTimeout).
		SetMaxReconnectInterval(agentMaxReconnectInterval).
		SetOrderMatters(true). // our handler never blocks; order keeps a cancel behind its call
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { a.onMessage(m.Topic(), m.Payload()) }).
		SetOnConnectHandler(func(mqtt.Client) {
			if a.lost.Swap(false) {
				a.log.Info("reconnected to the broker")
			}
			a.signalConnected()
		}).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			a.lost.Store(true)
			a.log.WithError(err).Warn("connection to the broker lost; reconnecting")
		})
	if a.opts.TLSConfig != nil {
		o.SetTLSConfig(a.opts.TLSConfig)
	}
	pahoconn.Use(o, urls...)
	o.SetBinaryWill(contract.PresenceTopic(a.opts.Username, a.opts.ClientID), will, 1, true)
	return o
}

// agentBrokerURL gives a tcp:// or ssl:// broker URL without a port the
// scheme's default one: paho dials the host as written, and "missing port"
// would fail an agent pointed at tcp://broker.
func agentBrokerURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Port() != "" {
		return raw
	}
	switch u.Scheme {
	case "tcp", "mqtt":
		u.Host = net.JoinHostPort(u.Hostname(), "1883")
	case "ssl", "tls", "mqtts", "mqtt+ssl", "tcps":
		u.Host = net.JoinHostPort(u.Hostname(), "8883")
	default:
		return raw
	}
	return u.String()
}

func (l *agentPahoLink) connect(ctx context.Context) error {
	tok := l.client.Connect()
	opts := l.client.OptionsReader()
	timeout := opts.ConnectTimeout()
	t := time.NewTimer(timeout + time.Second) // paho enforces ConnectTimeout itself; this is the backstop
	defer t.Stop()
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		// Let the attempt finish so that close's Disconnect closes a
		// connection paho might otherwise open behind our back.
		tok.WaitTimeout(timeout)
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no CONNACK after %s", timeout)
	}
}

// subscribe checks the SUBACK: a broker that refuses a filter answers
// 0x80 for it rather than an error.
func (l *agentPahoLink) subscribe(ctx context.Context, filters ...string) error {
	qos := make(map[string]byte, len(filters))
	for _, f := range filters {
		qos[f] = 0
	}
	tok := l.client.SubscribeMultiple(qos, nil)
	if err := agentWaitToken(ctx, tok); err != nil {
		return fmt.Errorf("subscribe %s: %w", strings.Join(filters, ", "), err)
	}
	st, ok := tok.(*mqtt.SubscribeToken)
	if !ok {
		return nil
	}
	codes := st.Result()
	for _, f := range filters { // in the caller's order: the error names the first refused
		if code, ok := codes[f]; ok && code >= agentSubackFailure {
			return fmt.Errorf("%s refused by the broker (SUBACK %#x)", f, code)
		}
	}
	return nil
}

func (l *agentPahoLink) unsubscribe(ctx context.Context, filters ...string) error {
	return agentWaitToken(ctx, l.client.Unsubscribe(filters...))
}

func (l *agentPahoLink) publish(ctx context.Context, topic string, payload []byte, retained bool) error {
	return agentWaitToken(ctx, l.client.Publish(topic, 1, retained, payload))
}

func (l *agentPahoLink) isOpen() bool { return l.client.IsConnectionOpen() }
func (l *agentPahoLink) close()       { l.client.Disconnect(250) }

package requester

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/internal/pahoconn"
)

// Defaults of PahoBusOptions.
const (
	DefaultPahoConnectTimeout       = 10 * time.Second
	DefaultPahoMaxReconnectInterval = 10 * time.Second
	DefaultPahoKeepAlive            = 30 * time.Second
	DefaultPahoResubscribeTimeout   = time.Minute
)

// pahoResubscribeBatch bounds the filters of one SUBSCRIBE packet sent when
// the bus subscribes everything again after a reconnect.
const pahoResubscribeBatch = 500

var (
	_ Bus            = (*PahoBus)(nil)
	_ LinkWatcher    = (*PahoBus)(nil)
	_ RefusalWatcher = (*PahoBus)(nil)
)

// ErrBusClosed is returned by a PahoBus after Close.
var ErrBusClosed = errors.New("bus closed")

// ErrSubscribeRefused is wrapped by PahoBus.Subscribe's error when the
// broker answered the SUBSCRIBE with a refusal code (0x80 or above).
var ErrSubscribeRefused = errors.New("the broker refused the subscription")

// ErrLoginRefused is wrapped by DialPahoBus's error when the broker refused
// the gateway's login (a CONNACK with a refusal code), with paho's error
// and words that say what to check.
var ErrLoginRefused = errors.New("the broker refused the gateway's login")

// pahoRefusals put paho's errors for the CONNACK return codes in words that
// say what to check, as the agent side's do (expertagent's agentRefusals).
// The flags named are toolbus serve's.
var pahoRefusals = []struct {
	err   error
	words string
}{
	{packets.ErrorRefusedBadProtocolVersion, "unacceptable protocol version: the broker does not speak MQTT 3.1.1"},
	{packets.ErrorRefusedIDRejected, "client ID rejected: the broker does not accept this client ID (--broker-client-id)"},
	{packets.ErrorRefusedServerUnavailable, "server unavailable: the broker takes no logins now (too many failed logins from this address, " +
		"or too many at once; the password was not checked); wait, and check the password"},
	{packets.ErrorRefusedBadUsernameOrPassword, "bad user name or password: check --broker-username and --broker-password " +
		"(TOOLBUS_BROKER_PASSWORD) against the identity in the store (toolbus mqtt-user list), and that the broker has read " +
		"the store's latest export (toolbus acl export, then reload the broker)"},
	{packets.ErrorRefusedNotAuthorised, "not authorised: the broker does not allow this login: a disabled identity, " +
		"or one the broker's export leaves out (toolbus acl export, then reload the broker)"},
}

// pahoLoginRefusedError is a refusal in words (pahoRefusals); it wraps
// ErrLoginRefused and paho's error.
type pahoLoginRefusedError struct {
	words string
	cause error
}

func (e *pahoLoginRefusedError) Error() string   { return ErrLoginRefused.Error() + ": " + e.words }
func (e *pahoLoginRefusedError) Unwrap() []error { return []error{ErrLoginRefused, e.cause} }

// pahoRefusal returns err in words if it is a broker's refusal, else err.
func pahoRefusal(err error) error {
	for _, r := range pahoRefusals {
		if errors.Is(err, r.err) {
			return &pahoLoginRefusedError{words: r.words, cause: err}
		}
	}
	return err
}

// PahoBusOptions configures a PahoBus.
type PahoBusOptions struct {
	// BrokerURL is the external broker: tcp://host:port, ssl://host:port,
	// ws://host:port/path; several separated by commas (the nodes of a
	// cluster) are tried in order at each connection attempt, so the bus
	// fails over to the next when one is down. Required.
	BrokerURL string
	// Username and Password log in (an identity with the platform role).
	Username, Password string
	// TLSConfig is used for ssl:// and wss:// URLs; nil = system defaults.
	TLSConfig *tls.Config
	// ClientID is the MQTT client ID; "" = "toolbus-" + 16 random hex digits.
	ClientID string
	// ConnectTimeout bounds the first connection and each reconnect
	// attempt; 0 = DefaultPahoConnectTimeout (10s).
	ConnectTimeout time.Duration
	// MaxReconnectInterval caps the back-off between reconnect attempts;
	// 0 = DefaultPahoMaxReconnectInterval (10s).
	MaxReconnectInterval time.Duration
	// KeepAlive is the MQTT keepalive; 0 = DefaultPahoKeepAlive (30s).
	KeepAlive time.Duration
	// ResubscribeTimeout bounds the wait for the broker's SUBACK to each
	// batch of filters subscribed again after a reconnect; a batch not
	// acknowledged by then counts as refused (see OnRefused). 0 =
	// DefaultPahoResubscribeTimeout (1m).
	ResubscribeTimeout time.Duration
	// PublishQoS1 publishes at QoS 1, waiting for the broker's
	// acknowledgement of each message, instead of at QoS 0 (the default).
	// QoS 1 keeps nothing more here: the session is clean, and every call
	// that was waiting fails when the connection drops. It costs a PUBACK
	// per message on any broker, and a replicated JetStream write on NATS.
	PublishQoS1 bool
	// AllReplies, when set, is one filter that holds every reply filter
	// this bus will be asked for (contract.GatewayReplyFilter: every reply
	// to one gateway). The bus subscribes it once, at QoS 0, on each
	// connection, and subscribing or unsubscribing a context's reply filter
	// then only adds or removes the context's route here, with nothing
	// sent: a reply to a context without a route is dropped, as the broker
	// would drop it. For brokers where a subscription is dear (NATS writes
	// the client's whole subscription list to JetStream at each one); ""
	// subscribes each reply filter at the broker.
	AllReplies string
	// Logger receives the bus's logs (component "requester.pahobus");
	// nil discards them.
	Logger *logrus.Entry
}

// PahoBus is a Bus over a paho MQTT 3.1.1 client, for a gateway that talks
// to an external broker. Subscriptions are QoS 0 (pahoSubscribeQoS). paho's router scans every
// route for every message and never subscribes again after a reconnect, so
// PahoBus subscribes with no per-subscription handler, dispatches from its
// own table (a map of exact topics and a short list of wildcard filters),
// and subscribes everything again each time the connection comes back.
//
// The link (see LinkWatcher): when the connection drops, Publish and
// Subscribe fail at once with an error wrapping ErrLinkLost (those waiting
// for the broker's acknowledgement too) and the OnLink functions run.
// After a reconnect, Publish waits until every route is subscribed again,
// so that no request goes out before the subscription its reply needs.
type PahoBus struct {
	client  paho.Client
	log     *logrus.Entry
	pubQoS  byte   // of Publish
	user    string // PahoBusOptions.Username, for presenceHint
	allReps string // PahoBusOptions.AllReplies

	resubTimeout time.Duration // PahoBusOptions.ResubscribeTimeout

	mu      sync.RWMutex
	exact   map[string]MessageHandler
	replies map[string]pahoReplyRoute // by contract.ReplyFilterKey: one per context, not scanned like wild
	wild    []pahoWildRoute
	closed  bool
	// deaf: the broker refused AllReplies on the current connection; until
	// a retry takes, no reply would arrive, so the link counts as down.
	deaf bool
	// reconnected: onConnect has seen the first connection, which is
	// DialPahoBus's to set up; every later one is a reconnect.
	reconnected bool
	// lostBeforeUp: a connection was lost before DialPahoBus marked the
	// first one up. The open one, if any, is then a later connection,
	// which onConnect sets up (AllReplies included), not DialPahoBus.
	lostBeforeUp bool
	// up: the current connection is open as far as the bus knows. It goes
	// down on the first sign of a loss (OnReconnecting is the ordered one:
	// paho calls it before it dials again, so before the next onConnect).
	up bool
	// lost is closed when the current connection is lost; ready is closed
	// once every route is subscribed again on it.
	lost, ready chan struct{}
	// watchers holds the OnLink functions by registration number.
	watchers map[uint64]pahoLinkWatch
	nextID   uint64

	done chan struct{} // closed by Close: stops resubscribe waits
	wg   sync.WaitGroup
}

type pahoLinkWatch struct {
	lost    func(error)
	up      func()
	refused func(string, error)
}

type pahoReplyRoute struct {
	filter string
	h      MessageHandler
}

type pahoWildRoute struct {
	filter  string // as subscribed
	pattern string // filter without a $share/<group>/ prefix
	h       MessageHandler
}

// DialPahoBus connects to the broker and returns the bus once connected.
// After that paho reconnects by itself; Close stops it.
func DialPahoBus(ctx context.Context, opts PahoBusOptions) (*PahoBus, error) {
	if len(pahoconn.SplitURLs(opts.BrokerURL)) == 0 {
		return nil, errors.New("requester: paho bus: BrokerURL is required")
	}
	if opts.ClientID == "" {
		opts.ClientID = "toolbus-" + contract.RandomID(8)
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultPahoConnectTimeout
	}
	if opts.MaxReconnectInterval <= 0 {
		opts.MaxReconnectInterval = DefaultPahoMaxReconnectInterval
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultPahoKeepAlive
	}
	if opts.ResubscribeTimeout <= 0 {
		opts.ResubscribeTimeout = DefaultPahoResubscribeTimeout
	}
	b := &PahoBus{
		resubTimeout: opts.ResubscribeTimeout,
		pubQoS:       pahoPublishQoS(opts.PublishQoS1),
		allReps:      opts.AllReplies,
		user:         opts.Username,
		log:          logutil.Component(opts.Logger, "requester.pahobus").WithField("clientId", opts.ClientID),
		exact:        make(map[string]MessageHandler),
		replies:      make(map[string]pahoReplyRoute),
		lost:         make(chan struct{}),
		ready:        make(chan struct{}),
		watchers:     make(map[uint64]pahoLinkWatch),
		done:         make(chan struct{}),
	}
	co := paho.NewClientOptions()
	urls := pahoconn.SplitURLs(opts.BrokerURL)
	for _, u := range urls {
		co.AddBroker(u)
	}
	co.SetClientID(opts.ClientID).
		SetUsername(opts.Username).
		SetPassword(opts.Password).
		SetCleanSession(true). // subscriptions are ours to restore, not the broker's session
		SetResumeSubs(false).
		SetOrderMatters(true). // one delivery goroutine: interim messages keep their order
		SetAutoReconnect(true).
		SetConnectRetry(false).
		SetConnectTimeout(opts.ConnectTimeout).
		SetMaxReconnectInterval(opts.MaxReconnectInterval).
		SetKeepAlive(opts.KeepAlive).
		SetWriteTimeout(opts.ConnectTimeout).
		SetDefaultPublishHandler(b.dispatch).
		SetOnConnectHandler(b.onConnect).
		SetReconnectingHandler(func(paho.Client, *paho.ClientOptions) {
			b.markLost(errors.New("reconnecting"), false)
		}).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			b.log.WithError(err).Warn("connection to the broker lost; reconnecting")
			b.markLost(err, true)
		})
	if opts.TLSConfig != nil {
		co.SetTLSConfig(opts.TLSConfig)
	}
	pahoconn.Use(co, urls...)
	b.client = paho.NewClient(co)
	tok := b.client.Connect()
	// A failed dial closes the bus: paho's onConnect may already have
	// started goroutines the bus owns (a retry of a refused filter).
	if err := pahoWait(ctx, tok); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("requester: paho bus: connect %s as %s: %w", opts.BrokerURL, opts.Username, pahoRefusal(err))
	}
	if b.allReps != "" {
		if err := b.subscribeAllReplies(ctx, b.client); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("requester: paho bus: %w", err)
		}
	}
	b.mu.Lock()
	// Else onConnect came first, or the link is gone already, or the open
	// connection is a later one, whose onConnect subscribes AllReplies on
	// it.
	if !b.up && !b.lostBeforeUp && b.client.IsConnectionOpen() {
		b.up = true
		close(b.ready) // nothing to subscribe again yet
	}
	b.mu.Unlock()
	return b, nil
}

// presenceHint says what to check when agent presence does not reach the
// bus: its login's right to read it (Requester logs it).
func (b *PahoBus) presenceHint() string {
	return fmt.Sprintf("the broker may not let %s read agent presence (%s): is it an identity of role platform, in the broker's "+
		"latest export? (toolbus mqtt-user list; toolbus acl export, then reload the broker)", b.user, contract.PresenceFilter)
}

// subscribeAllReplies subscribes the AllReplies filter on c's connection.
func (b *PahoBus) subscribeAllReplies(ctx context.Context, c paho.Client) error {
	tok := c.Subscribe(b.allReps, pahoSubscribeQoS, nil)
	if err := pahoWait(ctx, tok); err != nil {
		return fmt.Errorf("subscribe %q: %w", b.allReps, err)
	}
	if code, _ := subackCode(tok, b.allReps); code >= 0x80 {
		return fmt.Errorf("subscribe %q: refused by the broker (SUBACK %#x)", b.allReps, code)
	}
	return nil
}

// pahoWait waits for tok, bounded by ctx.
func pahoWait(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func pahoIsWildcard(filter string) bool {
	return strings.HasPrefix(filter, "$share/") || strings.ContainsAny(filter, "+#")
}

// pahoPattern strips a shared-subscription prefix: messages arrive with the
// plain topic.
func pahoPattern(filter string) string {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		if _, f, ok := strings.Cut(rest, "/"); ok {
			return f
		}
	}
	return filter
}

// pahoMatch reports whether an MQTT topic filter matches a topic name.
func pahoMatch(filter, topic string) bool {
	// [MQTT-4.7.2-1]: wildcards at the first level do not match $ topics.
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		f, frest, fmore := strings.Cut(filter, "/")
		if f == "#" {
			return true
		}
		t, trest, tmore := strings.Cut(topic, "/")
		if f != "+" && f != t {
			return false
		}
		if !fmore || !tmore {
			// "a/#" also matches "a".
			return fmore == tmore || (fmore && frest == "#")
		}
		filter, topic = frest, trest
	}
}

// dispatch is paho's default publish handler, the only one: it runs on
// paho's delivery goroutine and hands the message to the handler of its
// exact topic, or else to every matching wildcard filter's.
func (b *PahoBus) dispatch(_ paho.Client, m paho.Message) {
	topic := m.Topic()
	b.mu.RLock()
	if h, ok := b.exact[topic]; ok {
		b.mu.RUnlock()
		h(topic, m.Payload())
		return
	}
	if _, _, key, ok := contract.SplitReply(topic); ok {
		if r, ok := b.replies[key]; ok {
			b.mu.RUnlock()
			r.h(topic, m.Payload())
			return
		}
	}
	var hs []MessageHandler
	for _, w := range b.wild {
		if pahoMatch(w.pattern, topic) {
			hs = append(hs, w.h)
		}
	}
	b.mu.RUnlock()
	for _, h := range hs {
		h(topic, m.Payload())
	}
}

// onConnect runs (on its own goroutine, from paho) after every successful
// connection. After a reconnect the clean session has no subscriptions, so
// it subscribes every route again, in batches, and only then lets Publish
// through. It must not block paho: the wait for the SUBACKs runs on a
// goroutine the bus owns.
func (b *PahoBus) onConnect(c paho.Client) {
	b.mu.Lock()
	first := !b.reconnected
	b.reconnected = true
	if b.closed || b.up || first {
		// The first connection (DialPahoBus subscribes AllReplies on it
		// and marks it up), or one whose loss the bus has not seen:
		// nothing was lost, nothing to restore.
		b.mu.Unlock()
		return
	}
	b.up = true
	b.deaf = false
	b.lost = make(chan struct{})
	lost := b.lost
	ready := make(chan struct{})
	b.ready = ready
	filters := make([]string, 0, len(b.exact)+len(b.replies)+len(b.wild))
	for f := range b.exact {
		filters = append(filters, f)
	}
	if b.allReps != "" {
		filters = append(filters, b.allReps)
	} else {
		for _, r := range b.replies {
			filters = append(filters, r.filter)
		}
	}
	for _, w := range b.wild {
		filters = append(filters, w.filter)
	}
	ups := make([]func(), 0, len(b.watchers))
	for _, w := range b.watchers {
		if w.up != nil {
			ups = append(ups, w.up)
		}
	}
	// Add under the lock Close takes before Wait: no Add after Wait starts.
	b.wg.Add(1)
	b.mu.Unlock()
	for _, f := range ups {
		f()
	}
	go func() {
		defer b.wg.Done()
		// Always closed, even when the link drops again meanwhile: waiters
		// then look at the state again and see it down.
		defer close(ready)
		b.resubscribe(c, lost, filters)
	}()
}

// resubscribe subscribes filters again after a reconnect, in batches. A
// filter refused with "packet identifier in use" (see Subscribe) is tried
// again in the next round; one refused otherwise, or in use every round,
// goes to refuse, and so does a batch that fails or has no SUBACK within
// resubTimeout while the connection lasts (once it is lost, the next
// connection subscribes everything again).
func (b *PahoBus) resubscribe(c paho.Client, lost <-chan struct{}, filters []string) {
	// gone reports whether the connection is lost. paho fails the tokens
	// of a dropped connection before its handlers let the bus see the
	// loss (closing lost), but after it stopped counting the connection
	// open; a newer connection opens only after lost is closed.
	gone := func() bool {
		open := c.IsConnectionOpen()
		select {
		case <-lost:
			return true
		default:
			return !open
		}
	}
	refuseBatch := func(batch map[string]byte, err error) {
		if gone() {
			return
		}
		b.log.WithError(err).WithField("filters", len(batch)).Error("subscribing again after reconnect failed")
		for f := range batch {
			b.refuse(c, lost, f, fmt.Errorf("subscribing %q again after a reconnect: %w", f, err))
		}
	}
	pending := filters
	for attempt := 1; len(pending) > 0 && attempt <= pahoSubscribeAttempts; attempt++ {
		var again []string
		for i := 0; i < len(pending); i += pahoResubscribeBatch {
			if gone() {
				return
			}
			batch := make(map[string]byte, pahoResubscribeBatch)
			for _, f := range pending[i:min(i+pahoResubscribeBatch, len(pending))] {
				batch[f] = pahoSubscribeQoS
			}
			tok := c.SubscribeMultiple(batch, nil)
			select {
			case <-tok.Done():
				if err := tok.Error(); err != nil {
					refuseBatch(batch, err)
					continue
				}
				for f := range batch {
					switch code, _ := subackCode(tok, f); {
					case code == pahoSubackIDInUse:
						again = append(again, f)
					case code >= 0x80:
						b.log.WithFields(logrus.Fields{"filter": f, "code": code}).Error("subscribing again after reconnect: refused")
						b.refuse(c, lost, f, fmt.Errorf("subscribing %q again after a reconnect: refused by the broker (SUBACK %#x)", f, code))
					}
				}
			case <-b.done:
				return
			case <-time.After(b.resubTimeout):
				refuseBatch(batch, fmt.Errorf("no SUBACK within %v", b.resubTimeout))
			}
		}
		pending = again
	}
	if gone() {
		return
	}
	if len(pending) > 0 {
		b.log.WithField("filters", len(pending)).Error("subscribing again after reconnect: still refused (packet identifier in use)")
		for _, f := range pending {
			b.refuse(c, lost, f, fmt.Errorf("subscribing %q again after a reconnect: refused by the broker (packet identifier in use)", f))
		}
	}
	b.log.WithField("filters", len(filters)).Info("connected again; subscriptions restored")
}

// markLost takes the link down and runs the OnLink lost functions, once per
// connection. fromLostHandler: paho runs its connection-lost handler on a
// goroutine of its own, which may be late, after a reconnect; a connection
// that is open again by then was already marked lost by OnReconnecting.
func (b *PahoBus) markLost(cause error, fromLostHandler bool) {
	b.mu.Lock()
	if !b.up || b.closed || (fromLostHandler && b.client.IsConnectionOpen()) {
		if !b.up { // read by DialPahoBus only, before it marks the first connection up
			b.lostBeforeUp = true
		}
		b.mu.Unlock()
		return
	}
	b.up = false
	close(b.lost)
	fs := make([]func(error), 0, len(b.watchers))
	for _, w := range b.watchers {
		if w.lost != nil {
			fs = append(fs, w.lost)
		}
	}
	b.mu.Unlock()
	for _, f := range fs {
		f(cause)
	}
}

// OnLink registers lost, run each time the connection to the broker drops,
// and up, run each time it is back, before the routes are subscribed again
// (see LinkWatcher). stop unregisters them.
func (b *PahoBus) OnLink(lost func(error), up func()) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextID
	b.nextID++
	b.watchers[id] = pahoLinkWatch{lost: lost, up: up}
	return func() {
		b.mu.Lock()
		delete(b.watchers, id)
		b.mu.Unlock()
	}
}

// OnRefused implements RefusalWatcher.
func (b *PahoBus) OnRefused(f func(filter string, err error)) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextID
	b.nextID++
	b.watchers[id] = pahoLinkWatch{refused: f}
	return func() {
		b.mu.Lock()
		delete(b.watchers, id)
		b.mu.Unlock()
	}
}

// refuse tells the OnRefused functions that filter could not be
// subscribed again. A reply filter's route goes: whoever holds the context
// subscribes it again when it needs it. Any other filter is tried again,
// with backoff, while the connection c lasts.
func (b *PahoBus) refuse(c paho.Client, lost <-chan struct{}, filter string, err error) {
	if _, ok := contract.ReplyFilterKey(filter); ok {
		b.mu.Lock()
		b.removeRoute(filter)
		b.mu.Unlock()
	} else {
		b.mu.Lock()
		select {
		case <-lost: // the next connection subscribes it again, and is not deaf
		default:
			if !b.closed {
				b.deaf = b.deaf || filter == b.allReps
				b.wg.Add(1)
				go b.retrySubscribe(c, lost, filter)
			}
		}
		b.mu.Unlock()
	}
	b.mu.RLock()
	fs := make([]func(string, error), 0, len(b.watchers))
	for _, w := range b.watchers {
		if w.refused != nil {
			fs = append(fs, w.refused)
		}
	}
	b.mu.RUnlock()
	for _, f := range fs {
		f(filter, err)
	}
}

// Bounds of retrySubscribe's backoff.
const (
	pahoRetrySubscribeFirst = 500 * time.Millisecond
	pahoRetrySubscribeMax   = 30 * time.Second
)

// retrySubscribe subscribes filter again until the broker takes it, the
// connection is lost (the next one subscribes everything anyway) or the
// bus is closed. An attempt with no SUBACK within resubTimeout counts as
// refused.
func (b *PahoBus) retrySubscribe(c paho.Client, lost <-chan struct{}, filter string) {
	defer b.wg.Done()
	wait := pahoRetrySubscribeFirst
	for attempt := 2; ; attempt++ {
		select {
		case <-time.After(wait):
		case <-lost:
			return
		case <-b.done:
			return
		}
		wait = min(2*wait, pahoRetrySubscribeMax)
		tok := c.Subscribe(filter, pahoSubscribeQoS, nil)
		var code byte
		err := fmt.Errorf("no SUBACK within %v", b.resubTimeout)
		select {
		case <-tok.Done():
			code, _ = subackCode(tok, filter)
			err = tok.Error()
		case <-time.After(b.resubTimeout):
		case <-lost:
			return
		case <-b.done:
			return
		}
		if err == nil && code < 0x80 {
			b.log.WithFields(logrus.Fields{"filter": filter, "attempt": attempt}).Info("subscribed again after a refusal")
			if filter == b.allReps {
				b.mu.Lock()
				select {
				case <-lost: // a newer connection decides
				default:
					b.deaf = false
				}
				b.mu.Unlock()
			}
			return
		}
		b.log.WithFields(logrus.Fields{"filter": filter, "attempt": attempt, "code": code}).WithError(err).Warn("subscribing again: refused again")
	}
}

// link returns the current connection's lost channel once it is up and
// subscribed again, waiting for the resubscription (bounded by ctx). It
// fails with ErrLinkLost when the link is down and ErrBusClosed after Close.
func (b *PahoBus) link(ctx context.Context) (lost <-chan struct{}, err error) {
	for {
		b.mu.RLock()
		closed, up, lostCh, ready, deaf := b.closed, b.up, b.lost, b.ready, b.deaf
		readyNow := false
		if up {
			select { // the usual case, seen under the same lock: no second look needed
			case <-ready:
				readyNow = true
			default:
			}
		}
		b.mu.RUnlock()
		switch {
		case closed:
			return nil, ErrBusClosed
		case !up:
			return nil, fmt.Errorf("%w: not connected, reconnecting", ErrLinkLost)
		case deaf:
			return nil, fmt.Errorf("%w: the broker refused the subscription to this gateway's replies; trying again", ErrLinkLost)
		case readyNow:
			return lostCh, nil
		}
		select {
		case <-ready:
			b.mu.RLock()
			same := b.ready == ready && b.up
			b.mu.RUnlock()
			if same {
				return lostCh, nil
			}
		case <-lostCh:
		case <-b.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pahoWaitLink is pahoWait that also gives up when the connection the
// packet went out on is lost: paho would keep the token open until it has
// reconnected and resent the packet.
func (b *PahoBus) pahoWaitLink(ctx context.Context, tok paho.Token, lost <-chan struct{}) error {
	select {
	case <-tok.Done():
		err := tok.Error()
		// A connection dying under the packet fails its write before paho
		// (or the bus) has noticed the loss.
		var ne net.Error
		if err != nil && (errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, paho.ErrNotConnected) || !b.client.IsConnectionOpen()) {
			return fmt.Errorf("%w: %w", ErrLinkLost, err)
		}
		return err
	case <-lost:
		return fmt.Errorf("%w: the broker's acknowledgement did not come", ErrLinkLost)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func pahoPublishQoS(qos1 bool) byte {
	if qos1 {
		return 1
	}
	return 0
}

// pahoSubscribeQoS is the QoS of every subscription. A message matters
// only on the connection that subscribed (the session is clean, and the
// bus fails every waiting call when that connection drops), so QoS 1 would
// keep nothing more; it would cost the broker an acknowledgement per
// message and, on NATS, a JetStream consumer per subscription, which a
// reconnect must delete (slowly, when the node that held it is gone).
const pahoSubscribeQoS = 0

// Subscribe subscribes to filter (at pahoSubscribeQoS) and returns once the broker has
// acknowledged it. h gets the messages of filter: an exact topic's handler
// replaces any wildcard one for that topic.
func (b *PahoBus) Subscribe(ctx context.Context, filter string, h MessageHandler) error {
	if h == nil {
		return fmt.Errorf("paho subscribe %q: nil handler", filter)
	}
	// A done ctx fails before anything is sent: otherwise the SUBACK and
	// ctx race in pahoWait, and either may win.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("paho subscribe %q: %w", filter, err)
	}
	if b.allReps != "" {
		if _, ok := contract.ReplyFilterKey(filter); ok {
			// AllReplies holds it at the broker: only the route is new.
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.closed {
				return fmt.Errorf("paho subscribe %q: %w", filter, ErrBusClosed)
			}
			b.addRoute(filter, h)
			return nil
		}
	}
	lost, err := b.link(ctx)
	if err != nil {
		return fmt.Errorf("paho subscribe %q: %w", filter, err)
	}
	// The route goes in first, so a message right after the SUBACK (a
	// retained one) finds it.
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("paho subscribe %q: %w", filter, ErrBusClosed)
	}
	b.addRoute(filter, h)
	b.mu.Unlock()
	for attempt := 1; ; attempt++ {
		tok := b.client.Subscribe(filter, pahoSubscribeQoS, nil)
		if err = b.pahoWaitLink(ctx, tok, lost); err != nil {
			break
		}
		code, _ := subackCode(tok, filter)
		if code < 0x80 {
			break
		}
		err = fmt.Errorf("%w (SUBACK %#x)", ErrSubscribeRefused, code)
		// mochi keeps its own packet IDs and the client's in one table:
		// a SUBSCRIBE whose ID equals that of a message mochi is delivering
		// to us is refused with 0x91 ("in use"). Another SUBSCRIBE gets
		// another ID.
		if code != pahoSubackIDInUse || attempt == pahoSubscribeAttempts {
			break
		}
	}
	if err != nil {
		b.mu.Lock()
		b.removeRoute(filter)
		b.mu.Unlock()
		return fmt.Errorf("paho subscribe %q: %w", filter, err)
	}
	return nil
}

// pahoSubackIDInUse is MQTT 5's "packet identifier in use", which mochi
// also sends to 3.1.1 clients; pahoSubscribeAttempts bounds the retries it
// calls for.
const (
	pahoSubackIDInUse     = 0x91
	pahoSubscribeAttempts = 5
)

// subackCode is the SUBACK code of filter in tok; ok is false when the token
// says nothing of it. paho keys Subscribe's result by the filter without a
// $share/<group>/ prefix, SubscribeMultiple's by the whole filter.
func subackCode(tok paho.Token, filter string) (code byte, ok bool) {
	st, isSub := tok.(*paho.SubscribeToken)
	if !isSub {
		return 0, false
	}
	res := st.Result()
	if code, ok = res[filter]; !ok {
		code, ok = res[pahoPattern(filter)]
	}
	return code, ok
}

func (b *PahoBus) addRoute(filter string, h MessageHandler) {
	if !pahoIsWildcard(filter) {
		b.exact[filter] = h
		return
	}
	if key, ok := contract.ReplyFilterKey(filter); ok {
		b.replies[key] = pahoReplyRoute{filter: filter, h: h}
		return
	}
	for i, w := range b.wild {
		if w.filter == filter {
			b.wild[i].h = h
			return
		}
	}
	b.wild = append(b.wild, pahoWildRoute{filter: filter, pattern: pahoPattern(filter), h: h})
}

func (b *PahoBus) removeRoute(filter string) {
	if !pahoIsWildcard(filter) {
		delete(b.exact, filter)
		return
	}
	if key, ok := contract.ReplyFilterKey(filter); ok {
		delete(b.replies, key)
		return
	}
	for i, w := range b.wild {
		if w.filter == filter {
			b.wild = append(b.wild[:i], b.wild[i+1:]...)
			return
		}
	}
}

// Unsubscribe removes the subscription to filter. The route goes even if
// the broker does not answer: after a reconnect the clean session would
// not have it anyway.
func (b *PahoBus) Unsubscribe(ctx context.Context, filter string) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("paho unsubscribe %q: %w", filter, ErrBusClosed)
	}
	if b.allReps != "" {
		if _, ok := contract.ReplyFilterKey(filter); ok {
			b.removeRoute(filter)
			b.mu.Unlock()
			return nil
		}
	}
	b.mu.Unlock()
	err := pahoWait(ctx, b.client.Unsubscribe(filter))
	b.mu.Lock()
	b.removeRoute(filter)
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("paho unsubscribe %q: %w", filter, err)
	}
	return nil
}

// Publish sends payload to topic at QoS 0, not retained, and returns once
// it is written (with PublishQoS1: at QoS 1, once the broker has
// acknowledged it). Just after a reconnect it first waits until every
// route is subscribed again; while the link is down, or if it drops before
// the message is out, it fails with an error wrapping ErrLinkLost (with
// PublishQoS1 the message may still go out once paho has reconnected).
func (b *PahoBus) Publish(ctx context.Context, topic string, payload []byte) error {
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return fmt.Errorf("paho publish %q: %w", topic, ErrBusClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("paho publish %q: %w", topic, err)
	}
	lost, err := b.link(ctx)
	if err != nil {
		return fmt.Errorf("paho publish %q: %w", topic, err)
	}
	if err := b.pahoWaitLink(ctx, b.client.Publish(topic, b.pubQoS, false, payload), lost); err != nil {
		return fmt.Errorf("paho publish %q: %w", topic, err)
	}
	return nil
}

// IsConnected reports whether the connection to the broker is up now.
func (b *PahoBus) IsConnected() bool { return b.client.IsConnectionOpen() }

// Close disconnects (waiting up to 250 ms for work in progress) and stops
// reconnecting. It is idempotent.
func (b *PahoBus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	b.mu.Unlock()
	b.client.Disconnect(250)
	b.wg.Wait()
	return nil
}

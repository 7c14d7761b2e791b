package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/logutil"
)

// Authenticator checks a client's login. *store.Store satisfies it.
type Authenticator interface {
	Authenticate(ctx context.Context, username string, password []byte) (acl.Identity, error)
}

// Authorizer decides whether a logged-in client may publish to a topic or
// subscribe to a filter (and receive a message on a topic). *acl.Policy
// satisfies it. It runs on every publish and every delivery, so it must be
// cheap and safe for concurrent use.
type Authorizer interface {
	Allow(id acl.Identity, clientID string, action acl.Action, topic string) bool
}

// Defaults applied by New to zero Options fields.
const (
	DefaultMaxPacketSize  = 16 << 20
	DefaultSessionExpiry  = time.Hour
	DefaultMaxClients     = 10000
	DefaultMaxKeepAlive   = 5 * time.Minute
	DefaultConnectTimeout = 10 * time.Second
	// DefaultMaxPreAuthConns and DefaultMaxPreAuthPerSource are the
	// defaults of Options.MaxPreAuthConns and MaxPreAuthPerSource.
	DefaultMaxPreAuthConns     = 1024
	DefaultMaxPreAuthPerSource = 128
	// DefaultMaxFailedLogins and DefaultFailedLoginRefill are the defaults
	// of Options.MaxFailedLogins and FailedLoginRefill.
	DefaultMaxFailedLogins   = 10
	DefaultFailedLoginRefill = 6 * time.Second
	// DefaultMaxPresenceBytes is the default of Options.MaxPresenceBytes.
	DefaultMaxPresenceBytes = 4 << 10
)

// Options configure a Broker. Zero fields take the documented defaults.
type Options struct {
	// Addr is the TCP listener address, e.g. "127.0.0.1:1883"
	// ("127.0.0.1:0" picks a free port). "" means no TCP listener.
	Addr string
	// TLSAddr is an optional MQTT-over-TLS listener address; it needs
	// TLSConfig (with at least one certificate).
	TLSAddr   string
	TLSConfig *tls.Config
	// WSAddr is an optional MQTT-over-WebSocket listener address (plain
	// ws://, any path).
	WSAddr string

	// Authenticator checks every login. Required.
	Authenticator Authenticator
	// Authorizer checks every publish, subscribe and delivery. Required.
	Authorizer Authorizer

	// MaxPacketSize bounds an inbound MQTT packet; 0 means 16 MiB.
	MaxPacketSize uint32
	// SessionExpiry bounds how long the session of a disconnected client
	// (clean session off, or an MQTT 5 session expiry) is kept; 0 means 1h.
	SessionExpiry time.Duration
	// MaxClients bounds the logged-in clients (one more is refused with
	// CONNACK "server unavailable"); each listener also closes at once any
	// connection beyond MaxClients+64 open ones, logged in or not. 0 means
	// 10000.
	MaxClients int
	// MaxKeepAlive is the longest keepalive an MQTT 5 client may ask for;
	// a v5 client asking for none or more is told to use this (server
	// keepalive). MQTT 3.1.1 cannot be told, so its keepalive is taken as
	// asked; TCP keepalive still finds dead peers. 0 means 5 minutes.
	MaxKeepAlive time.Duration
	// ConnectTimeout bounds the wait for a new connection's CONNECT packet
	// (TLS or WebSocket handshake included), and then the Authenticator
	// call. 0 means 10s.
	ConnectTimeout time.Duration
	// MaxPreAuthConns bounds the connections that have not logged in yet,
	// across the listeners, and MaxPreAuthPerSource those from one source
	// (an IPv4 address, an IPv6 /64). A new connection is always let in:
	// when the budget is spent, the one that has waited longest is closed
	// (one that sent no CONNECT before one whose login is under way), so
	// that held-open sockets cannot lock out a client that logs in
	// promptly. Such connections wait at most ConnectTimeout; the budget
	// keeps a flood of them from filling the listeners' cap. 0 means 1024
	// and 128.
	MaxPreAuthConns, MaxPreAuthPerSource int
	// MaxFailedLogins is how many failed logins in a row one source (an
	// IPv4 address, an IPv6 /64) may have for one username before its next
	// one must wait for FailedLoginRefill (and a source, across usernames,
	// three times as many, refilled three times as fast); until then its
	// logins are refused at once, without the KDF, and told so (MQTT 5:
	// 0x9F; 3.1.1: 0x03), not "bad username or password". A username, from
	// all sources together, has 10 × MaxFailedLogins, one back every
	// FailedLoginRefill/6 (twice a source's pace): guesses spread over many
	// addresses get that many, then one a refill, however many addresses
	// they come from, while one or two sources failing as fast as they may
	// never spend them, so they cannot lock the username out for another
	// address. A login
	// the cache of recent successful ones knows is never held back. 0
	// means 10 and 6s.
	MaxFailedLogins   int
	FailedLoginRefill time.Duration
	// MaxPresenceBytes bounds the payload of a presence status (topic
	// ff/v2/mcp/<agent>/<client ID>/status, and a Will on it): the broker
	// keeps it retained and every gateway holds and lists it. A bigger
	// publish is dropped (MQTT 5 QoS 1/2: PUBACK 0x99), a bigger Will
	// refused at login. The statuses of docs/protocol.md take some
	// hundred bytes. 0 means 4 KiB.
	MaxPresenceBytes int
	// InlineQoS is the QoS of messages the InlineBus publishes, as delivered
	// to subscribers (each subscription's own QoS caps it). 0 means QoS 0,
	// which is enough on a broker in the same process; 1 gives subscribers
	// at-least-once delivery from the broker.
	InlineQoS byte

	// Events, if set, hears of every login, refused login and disconnect
	// of a network client and of every publish or subscription the ACL
	// refused (the
	// audit log; see events.go). It runs on the broker's goroutines and
	// must not block. nil adds nothing to the broker.
	Events func(Event)

	// Logger receives the broker's logs and mochi's (bridged from log/slog);
	// nil discards them.
	Logger *logrus.Entry
}

// withDefaults validates o and returns a copy with defaults filled in.
func (o Options) withDefaults() (Options, error) {
	if o.Authenticator == nil {
		return o, fmt.Errorf("%w: Authenticator is required", ErrInvalidOptions)
	}
	if o.Authorizer == nil {
		return o, fmt.Errorf("%w: Authorizer is required", ErrInvalidOptions)
	}
	if o.TLSAddr != "" && (o.TLSConfig == nil || len(o.TLSConfig.Certificates) == 0 && o.TLSConfig.GetCertificate == nil) {
		return o, fmt.Errorf("%w: TLSAddr needs a TLSConfig with a certificate", ErrInvalidOptions)
	}
	if o.InlineQoS > 2 {
		return o, fmt.Errorf("%w: InlineQoS %d (want 0, 1 or 2)", ErrInvalidOptions, o.InlineQoS)
	}
	if o.MaxClients < 0 || o.SessionExpiry < 0 || o.MaxKeepAlive < 0 || o.ConnectTimeout < 0 || o.MaxPreAuthConns < 0 || o.MaxPreAuthPerSource < 0 ||
		o.MaxFailedLogins < 0 || o.FailedLoginRefill < 0 || o.MaxPresenceBytes < 0 {
		return o, fmt.Errorf("%w: negative limit", ErrInvalidOptions)
	}
	if o.TLSConfig != nil {
		o.TLSConfig = o.TLSConfig.Clone() // the caller may keep changing theirs
	}
	if o.MaxPacketSize == 0 {
		o.MaxPacketSize = DefaultMaxPacketSize
	}
	if o.SessionExpiry == 0 {
		o.SessionExpiry = DefaultSessionExpiry
	}
	if o.MaxClients == 0 {
		o.MaxClients = DefaultMaxClients
	}
	if o.MaxKeepAlive == 0 {
		o.MaxKeepAlive = DefaultMaxKeepAlive
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.MaxFailedLogins == 0 {
		o.MaxFailedLogins = DefaultMaxFailedLogins
	}
	if o.FailedLoginRefill == 0 {
		o.FailedLoginRefill = DefaultFailedLoginRefill
	}
	if o.MaxPresenceBytes == 0 {
		o.MaxPresenceBytes = DefaultMaxPresenceBytes
	}
	if o.MaxPreAuthConns == 0 {
		o.MaxPreAuthConns = DefaultMaxPreAuthConns
	}
	if o.MaxPreAuthPerSource == 0 {
		o.MaxPreAuthPerSource = DefaultMaxPreAuthPerSource
	}
	o.Logger = logutil.OrDiscard(o.Logger)
	if _, ok := o.Logger.Data["component"]; !ok {
		o.Logger = o.Logger.WithField("component", "broker")
	}
	return o, nil
}

// seconds converts d to whole seconds for mochi's capabilities, at least 1
// and at most max.
func seconds(d time.Duration, max int64) int64 {
	s := int64(d / time.Second)
	if s < 1 {
		s = 1
	}
	if s > max {
		s = max
	}
	return s
}

package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/backoff"
	"github.com/toolbus/toolbus/internal/pahoconn"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// ErrBrokerLinkDown is what /readyz reports while the link to an external
// broker is down (paho reconnects by itself).
var ErrBrokerLinkDown = errors.New("not connected to the external MQTT broker")

// checkExternal validates the external broker fields of cfg and fills in
// BrokerClientID. Nothing to do without BrokerURL.
func checkExternal(cfg *Config) error {
	if cfg.BrokerURL == "" {
		if cfg.BrokerUsername != "" || cfg.BrokerPassword != "" || cfg.BrokerTLS != nil || cfg.BrokerClientID != "" {
			return errors.New("server: broker username, password, TLS or client ID given without a broker URL")
		}
		return nil
	}
	urls := pahoconn.SplitURLs(cfg.BrokerURL)
	if len(urls) == 0 {
		return fmt.Errorf("server: broker URL %q: no URL in it", cfg.BrokerURL)
	}
	for _, raw := range urls { // one, or the nodes of a cluster
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("server: broker URL: %w", err)
		}
		switch u.Scheme {
		case "tcp", "ssl", "ws", "wss":
		default:
			return fmt.Errorf("server: broker URL %q: want tcp://host:port or ssl://host:port", raw)
		}
		if u.Host == "" {
			return fmt.Errorf("server: broker URL %q: no host", raw)
		}
		if cfg.BrokerTLS != nil && u.Scheme != "ssl" && u.Scheme != "wss" {
			return fmt.Errorf("server: broker TLS settings need an ssl:// broker URL, not %s://", u.Scheme)
		}
	}
	if cfg.BrokerUsername == "" {
		return errors.New("server: an external broker needs a username (an identity of role platform)")
	}
	if cfg.BrokerClientID == "" {
		// Derived from the platform ID, which is unique per replica: two
		// replicas with one client ID would knock each other off the broker.
		cfg.BrokerClientID = "toolbus-" + cfg.PlatformID
	}
	return nil
}

// external reports whether the process talks to an external broker.
func (s *Server) external() bool { return s.cfg.BrokerURL != "" }

// ErrNotPlatformIdentity is returned by Start when the store holds the
// gateway's broker identity (Config.BrokerUsername) with a role other than
// platform, or disabled: the broker would let it log in, but not read agent
// presence or publish requests, so every agent call would fail.
var ErrNotPlatformIdentity = errors.New("the gateway's broker identity is not an enabled identity of role platform")

// checkBrokerIdentity refuses a broker identity that the store holds with
// another role than platform, or disabled. One the store does not hold is
// a warning: the broker may know identities of its own.
func (s *Server) checkBrokerIdentity(ctx context.Context) error {
	user := s.cfg.BrokerUsername
	id, err := s.store.Identity(ctx, user)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.log.WithField("brokerUsername", user).Warn("the store has no MQTT identity of that name: the gateway needs one of role platform " +
			"on its broker (toolbus mqtt-user add --username NAME --role platform, then toolbus acl export and reload the broker), " +
			"unless the broker keeps identities of its own")
		return nil
	case err != nil:
		return fmt.Errorf("check the broker identity: %w", err)
	case id.Role != acl.RolePlatform:
		return fmt.Errorf("%w: %s has role %s, which may not read agent presence or send them requests: every agent call would fail "+
			"with \"no expert agent is online\". Start the gateway with an identity of role platform (--broker-username): "+
			"toolbus mqtt-user add --username gw --role platform --generate-password, then toolbus acl export and reload the broker",
			ErrNotPlatformIdentity, user, id.Role)
	case id.Disabled:
		return fmt.Errorf("%w: %s is disabled, and the broker refuses it once it has read the latest export: "+
			"toolbus mqtt-user enable --username %s, then toolbus acl export and reload the broker", ErrNotPlatformIdentity, user, user)
	}
	return nil
}

// dialExternal connects to the external broker as the platform identity.
func (s *Server) dialExternal(ctx context.Context) error {
	if err := s.checkBrokerIdentity(ctx); err != nil {
		return err
	}
	// A broker that is not up yet (a cluster node refuses MQTT for a few
	// seconds after it starts, say) is tried again, with backoff, rather
	// than taken for a fatal error.
	attempts, err := backoff.Retry(ctx, firstBrokerRetryDelay, maxBrokerRetryDelay, s.cfg.BrokerConnectTimeout,
		func() error {
			opts := requester.PahoBusOptions{
				BrokerURL: s.cfg.BrokerURL,
				Username:  s.cfg.BrokerUsername,
				Password:  s.cfg.BrokerPassword,
				TLSConfig: s.cfg.BrokerTLS,
				ClientID:  s.cfg.BrokerClientID,
				Logger:    s.cfg.Logger,
			}
			if s.cfg.OneReplySubscription {
				opts.AllReplies = contract.GatewayReplyFilter(s.cfg.PlatformID)
			}
			bus, err := requester.DialPahoBus(ctx, opts)
			s.pahoBus = bus
			return err
		},
		func(attempt int, err error, wait time.Duration) {
			s.log.WithError(err).WithFields(logrus.Fields{"attempt": attempt, "retryIn": wait.String()}).
				Warn("cannot connect to the external broker; trying again")
		})
	if err != nil {
		return fmt.Errorf("external broker: %w", err)
	}
	if attempts > 1 {
		s.log.WithField("attempts", attempts).Info("connected to the external broker")
	}
	return nil
}

// The backoff of the first connection to an external broker.
const (
	firstBrokerRetryDelay = 500 * time.Millisecond
	maxBrokerRetryDelay   = 10 * time.Second
)

// Bounds of the external broker's round-trip probe.
const (
	probeTrips   = 5
	probeTimeout = 5 * time.Second
)

// probeRun is the one run of the round-trip probe; its starter stops it.
type probeRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the probe and waits for it. A nil probeRun is stopped already.
func (p *probeRun) stop() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
}

// startProbe measures, once and in the background, a round trip over the
// external broker the way a tool call makes it, between two connections
// of the gateway's identity, on that identity's own probe topics. A broker that holds its small writes back (Mosquitto
// without set_tcp_nodelay) makes every sequential call wait for a delayed
// ACK: that is a warning naming the setting. A probe that cannot run (an
// ACL exported before the probe topics existed, a connection limit) is
// logged and changes nothing else.
func (s *Server) startProbe() *probeRun {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	p := &probeRun{cancel: cancel, done: make(chan struct{})}
	log := s.cfg.Logger.WithField("component", "broker-probe")
	go func() {
		defer close(p.done)
		defer cancel()
		r, err := s.probeExternal(ctx)
		if err != nil {
			log.WithError(err).Warn("could not measure the round trip over the external broker (toolbus acl export grants the probe topics)")
			return
		}
		fields := logrus.Fields{"roundTrip": r.RoundTrip.String(), "ackRoundTrip": r.AckRoundTrip.String(), "trips": r.Trips}
		if r.HoldsBackWrites() {
			log.WithFields(fields).Warn("the external broker holds small writes back (Nagle's algorithm): each tool call waits for a delayed ACK; " +
				"set set_tcp_nodelay true in mosquitto.conf (toolbus acl export writes it into toolbus.conf; docs/external-broker.md)")
			return
		}
		log.WithFields(fields).Info("round trip over the external broker")
	}()
	return p
}

// probeExternal dials the probe's two connections and runs the probe
// between them. They publish at QoS 1, as agents reply: the probe times the
// broker's acknowledgement, and a broker that holds its writes back holds
// the one that follows an acknowledgement.
func (s *Server) probeExternal(ctx context.Context) (requester.ProbeResult, error) {
	var peers [2]*requester.PahoBus
	for i, suffix := range []string{"-probe", "-probe2"} {
		peer, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{
			BrokerURL:      s.cfg.BrokerURL,
			Username:       s.cfg.BrokerUsername,
			Password:       s.cfg.BrokerPassword,
			TLSConfig:      s.cfg.BrokerTLS,
			ClientID:       s.cfg.BrokerClientID + suffix,
			ConnectTimeout: probeTimeout,
			PublishQoS1:    true,
			Logger:         s.cfg.Logger,
		})
		if err != nil {
			return requester.ProbeResult{}, err
		}
		defer peer.Close()
		peers[i] = peer
	}
	// The identity's own probe topics (acl.Policy); a random level keeps
	// replicas that share the identity apart.
	id := contract.RandomID(8)
	ping, pong := acl.ProbeTopic(s.cfg.BrokerUsername, id+"-ping"), acl.ProbeTopic(s.cfg.BrokerUsername, id+"-pong")
	return requester.ProbeBroker(ctx, peers[0], peers[1], ping, pong, probeTrips)
}

// bus is what the requester talks through: the embedded broker's inline
// client, or the link to the external broker.
func (s *Server) bus() requester.Bus {
	if s.pahoBus != nil {
		return s.pahoBus
	}
	return s.broker.Bus()
}

// ready is the gateway's readiness probe: the embedded broker accepts
// connections, or the link to the external one is up.
func (s *Server) ready(ctx context.Context) error {
	if s.pahoBus != nil {
		if !s.pahoBus.IsConnected() {
			return ErrBrokerLinkDown
		}
		return nil
	}
	return s.broker.Ready(ctx)
}

// PahoBus is the link to the external broker; nil with the embedded one.
func (s *Server) PahoBus() *requester.PahoBus { return s.pahoBus }

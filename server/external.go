package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/toolbus/toolbus/requester"
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
	u, err := url.Parse(cfg.BrokerURL)
	if err != nil {
		return fmt.Errorf("server: broker URL: %w", err)
	}
	switch u.Scheme {
	case "tcp", "ssl", "ws", "wss":
	default:
		return fmt.Errorf("server: broker URL %q: want tcp://host:port or ssl://host:port", cfg.BrokerURL)
	}
	if u.Host == "" {
		return fmt.Errorf("server: broker URL %q: no host", cfg.BrokerURL)
	}
	if cfg.BrokerTLS != nil && u.Scheme != "ssl" && u.Scheme != "wss" {
		return fmt.Errorf("server: broker TLS settings need an ssl:// broker URL, not %s://", u.Scheme)
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

// dialExternal connects to the external broker as the platform identity.
func (s *Server) dialExternal(ctx context.Context) error {
	bus, err := requester.DialPahoBus(ctx, requester.PahoBusOptions{
		BrokerURL: s.cfg.BrokerURL,
		Username:  s.cfg.BrokerUsername,
		Password:  s.cfg.BrokerPassword,
		TLSConfig: s.cfg.BrokerTLS,
		ClientID:  s.cfg.BrokerClientID,
		Logger:    s.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("external broker: %w", err)
	}
	s.pahoBus = bus
	return nil
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

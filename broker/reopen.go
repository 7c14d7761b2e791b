package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// ErrNoTCPListener is returned by CloseTCP and ReopenTCP on a broker
// started without a TCP listener (Options.Addr empty).
var ErrNoTCPListener = errors.New("broker has no TCP listener")

// tcpListenerID is the mochi listener ID of the TCP listener (see Start).
const tcpListenerID = "tcp"

// CloseTCP closes the TCP listener while the broker keeps running: new
// connections are refused and every client connected through it is
// disconnected (its Will is published), as when the broker's network goes
// away. The inline bus, its subscriptions, retained messages and the other
// listeners stay. ReopenTCP listens again on the same address. Closing a
// closed listener does nothing.
func (b *Broker) CloseTCP() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.tcpChangeAllowed(); err != nil {
		return err
	}
	if _, ok := b.srv.Listeners.Get(tcpListenerID); !ok {
		return nil
	}
	// Our netListener's Close disconnects its clients and waits for its
	// goroutines; the CloseFn mochi would pass is not used.
	b.srv.Listeners.Close(tcpListenerID, nil)
	b.srv.Listeners.Delete(tcpListenerID)
	b.log.WithField("tcp", addrString(b.tcp)).Info("mqtt tcp listener closed")
	return nil
}

// ReopenTCP binds the TCP listener again on the address it had (the port
// Start picked, for port 0) and serves it, so that clients can reconnect
// where they were. ctx bounds the bind. Reopening an open listener does
// nothing.
func (b *Broker) ReopenTCP(ctx context.Context) error {
	// b.mu is held across the Add: Close marks the broker closed under it
	// before mochi closes every listener, so a listener added here is
	// either refused or closed by Close.
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.tcpChangeAllowed(); err != nil {
		return err
	}
	if _, ok := b.srv.Listeners.Get(tcpListenerID); ok {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", b.tcp.String())
	if err != nil {
		return fmt.Errorf("broker: reopen tcp %s: %w", b.tcp, err)
	}
	l := newNetListener(tcpListenerID, "tcp", ln, b.connLimits(), b.srv, b.log)
	if err := b.srv.AddListener(l); err != nil {
		_ = ln.Close()
		return fmt.Errorf("broker: reopen tcp: %w", err)
	}
	b.srv.Listeners.Serve(tcpListenerID, b.srv.EstablishConnection)
	b.log.WithField("tcp", addrString(b.tcp)).Info("mqtt tcp listener reopened")
	return nil
}

// tcpChangeAllowed says whether the TCP listener can be closed or reopened
// now. Called with b.mu held.
func (b *Broker) tcpChangeAllowed() error {
	switch {
	case b.state == stateNew:
		return ErrNotStarted
	case b.state == stateClosed:
		return ErrClosed
	case b.tcp == nil:
		return ErrNoTCPListener
	}
	return nil
}

// connLimits are the limits Start gives each listener, with the takeover
// repair after each connection. Room above MaxClients for logins in
// progress, so that a client over the limit hears mochi's CONNACK "server
// unavailable" rather than a closed connection.
func (b *Broker) connLimits() connLimits {
	return connLimits{connectTimeout: b.opts.ConnectTimeout, maxConns: b.opts.MaxClients + 64, preauth: b.preauth,
		began: b.takeover.connBegan, ended: b.takeover.connEnded}
}

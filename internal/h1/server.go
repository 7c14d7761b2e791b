// Package h1 serves the common request of an HTTP/1.1 JSON endpoint (a
// keep-alive POST with a Content-Length to one known path) without
// net/http's per-request costs, and hands every other connection to a
// net/http Server, with the bytes it has read, to serve from then on.
//
// The requests it takes reach the same http.Handler, with an *http.Request
// and an http.ResponseWriter that frame and answer them as net/http's do
// (tests compare what a client gets from each; what differs is listed in
// response.go). What it saves per request: net/http's general header
// parser and its per-request read of the connection in the background (a
// goroutine, a read that fails with EAGAIN, two deadline changes), which
// net/http starts to notice a client that goes away. Here that watch
// starts only for a request that has run for a while (Options.WatchAfter).
// It serves plain TCP listeners only.
//
// Its parser accepts a strict subset of HTTP/1.1 and frames a message
// exactly as net/http does. Whatever it does not take (another method or
// path, chunked bodies, Expect, Upgrade, a bare LF, a head larger than its
// buffer, a malformed line) goes to net/http unread, which answers it as
// it would have without this package: request smuggling and malformed
// input are net/http's to judge.
package h1

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultWatchAfter = 50 * time.Millisecond
	// bufferSize is the read buffer of a connection: a request head larger
	// than this goes to net/http.
	bufferSize = 4096
)

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	// Paths are the request targets (exact, no query) whose POSTs the fast
	// path serves. None means the fallback serves the listener alone.
	Paths []string
	// WatchAfter is how long a request runs before its connection is
	// watched for the client going away (which cancels the request's
	// context, as net/http does at once). 0 means 50ms.
	WatchAfter time.Duration
	// Logger logs handler panics; nil means logrus's standard logger.
	Logger *logrus.Entry
}

// Server serves connections: the fast path while requests qualify, the
// fallback net/http Server from the first one that does not.
type Server struct {
	fallback *http.Server
	handler  http.Handler // fallback.Handler, or http.DefaultServeMux
	opts     Options
	log      *logrus.Entry
	handoff  *chanListener
	onWatch  func() // tests: a watch starts reading

	// inShutdown is set by Shutdown and Close, under mu (newConn reads it
	// there, so that no connection is added to done after Wait begins):
	// connections stop taking requests.
	inShutdown atomic.Bool
	fast       atomic.Uint64 // requests served by the fast path
	handedOver atomic.Uint64 // connections handed to the fallback

	mu     sync.Mutex
	ln     net.Listener
	conns  map[*conn]struct{}
	served chan struct{} // closed when the fallback's Serve has returned
	done   sync.WaitGroup
}

// ErrServerClosed is http.ErrServerClosed: Serve returns it after Shutdown
// or Close.
var ErrServerClosed = http.ErrServerClosed

// New returns a Server whose fast path serves fallback.Handler, with
// fallback's ReadHeaderTimeout, ReadTimeout, IdleTimeout and WriteTimeout
// (zero values as net/http reads them), and that hands other connections
// to fallback. The Server owns fallback from then on: its Shutdown and
// Close stop it.
func New(fallback *http.Server, opts Options) *Server {
	if opts.WatchAfter <= 0 {
		opts.WatchAfter = DefaultWatchAfter
	}
	opts.Paths = append([]string(nil), opts.Paths...)
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logrus.StandardLogger())
	}
	handler := fallback.Handler
	if handler == nil {
		handler = http.DefaultServeMux // as net/http
	}
	return &Server{
		fallback: fallback,
		handler:  handler,
		opts:     opts,
		log:      opts.Logger,
		conns:    make(map[*conn]struct{}),
		served:   make(chan struct{}),
	}
}

// Serve accepts connections on ln, a plain TCP listener (a TLS one would
// hide its *tls.Conn from net/http), until Shutdown or Close, and returns
// ErrServerClosed then. It always returns an error and closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.inShutdown.Load() || s.ln != nil {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	if len(s.opts.Paths) == 0 {
		s.mu.Unlock()
		return s.fallback.Serve(ln) // net/http alone
	}
	s.handoff = newChanListener(ln.Addr())
	s.mu.Unlock()

	go func() {
		defer close(s.served)
		_ = s.fallback.Serve(s.handoff)
		_ = s.handoff.Close() // no handover waits for a Serve that has returned
	}()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: wait and retry, as
				// net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			_ = ln.Close()
			return err
		}
		backoff = 0
		cn := s.newConn(c)
		if cn == nil {
			continue
		}
		go cn.serve()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// newConn registers c, or closes it and returns nil once the server is
// shutting down.
func (s *Server) newConn(c net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		_ = c.Close()
		return nil
	}
	cn := newConn(s, c)
	s.conns[cn] = struct{}{}
	s.done.Add(1)
	return cn
}

// forget drops c once its goroutine is done with it.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.done.Done()
}

// Stats are a Server's counters since New.
type Stats struct {
	// FastRequests is how many requests the fast path served.
	FastRequests uint64
	// HandedOver is how many connections went to the fallback server.
	HandedOver uint64
}

// Stats returns the Server's counters.
func (s *Server) Stats() Stats {
	return Stats{FastRequests: s.fast.Load(), HandedOver: s.handedOver.Load()}
}

// handOver gives c to the fallback server, or closes it if that server is
// gone.
func (s *Server) handOver(c net.Conn) {
	if !s.handoff.offer(c) {
		_ = c.Close()
		return
	}
	s.handedOver.Add(1)
}

// Shutdown stops accepting connections, closes idle ones, and waits until
// the requests in flight have been answered, or ctx ends (it returns
// ctx's error then, and leaves the rest to Close). The fallback server is
// shut down alongside with the same ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginShutdown()
	fallbackErr := make(chan error, 1)
	go func() { fallbackErr <- s.fallback.Shutdown(ctx) }()

	idle := make(chan struct{})
	go func() {
		s.done.Wait()
		close(idle)
	}()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var err error
wait:
	for {
		s.closeIdle()
		select {
		case <-idle:
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-t.C:
		}
	}
	if ferr := <-fallbackErr; err == nil {
		err = ferr
	}
	s.waitFallback()
	return err
}

// waitFallback waits for the fallback's Serve goroutine, if Serve started
// it; its listener is closed by then.
func (s *Server) waitFallback() {
	s.mu.Lock()
	started := s.handoff != nil
	s.mu.Unlock()
	if started {
		<-s.served
	}
}

// Close closes the listener and every connection at once, and the
// fallback server.
func (s *Server) Close() error {
	s.beginShutdown()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.rwc.Close()
	}
	s.mu.Unlock()
	err := s.fallback.Close()
	s.waitFallback()
	return err
}

func (s *Server) beginShutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return
	}
	s.inShutdown.Store(true)
	if s.handoff != nil { // else net/http serves ln alone and closes it
		_ = s.ln.Close()
		// net/http closes it too, but only if its Serve has begun.
		_ = s.handoff.Close()
	}
}

// closeIdle closes the connections waiting for their next request.
func (s *Server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.closeIfIdle()
	}
}

// chanListener is the net.Listener the fallback server accepts handed-over
// connections from.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// offer hands c to Accept; false once the listener is closed.
func (l *chanListener) offer(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

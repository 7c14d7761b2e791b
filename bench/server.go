package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
)

// Baseline server names, in the order a default run measures them.
const (
	BaselineBare           = "bare"
	BaselineMCPGo          = "mcp-go"
	BaselineGoSDK          = "go-sdk"
	BaselineGoSDKStateless = "go-sdk-stateless"
)

// EchoTool is the name of the one tool every baseline serves: {"text": s} → s
// as text content. The reference expert agent serves a tool of the same name
// and shape, so the gateway can be measured with the same requests.
const EchoTool = "echo"

// Endpoint is the path every baseline serves MCP on.
const Endpoint = "/mcp"

// ErrUnknownBaseline is returned for a baseline name that is not one of
// BaselineNames.
var ErrUnknownBaseline = errors.New("bench: unknown baseline")

// Server is a baseline MCP server listening on loopback.
type Server interface {
	// Start binds the listener and serves in the background; the server
	// accepts connections when Start returns.
	Start(ctx context.Context) error
	// URL is the MCP endpoint, valid after Start.
	URL() string
	// Close stops serving and waits for the serving goroutine; idempotent.
	Close() error
}

// ServerOptions configure a baseline server.
type ServerOptions struct {
	// Addr is the listen address; "" means "127.0.0.1:0" (a free port).
	Addr string
	// MaxBodyBytes bounds a request body; 0 means 8 MiB.
	MaxBodyBytes int64
	// Logger receives lifecycle logs; nil means discard.
	Logger *logrus.Entry
}

func (o ServerOptions) withDefaults(component string) ServerOptions {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8 << 20
	}
	o.Logger = logutil.Component(o.Logger, component)
	return o
}

// BaselineNames lists the baselines in the order a default run measures
// them.
func BaselineNames() []string {
	return []string{BaselineBare, BaselineMCPGo, BaselineGoSDK, BaselineGoSDKStateless}
}

// DefaultProtocolVersion is the protocol version a baseline is driven with
// when none is asked for: the go-sdk stateless server is measured the way a
// stateless deployment is meant to be used (2026-07-28, per-request _meta),
// the others with a legacy session.
func DefaultProtocolVersion(baseline string) string {
	if baseline == BaselineGoSDKStateless {
		return ProtocolModern
	}
	return ProtocolLegacy
}

// NewBaseline returns the named baseline server, not started.
func NewBaseline(name string, opts ServerOptions) (Server, error) {
	switch name {
	case BaselineBare:
		return NewBareServer(opts), nil
	case BaselineMCPGo:
		return NewMCPGoServer(opts), nil
	case BaselineGoSDK:
		return NewGoSDKServer(GoSDKOptions{ServerOptions: opts}), nil
	case BaselineGoSDKStateless:
		return NewGoSDKServer(GoSDKOptions{ServerOptions: opts, Stateless: true}), nil
	}
	return nil, fmt.Errorf("%w: %q (known: %v)", ErrUnknownBaseline, name, BaselineNames())
}

// httpServer is the listener and http.Server lifecycle the baselines share,
// so that they differ only in their handler.
type httpServer struct {
	log     *logrus.Entry
	handler http.Handler

	mu     sync.Mutex
	srv    *http.Server
	url    string
	done   chan struct{} // closed when Serve returns
	closed bool
}

func (h *httpServer) start(ctx context.Context, addr string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv != nil || h.closed {
		return errors.New("bench: server already started or closed")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("bench: listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Endpoint, h.handler)
	h.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: SSE responses stream.
		ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
	}
	h.url = "http://" + ln.Addr().String() + Endpoint
	h.done = make(chan struct{})
	srv, done := h.srv, h.done
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.log.WithError(err).Error("serve failed")
		}
	}()
	h.log.WithField("url", h.url).Debug("listening")
	return nil
}

func (h *httpServer) URL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.url
}

func (h *httpServer) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	srv, done := h.srv, h.done
	h.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		// Streams still open after the deadline: cut them.
		err = srv.Close()
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		return errors.New("bench: server goroutine did not stop")
	}
	return err
}

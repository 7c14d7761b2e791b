// Package gateway is the HTTP side of toolbus: the router, health and
// readiness endpoints, and (next) the MCP endpoint that aggregates platform
// and expert-agent tools.
package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"
)

// Options configures a Gateway. The zero value of each field is a usable default.
type Options struct {
	// Ready reports whether the gateway can serve MCP traffic (the broker link
	// is up). nil means always ready.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one readiness probe; 0 means 2s.
	ReadyTimeout time.Duration
	// Logger receives request logs; nil discards them.
	Logger *logrus.Entry
}

// Gateway is the HTTP handler of a toolbus process.
type Gateway struct {
	opts   Options
	router *mux.Router
}

// New returns a Gateway with its routes registered.
func New(opts Options) *Gateway {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Second
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.Out = io.Discard
		opts.Logger = logrus.NewEntry(l)
	}
	g := &Gateway{opts: opts, router: mux.NewRouter()}
	g.router.HandleFunc("/healthz", g.healthz).Methods(http.MethodGet, http.MethodHead)
	g.router.HandleFunc("/readyz", g.readyz).Methods(http.MethodGet, http.MethodHead)
	return g
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.router.ServeHTTP(w, r) }

func (g *Gateway) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	if g.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), g.opts.ReadyTimeout)
		defer cancel()
		if err := g.opts.Ready(ctx); err != nil {
			writeError(w, http.StatusServiceUnavailable, "not_ready", err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// writeError writes the JSON error shape used where no JSON-RPC response
// applies: {"error": "code", "message": "..."}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}

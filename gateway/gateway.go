// Package gateway is the HTTP side of toolbus: the router, the MCP endpoint
// (Streamable HTTP, protocol versions 2025-06-18, 2025-11-25 and
// 2026-07-28) that lists and calls the union of platform tools and
// expert-agent tools, the auth middleware that checks tokens before anything
// runs, and the health endpoints.
//
// The endpoint is written for a lean hot path: requests are decoded once,
// expert-agent results pass through as raw JSON, and a response becomes an
// SSE stream only when a notification must go out before the result.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// TokenAuthenticator checks bearer tokens (*store.Store).
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, secret string) (store.Token, error)
}

// AgentRequester reaches the expert agents (*requester.Requester).
type AgentRequester interface {
	// Request sends a request in context c to agent (its name on the bus).
	Request(ctx context.Context, c contract.Context, agent string, caller *contract.Caller, method string, params json.RawMessage, interim requester.InterimFunc) (*jsonrpc.Message, error)
	// OnlineAgents names the agents with an instance online, sorted. Just
	// after the requester starts it may wait a moment for their presence.
	OnlineAgents(ctx context.Context) []string
	PresenceGeneration() uint64
}

// PlatformTools are the tools defined in the gateway (*platformtools.Registry).
type PlatformTools interface {
	Tools() []platformtools.Tool
	Lookup(name string) (platformtools.Tool, bool)
	Call(ctx context.Context, call *platformtools.Call) (json.RawMessage, error)
}

// Options configures a Gateway. Tokens, Agents and PlatformID are required;
// the zero value of every other field is a usable default.
type Options struct {
	Tokens     TokenAuthenticator
	Agents     AgentRequester
	PlatformID string // this gateway's name on the bus (a topic level)

	// Platform holds the platform tools; nil means none.
	Platform PlatformTools
	// API is the platform's REST API, served under /api/v1/ behind the auth
	// middleware (and reached by platform tools through injection); nil: none.
	API http.Handler

	// Ready reports whether the gateway can serve MCP traffic (the broker
	// link is up). nil means always ready.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one readiness probe; 0 means 2s.
	ReadyTimeout time.Duration

	// MaxBodyBytes bounds a request body (413 above it); 0 means 4 MiB.
	MaxBodyBytes int64
	// AllowedHosts are the Host header values served (DNS rebinding
	// protection); empty means any. A gateway listening on loopback should
	// pass LoopbackHosts (plus any name it is reached by).
	AllowedHosts []string
	// AllowedOrigins are browser origins (scheme://host[:port]) allowed to
	// call; an Origin whose host is in AllowedHosts passes too. Requests
	// without Origin (non-browser clients) always pass this check.
	AllowedOrigins []string

	// SessionSecret signs session IDs; replicas that share it accept each
	// other's sessions. Empty means a random secret per process.
	SessionSecret []byte
	// EndedSessions is the store the replicas share, where a session a
	// client ends is recorded and every replica looks before serving one
	// (session_shared.go); nil means this process alone knows.
	EndedSessions EndedSessions
	// EndedSessionsCacheTTL is how long a "not ended" answer of
	// EndedSessions is trusted per session: how late another replica may
	// still serve a session ended elsewhere. 0 means 1s; negative asks on
	// every request.
	EndedSessionsCacheTTL time.Duration
	// SessionTTL is how long an idle session lives; 0 means 24h.
	SessionTTL time.Duration
	// MaxSessionsPerToken bounds the live sessions of one token (the
	// tokens an OAuth client holds for one user count as one) on this
	// replica: an initialize past it ends the token's least recently used
	// session, as a DELETE would (its client gets 404 and initializes
	// anew). 0 means DefaultMaxSessionsPerToken (128); negative, no bound.
	MaxSessionsPerToken int
	// MaxSessionsPerUser bounds the live sessions of one user, all tokens
	// together, on this replica: an initialize past it ends the least
	// recently used session of the same token, never another token's (one
	// token must not end the sessions of the user's other clients); a
	// token with none is refused, HTTP 429 with Retry-After. 0 means
	// DefaultMaxSessionsPerUser (512); negative, no bound.
	MaxSessionsPerUser int
	// ToolListTTL is how long an expert agent's tool list is reused for a
	// context; 0 means 30s. A presence change makes it stale at once.
	ToolListTTL time.Duration
	// ListTimeout bounds the fetch of an expert agent's tool list inside
	// tools/list; 0 means 5s. Platform tools come back even when it passes.
	ListTimeout time.Duration
	// MaxContexts bounds the cached agent tool lists; 0 means 10000.
	MaxContexts int
	// ToolsPageSize is the most tools one tools/list page holds; 0 means
	// 1000. Clients follow nextCursor for the rest.
	ToolsPageSize int
	// AgentToolNames is how expert-agent tools are named in the union:
	// NamesQualifyOnCollision (the zero value "" means it) or
	// NamesAlwaysQualify.
	AgentToolNames string
	// MaxAgentTools bounds the tools kept of one expert agent's tools/list
	// answer in a context; 0 means DefaultMaxAgentTools (1000). What the
	// bounds leave out is logged once per answer and counted (Stats.AgentToolsLeftOut).
	MaxAgentTools int
	// MaxAgentListBytes bounds one expert agent's tools/list answer in a
	// context, all pages together (no page is asked past it); 0 means
	// DefaultMaxAgentListBytes (2 MiB).
	MaxAgentListBytes int
	// MaxToolBytes bounds one tool definition of an expert agent (a larger
	// one is left out); 0 means DefaultMaxToolBytes (64 KiB).
	MaxToolBytes int
	// ListChangedInterval is the least time between two
	// notifications/tools/list_changed on a listening stream: a burst of
	// changes (presence churn) is one notification at once and one when the
	// interval ends, so the last change is never lost. 0 means
	// DefaultListChangedInterval (1s); negative: every change at once.
	ListChangedInterval time.Duration

	// PublicURL is scheme://host[:port] as clients reach the gateway
	// (behind a proxy, say), for the OAuth metadata (PRMPath) and the 401
	// challenge; "" means each request's own Host. See CheckPublicURL.
	PublicURL string
	// Console is the operator console (*console.Console), served under
	// /console/ with its own sign-in; nil: not served.
	Console http.Handler
	// AuthServer is the OAuth authorization server (*oauth.Server) served
	// on the same origin: its metadata under /.well-known/ and its
	// endpoints under /oauth/, and named in the Protected Resource
	// Metadata. nil means none: clients bring personal tokens.
	AuthServer http.Handler
	// ServerName and ServerVersion are the serverInfo; "" means "toolbus", "dev".
	ServerName, ServerVersion string
	// Instructions are returned by initialize; "" means none.
	Instructions string

	// RateLimits bound requests per token, per user and to the expert
	// agents' tools; the zero value limits nothing.
	RateLimits RateLimits

	// Observer hears of tool calls, refusals and requests (metrics, the
	// audit log); nil means nobody listens.
	Observer Observer
	// Metrics serves GET /metrics (Prometheus) to tokens with the admin or
	// metrics scope; nil means no such endpoint.
	Metrics http.Handler

	// Logger receives request logs; nil discards them.
	Logger *logrus.Entry
}

// Gateway is the HTTP handler of a toolbus process.
type Gateway struct {
	opts     Options
	log      *logrus.Entry
	router   *mux.Router
	sessions *sessions
	catalogs *catalogs
	owners   *ownerCache // who serves which resource and prompt (aggregate.go)
	silent   sync.Map    // agent -> time.Time: its tool list timed out; left out until then
	toolSets *toolSets
	stats    gatewayStats
	limits   atomic.Pointer[rateLimiter]

	platformRaw map[string]json.RawMessage // platform tools as listed, by name
	serverInfo  json.RawMessage

	requestPrefix string
	requestSeq    atomic.Uint64

	listeners *listeners // the open listening streams (listen.go)

	done chan struct{}  // closed by Close; stops the session sweeper and the presence watch
	wg   sync.WaitGroup // the presence watch
}

// ErrOptions is returned by New for options that cannot work.
var ErrOptions = errors.New("gateway: invalid options")

// New returns a Gateway with its routes registered. Close stops its
// background work.
func New(opts Options) (*Gateway, error) {
	if opts.Tokens == nil || opts.Agents == nil {
		return nil, errors.Join(ErrOptions, errors.New("Tokens and Agents are required"))
	}
	if err := contract.ValidateLevel(opts.PlatformID); err != nil {
		return nil, errors.Join(ErrOptions, err)
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Second
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.SessionTTL == 0 {
		opts.SessionTTL = 24 * time.Hour
	}
	if opts.ToolListTTL == 0 {
		opts.ToolListTTL = 30 * time.Second
	}
	if opts.ListTimeout == 0 {
		opts.ListTimeout = 5 * time.Second
	}
	if opts.MaxContexts == 0 {
		opts.MaxContexts = 10000
	}
	if opts.ToolsPageSize <= 0 {
		opts.ToolsPageSize = 1000
	}
	switch opts.AgentToolNames {
	case "":
		opts.AgentToolNames = NamesQualifyOnCollision
	case NamesQualifyOnCollision, NamesAlwaysQualify:
	default:
		return nil, fmt.Errorf("%w: agent tool names %q: want %s or %s", ErrOptions, opts.AgentToolNames, NamesQualifyOnCollision, NamesAlwaysQualify)
	}
	if opts.ServerName == "" {
		opts.ServerName = "toolbus"
	}
	if opts.ServerVersion == "" {
		opts.ServerVersion = "dev"
	}
	opts.Logger = logutil.OrDiscard(opts.Logger)
	g := &Gateway{
		opts:     opts,
		log:      opts.Logger.WithField("component", "gateway"),
		router:   mux.NewRouter(),
		sessions: newSessions(opts.SessionSecret, opts.SessionTTL),
		catalogs: newCatalogs(opts.MaxContexts, opts.ToolListTTL),
		owners:   newOwnerCache(opts.MaxContexts),
		toolSets: newToolSets(),
		done:     make(chan struct{}),
	}
	g.listeners = newListeners()
	g.sessions.bound(opts.sessionBounds(), g.log)
	g.sessions.shareEnded(opts.EndedSessions, opts.EndedSessionsCacheTTL, g.log)
	g.limits.Store(newRateLimiter(opts.RateLimits))
	g.requestPrefix = randomHex(4)
	g.serverInfo, _ = json.Marshal(map[string]string{"name": opts.ServerName, "version": opts.ServerVersion})
	if err := g.encodePlatformTools(); err != nil {
		return nil, err
	}
	g.routes()
	go g.sweepSessions()
	if pn, ok := opts.Agents.(PresenceNotifier); ok {
		g.wg.Add(1)
		go g.watchPresence(pn)
	}
	return g, nil
}

func (g *Gateway) routes() {
	g.router.Use(g.withRequestID)
	g.router.NotFoundHandler = g.withRequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
	}))
	g.router.HandleFunc("/healthz", g.healthz).Methods(http.MethodGet, http.MethodHead)
	g.router.HandleFunc("/readyz", g.readyz).Methods(http.MethodGet, http.MethodHead)

	endpoint := http.Handler(http.HandlerFunc(g.serveMCP))
	endpoint = g.checkOrigin(g.authenticate(endpoint))
	g.router.Handle(MCPPath, endpoint)
	g.router.Handle(MCPPath+"/{entityType}/{entityId}", endpoint)
	// Tools over REST (rest.go), before the API's prefix, which would take them.
	g.router.Handle(ToolsPath, g.checkOrigin(g.authenticate(http.HandlerFunc(g.serveTools))))
	g.router.Handle(ToolsPath+"/{name}", g.checkOrigin(g.authenticate(http.HandlerFunc(g.serveToolCall))))
	if g.opts.API != nil {
		g.router.PathPrefix("/api/v1/").Handler(g.checkOrigin(g.authenticate(g.opts.API)))
	}
	if g.opts.Metrics != nil {
		g.router.Handle("/metrics", g.checkOrigin(g.authenticate(g.requireScope(g.opts.Metrics, store.ScopeAdmin, store.ScopeMetrics)))).
			Methods(http.MethodGet, http.MethodHead)
	}
}

// MCPPath is the MCP endpoint; MCPPath/{entityType}/{entityId} scopes it
// to an entity.
const MCPPath = "/api/v1/mcp"

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/.well-known/") {
		// Before the router, which redirects unclean paths: a client
		// would follow a redirect to a page it takes for metadata.
		g.serveWellKnown(w, r)
		return
	}
	if g.opts.Console != nil && (r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, "/console/")) {
		// Not behind the token check: the console has its own sign-in
		// (package console), and no token is ever typed into a page.
		if !g.hostAllowed(r.Host) {
			g.refuse(w, r, http.StatusForbidden, "forbidden_host", "Host "+quote(r.Host)+" is not served here")
			return
		}
		g.opts.Console.ServeHTTP(w, r)
		return
	}
	if g.opts.AuthServer != nil && strings.HasPrefix(r.URL.Path, "/oauth/") {
		// Not behind the token check: this is where tokens come from.
		if !g.hostAllowed(r.Host) {
			g.refuse(w, r, http.StatusForbidden, "forbidden_host", "Host "+quote(r.Host)+" is not served here")
			return
		}
		g.opts.AuthServer.ServeHTTP(w, r)
		return
	}
	g.router.ServeHTTP(w, r)
}

// Close stops the gateway's background work. In-flight requests are the
// http.Server's to drain (Shutdown) before Close.
func (g *Gateway) Close() {
	select {
	case <-g.done:
	default:
		close(g.done)
	}
	g.wg.Wait()
	g.listeners.stop() // after watchPresence, which may arm it, has returned
}

func (g *Gateway) sweepSessions() {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-g.done:
			return
		case now := <-t.C:
			g.sessions.sweep()
			g.limits.Load().sweep(now)
		}
	}
}

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

// Stats are the endpoint's counters.
type Stats struct {
	// Refused counts refused requests by reason (unauthenticated, forbidden, ...).
	Refused map[string]uint64
	// AgentListFailures counts tools/list answers given without the expert
	// agent's tools because the agent did not answer.
	AgentListFailures uint64
	// Sessions is the number of live sessions held.
	Sessions int
	// AgentToolsLeftOut counts expert-agent tools left out of the union,
	// by reason (LeftOutInvalidName, LeftOutDuplicate, LeftOutTooLarge,
	// LeftOutTooMany, LeftOutNameTaken), and answers cut short
	// (LeftOutPages). An answer is counted each time it is fetched.
	AgentToolsLeftOut map[string]uint64
	// AgentListsFetched counts the tools/list answers asked of agents (all
	// pages of one agent's answer count once).
	AgentListsFetched uint64
}

// Stats returns a snapshot of the counters.
func (g *Gateway) Stats() Stats {
	g.stats.mu.Lock()
	defer g.stats.mu.Unlock()
	s := Stats{Refused: map[string]uint64{}, AgentListFailures: g.stats.agentListFails, Sessions: g.sessions.count(),
		AgentToolsLeftOut: maps.Clone(g.stats.leftOut), AgentListsFetched: g.stats.agentLists}
	for k, v := range g.stats.refusals {
		s.Refused[k] = v
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on supported platforms
	return hex.EncodeToString(b)
}

// Package server assembles one toolbus process: the store, the embedded MQTT
// broker (or a link to an external one), the expert-agent requester and the
// HTTP gateway, started in that order and shut down in reverse.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/audit"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/buildinfo"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/metrics"
	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// Config is what a toolbus process needs. The zero value of each field is a
// usable default unless the field says otherwise.
type Config struct {
	// HTTPAddr is the gateway's listen address; "" means 127.0.0.1:8080.
	// Port 0 picks a free port (see Server.HTTPAddr).
	HTTPAddr string
	// TLSCertFile and TLSKeyFile, both set, make the gateway serve HTTPS on
	// HTTPAddr with that PEM certificate chain and private key. Reload
	// (SIGHUP) reads them again, so that a renewed certificate takes effect
	// without a restart; files that do not make a pair leave the served
	// certificate as it was. Both "" means plain HTTP.
	TLSCertFile, TLSKeyFile string
	// PublicURL is scheme://host[:port] as MCP clients reach the gateway
	// (a proxy's, say): the OAuth Protected Resource Metadata and the 401
	// challenge name it. "" means each request's own Host.
	PublicURL string
	// MQTTAddr is the embedded broker's TCP listen address; "" means
	// 127.0.0.1:1883. Port 0 picks a free port. Unused with BrokerURL.
	MQTTAddr string
	// MQTTWSAddr is an optional listen address of the embedded broker for
	// MQTT over WebSocket (plain ws://, any path), for agents that can
	// reach the gateway only through HTTP proxies; "" means none. Unused
	// with BrokerURL.
	MQTTWSAddr string

	// BrokerURL is an external MQTT broker (tcp://host:port or
	// ssl://host:port; ws:// and wss:// work too): no embedded broker is
	// started and the requester connects there with paho. "" means the
	// embedded broker. See docs/external-broker.md.
	BrokerURL string
	// BrokerUsername and BrokerPassword log in to the external broker, as an
	// identity of role platform. The username is required with BrokerURL.
	BrokerUsername, BrokerPassword string
	// BrokerTLS is used for ssl:// (and wss://) broker URLs; nil means Go's
	// defaults (the system's roots, no client certificate).
	BrokerTLS *tls.Config
	// BrokerConnectTimeout bounds how long Start keeps trying its first
	// connection to the external broker (with backoff, each failure
	// logged) before it fails: 0 means until its ctx is done, negative one
	// attempt.
	BrokerConnectTimeout time.Duration
	// OneReplySubscription subscribes, on the external broker, one filter
	// for every reply to this gateway (contract.GatewayReplyFilter) instead
	// of one per context; the context cache still says which contexts'
	// replies are taken. For NATS, which writes a client's whole
	// subscription list to JetStream at each subscription. See
	// docs/distributed.md.
	OneReplySubscription bool
	// BrokerClientID is the MQTT client ID on the external broker; "" means
	// "toolbus-" + PlatformID, so that replicas (each with its own platform
	// ID) never share one and knock each other off.
	BrokerClientID string
	// DataDir holds the store. Required unless StoreURL is set.
	DataDir string
	// StoreURL is a shared PostgreSQL store
	// (postgres://user:password@host:port/dbname), for several replicas;
	// "" means SQLite in DataDir. See docs/scale-out.md.
	StoreURL string
	// PlatformID names this process on the bus; "" means a random one per
	// start, so each replica receives only the replies to its own requests.
	PlatformID string

	// CallTimeout bounds an expert-agent call; 0 means 30s.
	CallTimeout time.Duration
	// ListTimeout bounds an expert-agent tool list; 0 means 5s.
	ListTimeout time.Duration
	// AgentToolNames is how agent tools are named in the union
	// (gateway.Options.AgentToolNames): "" or gateway.NamesQualifyOnCollision,
	// or gateway.NamesAlwaysQualify.
	AgentToolNames string
	// AddressAgentInstances sends each request to one online instance of
	// the agent (requester.Options.AddressInstances) instead of to its
	// pool: for brokers without shared subscriptions.
	AddressAgentInstances bool
	// SuspectAfter, with AddressAgentInstances, is how long an instance
	// may say nothing of a call sent to it before new calls go to the
	// agent's other instances until it is heard from
	// (requester.Options.SuspectAfter); 0 means 2s, negative never.
	SuspectAfter time.Duration
	// MaxContexts bounds the subscription cache; 0 means 10000.
	MaxContexts int
	// ContextTTL is how long an idle context keeps its subscription; 0 means 24h.
	ContextTTL time.Duration

	// HashIterations is the PBKDF2 iteration count for new MQTT passwords; 0
	// means acl.DefaultHashIterations.
	HashIterations int
	// BcryptCost is the cost of the bcrypt hash kept beside each new MQTT
	// password for NATS (store.StoreOptions.BcryptCost); 0 means
	// store.DefaultBcryptCost.
	BcryptCost int

	// SessionSecret signs MCP session IDs; replicas that share it accept
	// each other's sessions. "" means a random secret per start.
	SessionSecret string
	// SessionTTL is how long an idle MCP session lives; 0 means 24h.
	SessionTTL time.Duration
	// EndedSessionsCacheTTL is how long a replica trusts the store's "not
	// ended" answer for an MCP session, i.e. how late it may still serve a
	// session another replica ended; 0 means 1s, negative asks the store
	// on every request. See docs/scale-out.md.
	EndedSessionsCacheTTL time.Duration
	// ToolListTTL is how long an expert agent's tool list is reused per
	// context; 0 means 30s.
	ToolListTTL time.Duration
	// MaxSessionsPerToken and MaxSessionsPerUser bound the live MCP
	// sessions of one token and of one user on this replica
	// (gateway.Options); 0 means 128 and 512, negative no bound.
	MaxSessionsPerToken, MaxSessionsPerUser int
	// MaxAgentTools, MaxAgentListBytes and MaxToolBytes bound what is kept
	// of one expert agent's tools/list answer per context
	// (gateway.Options); 0 means 1000 tools, 2 MiB and 64 KiB.
	MaxAgentTools, MaxAgentListBytes, MaxToolBytes int
	// ListChangedInterval is the least time between two
	// notifications/tools/list_changed on a listening stream; 0 means 1s,
	// negative sends every change at once.
	ListChangedInterval time.Duration
	// MaxAgentInstances bounds the instances of one agent that presence
	// keeps (requester.Options.MaxInstancesPerAgent); 0 means 1024,
	// negative no bound.
	MaxAgentInstances int
	// MaxBodyBytes bounds an MCP request body; 0 means 4 MiB.
	MaxBodyBytes int64
	// AllowedHosts are extra Host names the gateway answers to. A gateway
	// listening on loopback answers to loopback names and these only; one
	// listening elsewhere answers to any Host unless this is set.
	AllowedHosts []string
	// AllowedOrigins are the browser origins allowed to call the endpoint.
	AllowedOrigins []string

	// ReadHeaderTimeout bounds the reading of a request's headers, counted
	// from the connection's accept (on a kept-alive connection, from the
	// first bytes of the next request): a client that sends its headers
	// slower is disconnected without an answer. 0 means 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, headers and body
	// (408 when the body is late). It does not bound the handling: a tool
	// call may run past it, up to CallTimeout. 0 means 60s.
	ReadTimeout time.Duration

	// Settings are the effective settings as the command resolved them,
	// secrets masked, for GET /api/v1/admin/config; nil shows none.
	Settings func() []admin.Setting

	// RateLimits bound requests per token, per user and to the expert
	// agents' tools; the zero value limits nothing.
	RateLimits gateway.RateLimits

	// Audit configures the audit log (server/audit.go).
	Audit AuditConfig

	// OAuth configures the built-in OAuth authorization server.
	OAuth OAuthConfig

	// Console configures the operator console at /console/.
	Console ConsoleConfig

	// Logger receives the process's logs; nil discards them.
	Logger *logrus.Entry
}

// OAuthConfig configures the built-in OAuth 2.1 authorization server
// (package oauth), on by default: MCP clients that only have the
// gateway's URL sign a user in and get a token for it. Personal tokens
// work beside it either way.
type OAuthConfig struct {
	// Disabled turns it off: the metadata names no authorization server
	// and /oauth/ is not served.
	Disabled bool
	// AccessTTL is the lifetime of the access tokens it issues; 0 means 1h.
	AccessTTL time.Duration
	// RefreshTTL is how long an unused refresh token stays valid; 0 means
	// 30 days.
	RefreshTTL time.Duration
	// GrantMaxAge is how long a consent lasts, refreshed or not, before
	// the user must sign in again; 0 means 90 days.
	GrantMaxAge time.Duration
	// UnusedClientTTL is how long a registered client no user consented
	// to is kept; 0 means 24h.
	UnusedClientTTL time.Duration
	// MaxUnusedClients bounds the clients registered through this process
	// that no user consented to (oauth.Options.MaxUnusedClients); 0 means
	// 5000, negative no bound but UnusedClientTTL.
	MaxUnusedClients int
	// RefreshGrace is how long the same client presenting its just-rotated
	// refresh token again gets the same tokens (oauth.Options.RefreshGrace);
	// 0 means 5s, negative none.
	RefreshGrace time.Duration
	// AllowPrivateClientMetadata lets Client ID Metadata Documents be
	// fetched from loopback and private addresses, over http too (tests,
	// closed networks).
	AllowPrivateClientMetadata bool
	// ClientMetadataTransport fetches Client ID Metadata Documents (tests
	// pass one that trusts their certificate); nil means a transport that
	// dials only what AllowPrivateClientMetadata allows.
	ClientMetadataTransport http.RoundTripper
	// RateLimit bounds sign-in attempts, token requests and registrations
	// per client address (and sign-ins per user) per minute; 0 means 30,
	// negative none. The console's sign-in has the same limit.
	RateLimit int
	// OIDC, with an Issuer, has users sign in at a company's OpenID
	// provider instead of with toolbus passwords (docs/oauth.md).
	OIDC oauth.OIDCOptions
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client's address for the rate limits, the refresh grace, the
	// audit log's source of refused HTTP requests and the console (its
	// sign-in limit and its records' source); nil means none.
	TrustedProxies []netip.Prefix
}

// maxHeaderBytes bounds a request's header block (net/http answers 431
// above it, plus its own 4 KiB of slack). Bearer tokens, session IDs and
// the MCP headers fit many times over.
const maxHeaderBytes = 64 << 10

// Server is a running toolbus process.
type Server struct {
	cfg       Config
	log       *logrus.Entry
	store     *store.Store
	policy    *acl.Policy
	broker    *broker.Broker
	pahoBus   *requester.PahoBus // the link to an external broker (external.go); nil with the embedded one
	probe     *probeRun          // the round-trip probe of the external broker (external.go)
	requester *requester.Requester
	gateway   *gateway.Gateway
	adminSvc  *admin.Service   // the admin model, shared by the API and the console (admin.go)
	console   *console.Console // nil when Config.Console.Disabled (console.go)
	callStats *console.Stats   // the console's call history; nil when disabled
	oauth     *oauth.Server    // nil when Config.OAuth.Disabled
	http      *http.Server
	handler   atomic.Pointer[http.Handler]    // what http serves: starting, then the gateway
	cert      atomic.Pointer[tls.Certificate] // the HTTPS certificate (Config.TLSCertFile)
	httpLn    net.Listener
	httpDone  chan error
	metrics   *metrics.Metrics
	audit     *audit.Log // server/audit.go
}

// New checks cfg and fills in its defaults. It starts nothing.
func New(cfg Config) (*Server, error) {
	if err := checkStore(&cfg); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.MQTTAddr == "" {
		cfg.MQTTAddr = "127.0.0.1:1883"
	}
	if cfg.PlatformID == "" {
		cfg.PlatformID = "gw-" + randomHex(6)
	}
	if cfg.ReadHeaderTimeout == 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 60 * time.Second
	}
	if cfg.ReadHeaderTimeout < 0 || cfg.ReadTimeout < 0 {
		return nil, errors.New("server: negative read timeout")
	}
	if err := contract.ValidateLevel(cfg.PlatformID); err != nil {
		return nil, fmt.Errorf("server: platform id: %w", err)
	}
	if err := checkExternal(&cfg); err != nil {
		return nil, err
	}
	if err := checkTLS(&cfg); err != nil {
		return nil, err
	}
	if cfg.PublicURL != "" {
		u, err := gateway.CheckPublicURL(cfg.PublicURL)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		cfg.PublicURL = u
	}
	cfg.Logger = logutil.OrDiscard(cfg.Logger)
	if err := gateway.PublicURLWarning(cfg.PublicURL); err != nil {
		cfg.Logger.WithField("component", "server").Warn(err.Error())
	}
	return &Server{cfg: cfg, log: cfg.Logger.WithField("component", "server")}, nil
}

// Start opens the store, starts the broker, the requester and the HTTP
// listener. When it returns nil every listener is bound. On error, whatever
// was started is stopped again.
func (s *Server) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = s.Shutdown(closeCtx)
		}
	}()
	s.store, err = s.openStore(ctx) // store.go
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if err := s.startAudit(); err != nil {
		return err
	}
	rules, err := s.store.ListRules(ctx)
	if err != nil {
		return fmt.Errorf("load rules: %w", err)
	}
	s.policy = acl.NewPolicy(rules)

	// HTTP answers from here on: alive but not ready (503) while Start
	// waits for an external broker, which may take long (a cluster node
	// refuses MQTT for seconds after it starts), then the gateway.
	if err := s.startHTTP(); err != nil {
		return err
	}
	if s.external() {
		if err := s.dialExternal(ctx); err != nil {
			return err
		}
		s.probe = s.startProbe()
	} else {
		s.broker, err = broker.New(broker.Options{
			Addr:          s.cfg.MQTTAddr,
			WSAddr:        s.cfg.MQTTWSAddr,
			Authenticator: s.store,
			Authorizer:    s.policy,
			Events:        s.auditBrokerEvents(),
			Logger:        s.cfg.Logger.WithField("component", "broker"),
		})
		if err != nil {
			return fmt.Errorf("broker: %w", err)
		}
		if err := s.broker.Start(ctx); err != nil {
			return fmt.Errorf("start broker: %w", err)
		}
	}

	s.requester = requester.New(s.bus(), requester.Options{
		CallTimeout:          s.cfg.CallTimeout,
		ListTimeout:          s.cfg.ListTimeout,
		AddressInstances:     s.cfg.AddressAgentInstances,
		SuspectAfter:         s.cfg.SuspectAfter,
		MaxContexts:          s.cfg.MaxContexts,
		ContextTTL:           s.cfg.ContextTTL,
		MaxInstancesPerAgent: s.cfg.MaxAgentInstances,
		Logger:               s.cfg.Logger.WithField("component", "requester"),
	})
	if err := s.requester.Start(ctx); err != nil {
		return fmt.Errorf("start requester: %w", err)
	}

	if err := s.startGateway(); err != nil {
		return err
	}
	if err := s.loadAgentLimits(ctx); err != nil {
		return err
	}
	// Listening streams never end by themselves: Shutdown ends them.
	s.http.RegisterOnShutdown(s.gateway.EndStreams)
	if s.console != nil {
		s.http.RegisterOnShutdown(s.console.EndStreams)
	}
	var h http.Handler = s.gateway
	s.handler.Store(&h)
	s.log.WithFields(logrus.Fields{
		"http": s.httpLn.Addr().String(), "mqtt": addrString(s.MQTTAddr()), "mqttWs": addrString(s.MQTTWSAddr()), "brokerUrl": s.cfg.BrokerURL, "platformId": s.cfg.PlatformID,
	}).Info("toolbus started")
	return nil
}

// startHTTP listens and serves starting until Start stores the gateway in
// s.handler.
func (s *Server) startHTTP() (err error) {
	if s.https() {
		if err := s.loadCert(); err != nil {
			return err
		}
	}
	s.httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	serveLn := s.httpLn
	if s.https() {
		serveLn = s.tlsListener(s.httpLn)
	}
	var h http.Handler = http.HandlerFunc(starting)
	s.handler.Store(&h)
	s.http = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			(*s.handler.Load()).ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	s.httpDone = make(chan error, 1)
	go func() { s.httpDone <- s.http.Serve(serveLn) }()
	return nil
}

// starting answers while Start waits: /healthz says the process is alive,
// everything else (/readyz, the MCP endpoint) 503, to try again shortly.
func starting(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"status":"starting"}`+"\n")
		return
	}
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"error":"starting","message":"toolbus is starting: waiting for its MQTT broker"}`+"\n")
}

// HTTPAddr is the bound HTTP address, once started.
func (s *Server) HTTPAddr() net.Addr { return s.httpLn.Addr() }

// BaseURL is where the gateway listens, http:// or https://, once started.
func (s *Server) BaseURL() string {
	if s.https() {
		return "https://" + s.HTTPAddr().String()
	}
	return "http://" + s.HTTPAddr().String()
}

// Handler is what the HTTP listener serves, once started: for callers that
// drive the gateway in-process (the handler benchmarks of package bench).
func (s *Server) Handler() http.Handler { return s.gateway }

// MQTTAddr is the bound address of the embedded broker's TCP listener, once
// started; nil with an external broker (Config.BrokerURL).
func (s *Server) MQTTAddr() net.Addr {
	if s.broker == nil {
		return nil
	}
	return s.broker.Addr()
}

// MQTTWSAddr is the bound address of the embedded broker's WebSocket
// listener, once started; nil without Config.MQTTWSAddr.
func (s *Server) MQTTWSAddr() net.Addr {
	if s.broker == nil {
		return nil
	}
	return s.broker.WSAddr()
}

// PlatformID is this process's name on the bus.
func (s *Server) PlatformID() string { return s.cfg.PlatformID }

// Store is the process's store.
func (s *Server) Store() *store.Store { return s.store }

// Requester is the process's expert-agent requester.
func (s *Server) Requester() *requester.Requester { return s.requester }

// Broker is the embedded broker; nil with an external one (Config.BrokerURL).
func (s *Server) Broker() *broker.Broker { return s.broker }

// Shutdown stops accepting HTTP requests and waits for those in flight (until
// ctx ends), then fails or finishes expert-agent calls, unsubscribes, closes
// the broker and the store. It is safe to call on a partly started Server.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	if s.http != nil {
		if err := s.drainHTTP(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		if err := <-s.httpDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http serve: %w", err))
		}
		s.http = nil
	}
	if s.gateway != nil {
		s.gateway.Close()
		s.gateway = nil
	}
	if s.requester != nil {
		if err := s.requester.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("requester: %w", err))
		}
		s.requester = nil
	}
	if s.broker != nil {
		if err := s.broker.Close(); err != nil {
			errs = append(errs, fmt.Errorf("broker: %w", err))
		}
		s.broker = nil
	}
	s.probe.stop()
	if s.pahoBus != nil {
		if err := s.pahoBus.Close(); err != nil {
			errs = append(errs, fmt.Errorf("external broker: %w", err))
		}
		s.pahoBus = nil
	}
	if err := s.closeAudit(ctx); err != nil {
		errs = append(errs, fmt.Errorf("audit log: %w", err))
	}
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("store: %w", err))
		}
		s.store = nil
	}
	return errors.Join(errs...)
}

// startGateway builds the platform tools, their REST API and the MCP
// endpoint. Platform tools inject their requests into the gateway's own
// router, so that the caller's token passes the same checks again.
func (s *Server) startGateway() error {
	router := &handlerRef{}
	reg := platformtools.NewRegistry(platformtools.Options{
		API:        router,
		InjectHost: "localhost",
		Logger:     s.cfg.Logger,
	})
	if err := platformtools.Register(reg); err != nil {
		return fmt.Errorf("platform tools: %w", err)
	}
	api := platformtools.NewAPI(platformtools.APIOptions{
		Agents: platformtools.AgentsFromStatus(s.requester.Agents),
		AgentTools: func(ctx context.Context, tok store.Token) ([]platformtools.AgentTool, error) {
			return s.gateway.AgentTools(ctx, tok) // set below, before the first request
		},
		Contexts: s.contextsOf,
		Logger:   s.cfg.Logger,
	})
	hosts := s.cfg.AllowedHosts
	if len(hosts) > 0 {
		hosts = append(hosts, "localhost") // the platform tools' injected requests
	}
	if ip := net.ParseIP(hostOf(s.httpLn.Addr())); ip != nil && ip.IsLoopback() {
		hosts = append(append([]string{}, gateway.LoopbackHosts...), hosts...)
	}
	observer := s.observer()
	authServer, err := s.authServer()
	if err != nil {
		return err
	}
	cons, err := s.newConsole()
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Options{
		Tokens:              s.store,
		Agents:              s.requester,
		PlatformID:          s.cfg.PlatformID,
		PublicURL:           s.cfg.PublicURL,
		ServerVersion:       buildinfo.Version(), // serverInfo.version: the build, not "dev"
		Platform:            reg,
		API:                 s.withAdmin(api), // /api/v1/admin/ to the admin API (server/admin.go)
		Ready:               s.ready,
		MaxBodyBytes:        s.cfg.MaxBodyBytes,
		AllowedHosts:        hosts,
		AllowedOrigins:      s.cfg.AllowedOrigins,
		SessionSecret:       []byte(s.cfg.SessionSecret),
		SessionTTL:          s.cfg.SessionTTL,
		ToolListTTL:         s.cfg.ToolListTTL,
		MaxSessionsPerToken: s.cfg.MaxSessionsPerToken,
		MaxSessionsPerUser:  s.cfg.MaxSessionsPerUser,
		MaxAgentTools:       s.cfg.MaxAgentTools,
		MaxAgentListBytes:   s.cfg.MaxAgentListBytes,
		MaxToolBytes:        s.cfg.MaxToolBytes,
		ListChangedInterval: s.cfg.ListChangedInterval,
		ListTimeout:         s.cfg.ListTimeout,
		AgentToolNames:      s.cfg.AgentToolNames,
		MaxContexts:         s.cfg.MaxContexts,
		RateLimits:          s.cfg.RateLimits,
		Observer:            observer,
		Metrics:             s.metrics.Handler(),
		AuthServer:          authServer,
		Console:             cons,
		Logger:              s.cfg.Logger,

		// A session ended on one replica is refused by all (server/store.go).
		EndedSessions:         s.store,
		EndedSessionsCacheTTL: s.cfg.EndedSessionsCacheTTL,
	})
	if err != nil {
		return err
	}
	router.h = gw
	s.gateway = gw
	return nil
}

// authServer is the gateway's OAuth authorization server, nil when
// disabled. It shares the gateway's origin, so its issuer is the
// gateway's public base URL.
func (s *Server) authServer() (http.Handler, error) {
	c := s.cfg.OAuth
	if c.Disabled {
		return nil, nil
	}
	publicURL := s.cfg.PublicURL
	var record func(store.AuditEvent)
	if s.audit != nil {
		record = s.audit.Record
	}
	as, err := oauth.New(oauth.Options{
		Store: s.store,
		// An operator's sign-in to the console at the OpenID provider
		// comes back through the provider's one redirect URI, here.
		ConsoleSignIn: func(w http.ResponseWriter, r *http.Request, user string, groups []string) {
			if s.console == nil {
				http.NotFound(w, r)
				return
			}
			s.console.SignedIn(w, r, user, groups)
		},
		Issuer: func(r *http.Request) string { return gateway.PublicBase(publicURL, r) },
		Resource: func(r *http.Request, resource string) bool {
			return gateway.IsResource(publicURL, r, resource)
		},
		DefaultResource:  func(r *http.Request) string { return gateway.PublicBase(publicURL, r) + gateway.MCPPath },
		Scopes:           append(slices.Clone(store.DefaultScopes), platformtools.ToolScopes()...),
		AccessTTL:        c.AccessTTL,
		RefreshTTL:       c.RefreshTTL,
		GrantMaxAge:      c.GrantMaxAge,
		UnusedClientTTL:  c.UnusedClientTTL,
		MaxUnusedClients: c.MaxUnusedClients,
		RefreshGrace:     c.RefreshGrace,
		ClientMetadata:   oauth.ClientMetadataOptions{AllowPrivate: c.AllowPrivateClientMetadata, Transport: c.ClientMetadataTransport},
		RateLimit:        c.RateLimit,
		TrustedProxies:   c.TrustedProxies,
		OIDC:             c.OIDC,
		Audit:            record,
		Logger:           s.cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	s.oauth = as
	return as, nil
}

// contextsOf lists a user's active contexts for the platform API.
func (s *Server) contextsOf(userID string) []platformtools.ContextInfo {
	var out []platformtools.ContextInfo
	for _, c := range s.requester.Contexts(userID) {
		out = append(out, platformtools.ContextInfo{PlatformID: c.Context.PlatformID, SessionID: c.Context.SessionID,
			EntityType: c.Context.EntityType, EntityID: c.Context.EntityID, LastUsed: c.LastUsed})
	}
	return out
}

// handlerRef lets the platform tools reach the gateway's router, which is
// built after them.
type handlerRef struct{ h http.Handler }

func (r *handlerRef) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.h.ServeHTTP(w, req) }

func hostOf(a net.Addr) string {
	h, _, _ := net.SplitHostPort(a.String())
	return h
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

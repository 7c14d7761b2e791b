package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/internal/netsrc"
	"github.com/toolbus/toolbus/internal/ratelimit"
	"github.com/toolbus/toolbus/store"
)

// Path is where the console is served; every page is under it.
const Path = "/console/"

// Defaults of Options.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxAge      = 12 * time.Hour
	DefaultMaxSessions = 1000
	// DefaultRateLimit is the sign-in attempts a minute of one client
	// address, and on one user name: the OAuth sign-in page's default.
	DefaultRateLimit = 30
)

// maxFormBytes bounds a posted form: a user name and a password.
const maxFormBytes = 16 << 10

// ErrNoUsers is returned by New without Options.Users.
var ErrNoUsers = errors.New("console: Options.Users is required")

// Users checks sign-ins and what a session depends on. *store.Store
// satisfies it: VerifyUser is the OAuth sign-in page's own check.
type Users interface {
	VerifyUser(ctx context.Context, id string, password []byte) error
	UserState(ctx context.Context, id string) (store.UserState, error)
}

// Presence signals agent presence changes. *requester.Requester
// satisfies it.
type Presence interface {
	PresenceChanged() <-chan struct{}
}

// BrokerState is the broker as the overview shows it.
type BrokerState struct {
	// External: the gateway uses an external broker (--broker-url);
	// otherwise the embedded one, in the same process.
	External bool
	// URL of the external broker; "" for the embedded one.
	URL string
	// Connected: the gateway's link to the broker is up (always true for
	// the embedded broker while it runs).
	Connected bool
}

// Options configures a Console. Users and Admin are required.
type Options struct {
	Users Users
	// Admin is the admin model the pages read (Agents).
	Admin *admin.Service
	// Presence wakes the agents page's event stream; nil: no live
	// updates (the page still shows the agents at load).
	Presence Presence
	// Broker reports the broker's state; nil shows it as unknown.
	Broker func() BrokerState
	// Sessions counts the MCP sessions open; nil shows none.
	Sessions func() int
	// Version is the build's version (internal/buildinfo).
	Version string
	// Secure: the console is served over HTTPS. The cookie is then
	// Secure and named with the __Host- prefix.
	Secure bool
	// IdleTimeout ends a session not used for that long; 0 means
	// DefaultIdleTimeout (30 min).
	IdleTimeout time.Duration
	// MaxAge ends a session that long after sign-in, used or not; 0 means
	// DefaultMaxAge (12 h).
	MaxAge time.Duration
	// MaxSessions bounds the sessions held (the oldest go first); 0 means
	// DefaultMaxSessions.
	MaxSessions int
	// RateLimit bounds the sign-in attempts of one client address, and
	// those on one user name, per minute (the OAuth server's
	// --oauth-rate-limit); 0 means DefaultRateLimit, negative none.
	RateLimit int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client's address (netsrc.ClientKey), for the sign-in limit and
	// the audit records' source; nil means none: the connection's peer is
	// the client.
	TrustedProxies []netip.Prefix
	// Audit records sign-ins, sign-outs and refusals; nil records none.
	Audit func(store.AuditEvent)
	// Logger gets one line per sign-in and refusal (component "console");
	// nil discards.
	Logger *logrus.Entry

	// ServeAs is the gateway's MCP endpoint for an in-process caller that
	// acts as a token without its secret (gateway.ServeAs): the Tools page
	// lists tools through it as a chosen user or token. nil: no Tools page.
	ServeAs func(tok store.Token) http.Handler
	// MCP is the gateway's whole handler, bearer check included: Try it
	// calls tools through it with a short-lived token minted for the
	// call. nil: no Try it.
	MCP http.Handler
	// Reload does what SIGHUP does (the Settings page's button); nil: the
	// page has no button.
	Reload func(ctx context.Context) error
	// Stats is the tool calls' recent history for the overview's charts
	// (the server adds it to the gateway's observers); nil: no charts.
	Stats *Stats
	// OpenID offers sign-in at the OpenID provider (serve --oidc-issuer)
	// beside passwords; nil: passwords only.
	OpenID *OpenID
	// AuditWritten returns a channel closed at the audit log's next write
	// (audit.Log.Written): the audit page's live tail wakes on it; nil:
	// no live tail.
	AuditWritten func() <-chan struct{}
}

// Console serves the console under Path. Create it with New; stop its
// streams with EndStreams.
type Console struct {
	opts     Options
	log      *logrus.Entry
	sessions *sessions
	// perIP and perUser bound sign-in attempts (Options.RateLimit); nil
	// allows all.
	perIP, perUser *ratelimit.Keyed
	pages          map[string]*template.Template
	handler        http.Handler

	done     chan struct{}
	doneOnce sync.Once
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// New returns a Console.
func New(opts Options) (*Console, error) {
	if opts.Users == nil {
		return nil, ErrNoUsers
	}
	if opts.Admin == nil {
		return nil, errors.New("console: Options.Admin is required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = DefaultRateLimit
	}
	c := &Console{opts: opts, log: logutil.Component(opts.Logger, "console"),
		sessions: newSessions(opts.IdleTimeout, opts.MaxAge, opts.MaxSessions),
		perIP:    ratelimit.NewKeyed(opts.RateLimit), perUser: ratelimit.NewKeyed(opts.RateLimit),
		pages: map[string]*template.Template{}, done: make(chan struct{})}
	if err := c.parsePages(); err != nil {
		return nil, err
	}
	assets, err := fs.Sub(assetFS, "assets")
	if err != nil {
		return nil, fmt.Errorf("console: assets: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path+"assets/", http.StripPrefix(Path+"assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET "+Path+"sign-in", c.signInPage)
	mux.HandleFunc("POST "+Path+"sign-in", c.signIn)
	mux.HandleFunc("POST "+Path+"sign-out", c.signOut)
	mux.HandleFunc("POST "+Path+"sign-in/openid", c.startOpenID)
	mux.HandleFunc("GET "+Path+"{$}", c.withSession(c.overview))
	mux.HandleFunc("GET "+Path+"agents", c.withSession(c.agents))
	mux.HandleFunc("GET "+Path+"agents/list", c.withBackground(c.agentList))
	mux.HandleFunc("GET "+Path+"agent", c.withSession(c.agentDetail))
	mux.HandleFunc("GET "+Path+"events", c.withBackground(c.events))
	// Each page's file adds its own routes.
	for _, add := range []func(*http.ServeMux){c.accessRoutes, c.mqttRoutes, c.auditRoutes, c.toolsRoutes, c.settingsRoutes, c.oauthRoutes} {
		add(mux)
	}
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		c.render(w, http.StatusNotFound, "refused", pageData{Title: "Not found", Message: "There is no such console page."})
	})
	// Go's cross-origin protection refuses a form posted from another
	// site (Sec-Fetch-Site, else Origin against Host): no page elsewhere
	// can sign an operator in or out, or act in their name.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.audit(r, store.AuditEvent{Action: "cross_origin", Outcome: "refused", Reason: "cross-origin form post to " + r.URL.Path, Status: http.StatusForbidden})
		c.render(w, http.StatusForbidden, "refused", pageData{Title: "Refused", Message: "The form was sent from another site. Open the console and try again."})
	}))
	c.handler = cop.Handler(mux)
	return c, nil
}

// parsePages parses every page: templates/NAME.html is the page NAME,
// with layout.html around it and the partials (templates/_*.html) beside.
func (c *Console) parsePages() error {
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return fmt.Errorf("console: templates: %w", err)
	}
	shared := []string{"templates/layout.html"}
	var pages []string
	for _, f := range files {
		base := path.Base(f)
		switch {
		case base == "layout.html":
		case strings.HasPrefix(base, "_"):
			shared = append(shared, f)
		default:
			pages = append(pages, f)
		}
	}
	for _, f := range pages {
		name := strings.TrimSuffix(path.Base(f), ".html")
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, append(shared, f)...)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	return nil
}

// ServeHTTP answers the console's paths with its security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if r.URL.Path == "/console" {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
		return
	}
	c.handler.ServeHTTP(w, r)
}

// csp allows the console's own script, style and images and nothing else:
// no inline script or style, no frames, forms only to the console's
// origin. Agent text that slipped into markup could run nothing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// securityHeaders go on every console answer. Referrer-Policy is
// same-origin, not no-referrer: under no-referrer a browser without
// Sec-Fetch-Site posts forms with "Origin: null", which the cross-origin
// check refuses.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// EndStreams ends every event stream and every session: for
// http.Server.RegisterOnShutdown, since Shutdown waits for open requests
// and streams never finish by themselves.
func (c *Console) EndStreams() {
	c.doneOnce.Do(func() { close(c.done) })
	c.sessions.endAll()
}

// cookieName is the session cookie's name: __Host- under HTTPS, so that
// the browser takes it only from this origin, Secure and for Path=/.
func (c *Console) cookieName() string {
	if c.opts.Secure {
		return "__Host-toolbus-console"
	}
	return "toolbus-console"
}

func (c *Console) setCookie(w http.ResponseWriter, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: c.cookieName(), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: c.opts.Secure, SameSite: http.SameSiteStrictMode})
}

// clientAddr is the source key of r's client (netsrc.ClientKey: an IPv6
// address by its /64): the connection's peer or, when that is one of
// Options.TrustedProxies, the address it forwards for.
func (c *Console) clientAddr(r *http.Request) string {
	return netsrc.ClientKey(r, c.opts.TrustedProxies)
}

// audit records e as a console event, with the client's address as its
// Source.
// maxLoggedUser bounds the user name a console log line or audit record
// holds, as the OAuth page bounds its fields.
const maxLoggedUser = 128

// maxLoggedReason bounds the reason of a console log line or audit record.
const maxLoggedReason = 256

func (c *Console) audit(r *http.Request, e store.AuditEvent) {
	e.Time, e.Kind = time.Now(), store.AuditConsole
	// A typed user name may be kilobytes: cut before the log and the record.
	e.UserID = clip.Marked(e.UserID, maxLoggedUser)
	// A reason may quote the request (a refused post's path): cut it too.
	e.Reason = clip.Marked(e.Reason, maxLoggedReason)
	if e.Outcome == "" {
		e.Outcome = "ok"
	}
	if e.Source == "" {
		e.Source = c.clientAddr(r)
	}
	log := c.log.WithFields(logrus.Fields{"action": e.Action, "outcome": e.Outcome, "user": e.UserID, "remote": e.Source})
	if e.Reason != "" {
		log = log.WithField("reason", e.Reason)
	}
	log.Info("console")
	if c.opts.Audit != nil {
		c.opts.Audit(e)
	}
}

package server

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/internal/buildinfo"
	"github.com/toolbus/toolbus/internal/pahoconn"
	"github.com/toolbus/toolbus/store"
)

// ConsoleConfig configures the operator console (package console). Its
// zero value serves it with the console's defaults.
type ConsoleConfig struct {
	// Disabled: /console/ is not served (--console=false).
	Disabled bool
	// IdleTimeout ends a console session unused for that long; 0 means
	// console.DefaultIdleTimeout (30 min).
	IdleTimeout time.Duration
	// MaxAge ends a console session that long after sign-in; 0 means
	// console.DefaultMaxAge (12 h).
	MaxAge time.Duration
	// OpenIDAdminGroups: members of these groups of the OpenID provider
	// (OAuthConfig.OIDC) sign in to the console (--oidc-admin-groups);
	// none: the console does not offer the provider.
	OpenIDAdminGroups []string
	// Reload does what SIGHUP does, for the console's Settings page; nil:
	// the page has no reload button. toolbus serve sets it.
	Reload func(ctx context.Context) error
}

// newConsole builds the console over the admin model, the store's
// sign-in check and the requester's presence signal; nil (a nil
// http.Handler, not a typed nil) when disabled.
func (s *Server) newConsole() (http.Handler, error) {
	if s.cfg.Console.Disabled {
		return nil, nil
	}
	svc, err := s.adminService()
	if err != nil {
		return nil, err
	}
	opts := console.Options{
		Users:   s.store,
		Admin:   svc,
		Version: buildinfo.Version(),
		// Behind a proxy that ends TLS the public URL says HTTPS: the
		// cookie must be Secure and __Host- there too.
		Secure:      s.https() || strings.HasPrefix(s.cfg.PublicURL, "https://"),
		IdleTimeout: s.cfg.Console.IdleTimeout,
		MaxAge:      s.cfg.Console.MaxAge,
		Logger:      s.cfg.Logger,
		// The OAuth sign-in's limit and proxies (--oauth-rate-limit,
		// --trusted-proxies): the console's sign-in checks the same
		// passwords.
		RateLimit:      s.cfg.OAuth.RateLimit,
		TrustedProxies: s.cfg.OAuth.TrustedProxies,
		Sessions: func() int {
			if s.gateway == nil {
				return 0
			}
			return s.gateway.Stats().Sessions
		},
		Broker: s.brokerState,
		// The gateway is made after the console (it serves it): these
		// run only on requests, after Start.
		ServeAs: func(tok store.Token) http.Handler { return s.gateway.ServeAs(tok) },
		MCP:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.gateway.ServeHTTP(w, r) }),
		Reload:  s.cfg.Console.Reload,
		Stats:   s.callStats,
	}
	if s.requester != nil {
		opts.Presence = s.requester
	}
	if s.oauth != nil && s.oauth.OIDCIssuer() != "" && len(s.cfg.Console.OpenIDAdminGroups) > 0 {
		opts.OpenID = &console.OpenID{Issuer: s.oauth.OIDCIssuer(), Start: s.oauth.StartConsoleSignIn,
			AdminGroups: s.cfg.Console.OpenIDAdminGroups}
	}
	if s.audit != nil {
		opts.Audit = s.audit.Record
		opts.AuditWritten = s.audit.Written
	}
	c, err := console.New(opts)
	if err != nil {
		return nil, err
	}
	s.console = c
	return c, nil
}

// brokerState is the broker as the console's overview shows it.
func (s *Server) brokerState() console.BrokerState {
	if !s.external() {
		return console.BrokerState{Connected: s.broker != nil}
	}
	st := console.BrokerState{External: true, URL: RedactURL(s.cfg.BrokerURL)}
	if s.pahoBus != nil {
		st.Connected = s.pahoBus.IsConnected()
	}
	return st
}

// RedactURL drops any user information from a broker URL list (comma
// separated) before it is shown: on the console's overview, in the
// effective settings.
func RedactURL(raw string) string {
	var out []string
	for _, u := range pahoconn.SplitURLs(raw) {
		if p, err := url.Parse(u); err == nil {
			p.User = nil
			u = p.String()
		}
		out = append(out, u)
	}
	return strings.Join(out, ",")
}

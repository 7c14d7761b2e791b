// Package oauth is toolbus's built-in OAuth 2.1 authorization server, the
// one the MCP authorization spec has clients find through the gateway's
// Protected Resource Metadata: RFC 8414 metadata (also at the OpenID
// discovery path), the authorization code flow with PKCE S256 only,
// Dynamic Client Registration (RFC 7591) and Client ID Metadata Documents,
// refresh tokens with rotation, revocation (RFC 7009) and resource
// indicators (RFC 8707).
//
// People sign in and consent on one server-rendered page that needs no
// JavaScript. A consent mints an ordinary toolbus token (acl.TokenSpec)
// bound to the resource the client asked for, so it shows in `token list`
// and the audit log, and revoking it ends the client's access. The state
// (clients, codes, grants) lives in the store (acl/oauth.go); this package
// speaks the protocol.
package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/logutil"
)

// Paths the server answers. The metadata paths are for an issuer without a
// path (the gateway's scheme://host), as RFC 8414 section 3 places them.
const (
	MetadataPath  = "/.well-known/oauth-authorization-server"
	OpenIDPath    = "/.well-known/openid-configuration"
	AuthorizePath = "/oauth/authorize"
	TokenPath     = "/oauth/token"
	RegisterPath  = "/oauth/register"
	RevokePath    = "/oauth/revoke"
)

// Store is where the server keeps its state and checks passwords
// (*acl.Store).
type Store interface {
	VerifyUser(ctx context.Context, id string, password []byte) error
	RegisterOAuthClient(ctx context.Context, name string, redirectURIs []string, confidential bool) (acl.OAuthClient, string, error)
	PurgeUnusedOAuthClients(ctx context.Context, registeredBefore time.Time) (int64, error)
	OAuthClient(ctx context.Context, id string) (acl.OAuthClient, error)
	SaveOAuthCode(ctx context.Context, c acl.OAuthCode) (string, error)
	RedeemOAuthCode(ctx context.Context, code string) (acl.OAuthCode, error)
	GrantOAuth(ctx context.Context, c acl.OAuthCode, refreshTTL time.Duration) (acl.OAuthTokens, error)
	RefreshOAuth(ctx context.Context, req acl.OAuthRefresh) (acl.OAuthTokens, error)
	RevokeOAuth(ctx context.Context, token, clientID string) error
	SavePendingLogin(ctx context.Context, data []byte, expires time.Time) (string, error)
	TakePendingLogin(ctx context.Context, state string) ([]byte, error)
}

// Options configures a Server. Store, Issuer and Resource are required;
// every other zero value is a usable default.
type Options struct {
	Store Store
	// Issuer is the server's issuer URL (scheme://host[:port], no path) as
	// the client of request r sees it: the gateway's public URL.
	Issuer func(r *http.Request) string
	// Resource reports whether resource names a protected resource of this
	// server as r sees it (an MCP endpoint of the gateway); DefaultResource
	// is the one a request that names none gets.
	Resource        func(r *http.Request, resource string) bool
	DefaultResource func(r *http.Request) string
	// Scopes are the scopes a client may ask for; nil means
	// acl.DefaultScopes. Asking for none gets acl.DefaultScopes.
	Scopes []string

	// AccessTTL is the lifetime of access tokens; 0 means 1h.
	AccessTTL time.Duration
	// RefreshTTL is how long a refresh token is valid, renewed at each
	// refresh; 0 means 30 days.
	RefreshTTL time.Duration
	// CodeTTL is the lifetime of an authorization code; 0 means 1 minute.
	CodeTTL time.Duration
	// GrantMaxAge bounds a grant's life however often it is refreshed:
	// the user signs in again after it (and a user removed at the OpenID
	// provider loses access by then at the latest); 0 means 90 days.
	GrantMaxAge time.Duration
	// UnusedClientTTL is how long a registered client no user consented
	// to is kept: registration is open to anyone, and this bounds what
	// registrations nobody signs in with leave. Each registration purges
	// the ones older than this. 0 means 24h.
	UnusedClientTTL time.Duration

	// ClientMetadata bounds the fetch of Client ID Metadata Documents.
	ClientMetadata ClientMetadataOptions

	// OIDC, with an Issuer, signs users in at a company's OpenID provider
	// instead of with toolbus passwords.
	OIDC OIDCOptions

	// RateLimit bounds the sign-in attempts, token requests and
	// registrations of one client address, and the sign-in attempts on one
	// user, per minute; 0 means 30, negative none.
	RateLimit int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client's address; nil means none: the connection's peer is the
	// client, and behind a proxy every client shares its limit.
	TrustedProxies []netip.Prefix

	// Audit receives a record of every sign-in, consent, token issued or
	// refreshed, registration, revocation, and every refusal; nil: none.
	Audit func(acl.AuditEvent)
	// Logger receives the server's logs; nil discards them.
	Logger *logrus.Entry
}

// Server is the authorization server, an http.Handler for the paths above.
type Server struct {
	opts    Options
	log     *logrus.Entry
	meta    *metaFetcher
	perIP   *keyedLimiter
	perUser *keyedLimiter
	oidc    *rp // nil: users sign in with toolbus passwords
	mux     *http.ServeMux
}

// New returns a Server for opts.
func New(opts Options) (*Server, error) {
	if opts.Store == nil || opts.Issuer == nil || opts.Resource == nil || opts.DefaultResource == nil {
		return nil, errors.New("oauth: Options.Store, Issuer, Resource and DefaultResource are required")
	}
	if opts.Scopes == nil {
		opts.Scopes = acl.DefaultScopes
	}
	if opts.AccessTTL <= 0 {
		opts.AccessTTL = time.Hour
	}
	if opts.RefreshTTL <= 0 {
		opts.RefreshTTL = 30 * 24 * time.Hour
	}
	if opts.CodeTTL <= 0 {
		opts.CodeTTL = time.Minute
	}
	if opts.GrantMaxAge <= 0 {
		opts.GrantMaxAge = 90 * 24 * time.Hour
	}
	if opts.UnusedClientTTL <= 0 {
		opts.UnusedClientTTL = 24 * time.Hour
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = 30
	}
	log := logutil.Component(opts.Logger, "oauth")
	s := &Server{
		opts:    opts,
		log:     log,
		meta:    newMetaFetcher(opts.ClientMetadata, log),
		perIP:   newKeyedLimiter(opts.RateLimit),
		perUser: newKeyedLimiter(opts.RateLimit),
		mux:     http.NewServeMux(),
	}
	if opts.OIDC.Issuer != "" {
		if opts.OIDC.ClientID == "" {
			return nil, errors.New("oauth: OIDC.ClientID is required with OIDC.Issuer")
		}
		if p := opts.OIDC.UserPrefix; p != "" && (len(p) > maxUserPrefix || !acl.ValidLevel(p)) {
			return nil, fmt.Errorf("oauth: OIDC.UserPrefix %q: want at most %d bytes of A-Z a-z 0-9 _ -", p, maxUserPrefix)
		}
		s.oidc = newRP(opts.OIDC)
	}
	s.mux.HandleFunc("GET "+MetadataPath, s.serveMetadata)
	s.mux.HandleFunc("GET "+OpenIDPath, s.serveMetadata)
	s.mux.HandleFunc("GET "+AuthorizePath, s.authorizePage)
	// Go's cross-origin protection refuses a form posted from another site
	// (Sec-Fetch-Site, else Origin against Host): the consent cannot be
	// given by a page the user did not mean to use.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.audit(r, acl.AuditEvent{Action: "authorize", Outcome: "refused", Reason: "cross-origin form post", Status: http.StatusForbidden})
		s.renderError(w, http.StatusForbidden, "The form was sent from another site. Start the sign-in again from the application.")
	}))
	s.mux.Handle("POST "+AuthorizePath, cop.Handler(http.HandlerFunc(s.authorizeSubmit)))
	s.mux.HandleFunc("GET "+CallbackPath, s.callback)
	s.mux.HandleFunc("POST "+TokenPath, s.token)
	s.mux.HandleFunc("POST "+RegisterPath, s.register)
	s.mux.HandleFunc("POST "+RevokePath, s.revoke)
	return s, nil
}

// Handles reports whether path is one the server answers.
func Handles(path string) bool {
	switch path {
	case MetadataPath, OpenIDPath, AuthorizePath, CallbackPath, TokenPath, RegisterPath, RevokePath:
		return true
	}
	return false
}

// ServeHTTP answers the server's paths; others get a JSON 404 and wrong
// methods a 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !Handles(r.URL.Path) {
		writeJSON(w, http.StatusNotFound, oauthError{Code: "not_found", Description: "no such OAuth endpoint"})
		return
	}
	if r.URL.Path != AuthorizePath && r.URL.Path != CallbackPath {
		// Browser-based clients (the MCP Inspector) call the JSON
		// endpoints from their own origin. No cookie is involved, so any
		// origin may; the page is another matter.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// metadata is RFC 8414's document. It is ours, not oauthex.AuthServerMeta,
// which writes an empty jwks_uri that strict clients reject as a URL.
type metadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	RevocationEndpoint                string   `json:"revocation_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	ResponseTypesSupported            []string `json:"response_types_supported"`
	ResponseModesSupported            []string `json:"response_modes_supported"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
	TokenEndpointAuthMethods          []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethods     []string `json:"revocation_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported"`
	IssParameterSupported             bool     `json:"authorization_response_iss_parameter_supported"`
}

// authMethods are the client authentications of the token and revocation
// endpoints: none for public clients (PKCE proves them), a secret for
// confidential ones.
var authMethods = []string{"none", "client_secret_basic", "client_secret_post"}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	iss := s.opts.Issuer(r)
	writeJSON(w, http.StatusOK, metadata{
		Issuer:                            iss,
		AuthorizationEndpoint:             iss + AuthorizePath,
		TokenEndpoint:                     iss + TokenPath,
		RegistrationEndpoint:              iss + RegisterPath,
		RevocationEndpoint:                iss + RevokePath,
		ScopesSupported:                   s.opts.Scopes,
		ResponseTypesSupported:            []string{"code"},
		ResponseModesSupported:            []string{"query"},
		GrantTypesSupported:               []string{"authorization_code", "refresh_token"},
		TokenEndpointAuthMethods:          authMethods,
		RevocationEndpointAuthMethods:     authMethods,
		CodeChallengeMethodsSupported:     []string{"S256"},
		ClientIDMetadataDocumentSupported: true,
		IssParameterSupported:             true,
	})
}

// oauthError is the error body of RFC 6749 section 5.2.
type oauthError struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// audit records an event of kind acl.AuditOAuth.
func (s *Server) audit(r *http.Request, e acl.AuditEvent) {
	e.Time = time.Now()
	e.Kind = acl.AuditOAuth
	if e.Outcome == "" {
		e.Outcome = "ok"
	}
	fields := logrus.Fields{"action": e.Action, "outcome": e.Outcome, "client": e.ClientID, "user": e.UserID, "remote": s.clientAddr(r)}
	if e.Reason != "" {
		fields["reason"] = e.Reason
	}
	s.log.WithFields(fields).Info("oauth " + e.Action)
	if s.opts.Audit != nil {
		s.opts.Audit(e)
	}
}

// clientAddr is the address a request came from, the key of the
// per-address rate limit: the connection's peer, or, when that is one of
// Options.TrustedProxies, the nearest address in X-Forwarded-For that is
// not. IPv6 addresses count by their /64, which one host usually holds
// whole.
func (s *Server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if s.trusted(ip) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // a hop we cannot read: trust nothing before it
			}
			ip = hop.Unmap()
			if !s.trusted(ip) {
				break
			}
		}
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

func (s *Server) trusted(ip netip.Addr) bool {
	return slices.ContainsFunc(s.opts.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// Package oauth is toolbus's built-in OAuth 2.1 authorization server, the
// one the MCP authorization spec has clients find through the gateway's
// Protected Resource Metadata: RFC 8414 metadata, the authorization code flow with PKCE S256 only,
// Dynamic Client Registration (RFC 7591) and Client ID Metadata Documents,
// refresh tokens with rotation, revocation (RFC 7009) and resource
// indicators (RFC 8707).
//
// People sign in and consent on one server-rendered page that needs no
// JavaScript. A consent mints an ordinary toolbus token (store.TokenSpec)
// bound to the resource the client asked for, so it shows in `token list`
// and the audit log, and revoking it ends the client's access. The state
// (clients, codes, grants) lives in the store (store/oauth.go); this package
// speaks the protocol.
package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/internal/netsrc"
	"github.com/toolbus/toolbus/internal/ratelimit"
	"github.com/toolbus/toolbus/store"
)

// Paths the server answers. The metadata path is for an issuer without a
// path (the gateway's scheme://host), as RFC 8414 section 3 places it.
// There is no OpenID discovery document (/.well-known/openid-configuration):
// the server issues no ID tokens, so it could not be a valid one (no
// jwks_uri, no signing algorithms), and MCP clients ask for RFC 8414's
// first and take the OpenID path only when that one is missing.
const (
	MetadataPath  = "/.well-known/oauth-authorization-server"
	AuthorizePath = "/oauth/authorize"
	TokenPath     = "/oauth/token"
	RegisterPath  = "/oauth/register"
	RevokePath    = "/oauth/revoke"
)

// Store is where the server keeps its state and checks passwords
// (*store.Store).
type Store interface {
	VerifyUser(ctx context.Context, id string, password []byte) error
	RegisterOAuthClient(ctx context.Context, name string, redirectURIs []string, confidential bool) (store.OAuthClient, string, error)
	PurgeUnusedOAuthClients(ctx context.Context, registeredBefore time.Time) (int64, error)
	OAuthClient(ctx context.Context, id string) (store.OAuthClient, error)
	SaveOAuthCode(ctx context.Context, c store.OAuthCode) (string, error)
	RedeemOAuthCode(ctx context.Context, code string) (store.OAuthCode, error)
	GrantOAuth(ctx context.Context, c store.OAuthCode, refreshTTL time.Duration) (store.OAuthTokens, error)
	RefreshOAuth(ctx context.Context, req store.OAuthRefresh) (store.OAuthTokens, error)
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
	// store.DefaultScopes. Asking for none gets store.DefaultScopes.
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
	// MaxUnusedClients bounds the clients registered through this server
	// (this process) that no user has consented to yet. When it is
	// reached, a registration first deletes the oldest unused ones
	// registered MinUnusedClientAge or more before; if there are none, it
	// is refused with 503 and Retry-After. 0 means DefaultMaxUnusedClients;
	// negative: no bound but UnusedClientTTL.
	MaxUnusedClients int
	// MaxUnusedClientsPerSource bounds those of them registered from one
	// source (a client address as the rate limits count it, an IPv6
	// address by its /64), so that filling MaxUnusedClients takes many
	// sources: beyond it that source's registrations are refused with 429
	// and Retry-After until one of its clients is used or goes with
	// UnusedClientTTL. 0 means DefaultMaxUnusedClientsPerSource; negative:
	// no bound per source.
	MaxUnusedClientsPerSource int
	// MaxRedirectURIs bounds the redirect URIs of one client, and
	// MaxRedirectURILen the bytes of each; MaxClientNameLen bounds its
	// client_name. 0 means DefaultMaxRedirectURIs, DefaultMaxRedirectURILen
	// and DefaultMaxClientNameLen. They bound what a registration (or a
	// Client ID Metadata Document) leaves in the store.
	MaxRedirectURIs, MaxRedirectURILen, MaxClientNameLen int

	// RefreshGrace is how long the answer to a refresh is given again to
	// the same client presenting the same (now rotated) refresh token for
	// the same resource: the same tokens, not new ones, so that a client
	// that retries, or refreshes from several requests at once, keeps its
	// grant. A public client, which has no secret to prove it is the
	// client, gets it only from the address of the refresh it repeats (as
	// the rate limits see it). Any other reuse of a rotated refresh token
	// still revokes the grant. 0 means DefaultRefreshGrace; negative: none
	// (every reuse revokes).
	RefreshGrace time.Duration

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

	// ConsoleSignIn receives the user and groups of a sign-in at the
	// OpenID provider that StartConsoleSignIn began, with the provider's
	// answer verified: it answers the browser (the operator console
	// makes its session). nil: StartConsoleSignIn refuses.
	ConsoleSignIn func(w http.ResponseWriter, r *http.Request, user string, groups []string)

	// Audit receives a record of every sign-in, consent, token issued or
	// refreshed, registration, revocation, and every refusal; nil: none.
	Audit func(store.AuditEvent)
	// Logger receives the server's logs; nil discards them.
	Logger *logrus.Entry
}

// Defaults of Options.
const (
	DefaultMaxUnusedClients = 5000
	// DefaultMaxUnusedClientsPerSource lets 50 sources, not fewer, fill
	// DefaultMaxUnusedClients.
	DefaultMaxUnusedClientsPerSource = 100
	DefaultMaxRedirectURIs           = 8
	DefaultMaxRedirectURILen         = 512
	DefaultMaxClientNameLen          = 200
	DefaultRefreshGrace              = 5 * time.Second
)

// MinUnusedClientAge is the least time a registered client is kept
// unused when Options.MaxUnusedClients is reached (UnusedClientTTL if
// shorter): the time a user may take to sign in, as a pending sign-in at
// an OpenID provider is kept.
const MinUnusedClientAge = 10 * time.Minute

// Server is the authorization server, an http.Handler for the paths above.
type Server struct {
	opts     Options
	log      *logrus.Entry
	meta     *metaFetcher
	perIP    *ratelimit.Keyed
	perUser  *ratelimit.Keyed
	refusals *sparseLog // log lines of refused steps
	unused   *unusedClients
	grace    *refreshGrace // nil: none
	oidc     *rp           // nil: users sign in with toolbus passwords
	mux      *http.ServeMux
}

// New returns a Server for opts.
func New(opts Options) (*Server, error) {
	if opts.Store == nil || opts.Issuer == nil || opts.Resource == nil || opts.DefaultResource == nil {
		return nil, errors.New("oauth: Options.Store, Issuer, Resource and DefaultResource are required")
	}
	if opts.Scopes == nil {
		opts.Scopes = store.DefaultScopes
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
	if opts.MaxUnusedClients == 0 {
		opts.MaxUnusedClients = DefaultMaxUnusedClients
	}
	if opts.MaxUnusedClientsPerSource == 0 {
		opts.MaxUnusedClientsPerSource = DefaultMaxUnusedClientsPerSource
	}
	if opts.MaxRedirectURIs <= 0 {
		opts.MaxRedirectURIs = DefaultMaxRedirectURIs
	}
	if opts.MaxRedirectURILen <= 0 {
		opts.MaxRedirectURILen = DefaultMaxRedirectURILen
	}
	if opts.MaxClientNameLen <= 0 {
		opts.MaxClientNameLen = DefaultMaxClientNameLen
	}
	if opts.RefreshGrace == 0 {
		opts.RefreshGrace = DefaultRefreshGrace
	}
	log := logutil.Component(opts.Logger, "oauth")
	limits := clientLimits{uris: opts.MaxRedirectURIs, uriLen: opts.MaxRedirectURILen, nameLen: opts.MaxClientNameLen}
	s := &Server{
		opts:     opts,
		log:      log,
		meta:     newMetaFetcher(opts.ClientMetadata, limits, log),
		perIP:    ratelimit.NewKeyed(opts.RateLimit),
		perUser:  ratelimit.NewKeyed(opts.RateLimit),
		refusals: newSparseLog(refusalLinesPerSecond, refusalLinesBurst),
		unused:   newUnusedClients(opts.MaxUnusedClients, opts.MaxUnusedClientsPerSource, opts.UnusedClientTTL, min(MinUnusedClientAge, opts.UnusedClientTTL)),
		grace:    newRefreshGrace(opts.RefreshGrace),
		mux:      http.NewServeMux(),
	}
	if opts.OIDC.Issuer != "" {
		if opts.OIDC.ClientID == "" {
			return nil, errors.New("oauth: OIDC.ClientID is required with OIDC.Issuer")
		}
		if p := opts.OIDC.UserPrefix; p != "" && (len(p) > maxUserPrefix || !contract.ValidLevel(p)) {
			return nil, fmt.Errorf("oauth: OIDC.UserPrefix %q: want at most %d bytes of A-Z a-z 0-9 _ -", p, maxUserPrefix)
		}
		s.oidc = newRP(opts.OIDC)
	}
	s.mux.HandleFunc("GET "+MetadataPath, s.serveMetadata)
	s.mux.HandleFunc("GET "+AuthorizePath, s.authorizePage)
	// Go's cross-origin protection refuses a form posted from another site
	// (Sec-Fetch-Site, else Origin against Host): the consent cannot be
	// given by a page the user did not mean to use.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refusePage(w, r, store.AuditEvent{Action: "authorize", Outcome: "refused", Reason: "cross-origin form post", Status: http.StatusForbidden},
			"The form was sent from another site. Start the sign-in again from the application.")
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
	case MetadataPath, AuthorizePath, CallbackPath, TokenPath, RegisterPath, RevokePath:
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

// Bounds of what a request puts in a log line or an audit record: a
// client_id, a redirect URI or a user name is cut to fieldLen bytes, a
// reason (which may quote them, cut too) to reasonLen.
const (
	fieldLen  = 128
	reasonLen = 256
)

// The log lines of refused steps written at most, a second and at once:
// anyone can make refusals for free. Each line written says how many were
// left out before it; the audit log counts them all.
const (
	refusalLinesPerSecond = 10
	refusalLinesBurst     = 50
)

// audit records an event of kind store.AuditOAuth, with the client's address
// as its Source (the key of the rate limits, and of the audit log's
// aggregation of refusals), and logs it. Every field a request chose is
// clipped first, and refusals are logged sparsely (sparseLog).
func (s *Server) audit(r *http.Request, e store.AuditEvent) {
	e.Time = time.Now()
	e.Kind = store.AuditOAuth
	if e.Outcome == "" {
		e.Outcome = "ok"
	}
	e.Source = s.clientAddr(r)
	e.ClientID, e.UserID, e.Target = clipField(e.ClientID), clipField(e.UserID), clipField(e.Target)
	e.Reason = clip.String(e.Reason, reasonLen)
	log := s.log
	if e.Outcome != "ok" {
		log = s.refusals.entry(log) // nil: left out, and counted
	}
	if log != nil {
		fields := logrus.Fields{"action": e.Action, "outcome": e.Outcome, "client": e.ClientID, "user": e.UserID, "remote": e.Source}
		if e.Reason != "" {
			fields["reason"] = e.Reason
		}
		log.WithFields(fields).Info("oauth " + e.Action)
	}
	if s.opts.Audit != nil {
		s.opts.Audit(e)
	}
}

// clipField cuts a value a request chose to fieldLen bytes (on a rune
// boundary, marked with "…"), for a log line, an audit record or a page.
func clipField(v string) string { return clip.Marked(v, fieldLen) }

// quoteField is clipField quoted, as messages name what a request sent.
func quoteField(v string) string { return strconv.Quote(clipField(v)) }

// refusePage answers a request refused before the user acted (a wrong
// authorization request, a cross-site form, an unknown sign-in) on the
// error page, and audits it. Each such refusal counts against the
// address's rate limit, so that a flood of them soon costs one 429 and no
// work: an address that has spent its limit gets 429 with Retry-After.
func (s *Server) refusePage(w http.ResponseWriter, r *http.Request, e store.AuditEvent, msg string) {
	if ok, wait := s.perIP.Allow(s.clientAddr(r)); !ok {
		secs := retryAfter(w, wait)
		s.audit(r, store.AuditEvent{Action: e.Action, Outcome: "refused", Reason: "rate limited", Status: http.StatusTooManyRequests})
		s.renderError(w, http.StatusTooManyRequests, "Too many refused requests from this address; wait "+strconv.Itoa(secs)+" s and try again.")
		return
	}
	s.audit(r, e)
	s.renderError(w, e.Status, msg)
}

// clientAddr is the source key (netsrc.Key: an IPv6 address by its /64)
// of the client of r, the key of the per-address rate limits: the
// connection's peer, or, when that is one of Options.TrustedProxies, the
// nearest address in X-Forwarded-For that is not.
func (s *Server) clientAddr(r *http.Request) string {
	return netsrc.ClientKey(r, s.opts.TrustedProxies)
}

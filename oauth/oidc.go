package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

// CallbackPath is where an OpenID provider sends the browser back.
const CallbackPath = "/oauth/callback"

// OIDCOptions hands the sign-in to a company's OpenID provider instead of
// toolbus's own passwords: the consent page sends the user there, and the
// claims of the ID token (and userinfo) name the toolbus user and bound
// the scopes they may grant.
type OIDCOptions struct {
	// Issuer is the provider's issuer URL, exactly as its discovery
	// document says it; "" means no provider.
	Issuer string
	// ClientID and ClientSecret are toolbus's client at the provider,
	// registered with the redirect URI <public URL>/oauth/callback.
	ClientID, ClientSecret string
	// Scopes asked of the provider; nil means openid, email and profile.
	Scopes []string
	// UserClaim is the claim whose value becomes the toolbus user ID,
	// every character outside A-Z a-z 0-9 _ - replaced by _ (user IDs are
	// MQTT topic levels); "" means sub. Pick a claim that is unique.
	UserClaim string
	// UserPrefix goes before every user ID the provider's claims make
	// ("sso-", say): a prefix the operator keeps for them, so that they
	// never name a user of personal tokens or toolbus passwords (nothing
	// else enforces it); "" means none. At most 32 bytes of A-Z a-z 0-9 _ -.
	UserPrefix string
	// GroupsClaim is the claim that lists the user's groups; "" means
	// groups.
	GroupsClaim string
	// GroupScopes maps a group to the scopes its members may grant. nil
	// means everyone the provider signs in may grant every scope offered;
	// otherwise a user in none of these groups cannot sign in.
	GroupScopes map[string][]string
	// HTTPClient makes the requests to the provider; nil means one with a
	// 10 s timeout.
	HTTPClient *http.Client
}

// maxUserPrefix bounds OIDCOptions.UserPrefix, so that a prefixed ID
// keeps most of the 128 bytes of a user ID for the claim.
const maxUserPrefix = 32

// pendingLoginTTL is how long a sign-in may stay at the provider.
const pendingLoginTTL = 10 * time.Minute

// rp is toolbus as an OpenID relying party. The provider's discovery
// runs on first use (and again after a failure), so that serve starts
// while the provider is down.
type rp struct {
	opts OIDCOptions
	mu   sync.Mutex
	p    *oidc.Provider
}

func newRP(opts OIDCOptions) *rp {
	if opts.Scopes == nil {
		opts.Scopes = []string{oidc.ScopeOpenID, "email", "profile"}
	}
	if opts.UserClaim == "" {
		opts.UserClaim = "sub"
	}
	if opts.GroupsClaim == "" {
		opts.GroupsClaim = "groups"
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &rp{opts: opts}
}

// provider returns the discovered provider.
func (o *rp) provider(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.p != nil {
		return o.p, nil
	}
	p, err := oidc.NewProvider(o.ctx(ctx), o.opts.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover OpenID provider %s: %w", o.opts.Issuer, err)
	}
	o.p = p
	return p, nil
}

// ctx carries the HTTP client to go-oidc and x/oauth2.
func (o *rp) ctx(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, o.opts.HTTPClient)
}

func (o *rp) config(p *oidc.Provider, redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: o.opts.ClientID, ClientSecret: o.opts.ClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: redirect, Scopes: o.opts.Scopes}
}

// pendingLogin is what a sign-in at the provider must remember: the
// client's request and the user's choices (as the page posted them), and
// toolbus's own PKCE verifier and nonce.
type pendingLogin struct {
	Form     url.Values `json:"form"`
	Verifier string     `json:"verifier"`
	Nonce    string     `json:"nonce"`
	// Browser is the hash of the cookie set in the browser that gave the
	// consent: the callback must come from that same browser. Without it,
	// anyone could post a consent (no password is asked here) and send
	// the provider's link to a victim already signed in there, who would
	// then sign in for the attacker's client.
	Browser string `json:"browser"`
	// Console: the sign-in is the operator console's
	// (StartConsoleSignIn), not a client's authorization request.
	Console bool `json:"console,omitempty"`
}

// browserCookie names the cookie that binds a sign-in at the provider to
// the browser that started it. The __Host- prefix (Secure, no Domain,
// Path=/) is used over https; plain http (loopback tests) cannot carry it.
func browserCookie(secure bool) string {
	if secure {
		return "__Host-toolbus-signin"
	}
	return "toolbus-signin"
}

func (s *Server) secure(r *http.Request) bool {
	return strings.HasPrefix(s.opts.Issuer(r), "https://")
}

// setSigninCookie sets the cookie that binds a sign-in to the browser
// (maxAge < 0 deletes it). Lax: the provider's redirect back is a
// top-level GET, which carries it.
func (s *Server) setSigninCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	secure := s.secure(r)
	http.SetCookie(w, &http.Cookie{Name: browserCookie(secure), Value: value, Path: "/", MaxAge: maxAge,
		Secure: secure, HttpOnly: true, SameSite: http.SameSiteLaxMode})
}

// startOIDC sends the browser to the provider, remembering the request.
func (s *Server) startOIDC(w http.ResponseWriter, r *http.Request, req *authRequest, f url.Values) {
	keep := url.Values{}
	for _, k := range append(slices.Clone(authParams), "grant_scope", "read_only", "entities", "agents") {
		if v, ok := f[k]; ok {
			keep[k] = v
		}
	}
	s.startProvider(w, r, pendingLogin{Form: keep})
}

// startProvider saves pl (with a new PKCE verifier, nonce and browser
// binding) and sends the browser to the provider.
func (s *Server) startProvider(w http.ResponseWriter, r *http.Request, pl pendingLogin) {
	p, err := s.oidc.provider(r.Context())
	if err != nil {
		s.log.WithError(err).Error("OpenID provider")
		s.renderError(w, http.StatusBadGateway, "The identity provider cannot be reached now; try again later.")
		return
	}
	// GenerateVerifier's 256 random bits serve for the nonce too.
	binding := oauth2.GenerateVerifier()
	pl.Verifier, pl.Nonce, pl.Browser = oauth2.GenerateVerifier(), oauth2.GenerateVerifier(), hashHex(binding)
	data, _ := json.Marshal(pl)
	state, err := s.opts.Store.SavePendingLogin(r.Context(), data, time.Now().Add(pendingLoginTTL))
	if err != nil {
		s.log.WithError(err).Error("save sign-in")
		s.renderError(w, http.StatusServiceUnavailable, "The sign-in cannot start now; try again.")
		return
	}
	s.setSigninCookie(w, r, binding, int(pendingLoginTTL.Seconds()))
	conf := s.oidc.config(p, s.opts.Issuer(r)+CallbackPath)
	http.Redirect(w, r, conf.AuthCodeURL(state, oidc.Nonce(pl.Nonce), oauth2.S256ChallengeOption(pl.Verifier)), http.StatusSeeOther)
}

// OIDCIssuer is the OpenID provider's issuer URL; "" when none is
// configured.
func (s *Server) OIDCIssuer() string {
	if s.oidc == nil {
		return ""
	}
	return s.oidc.opts.Issuer
}

// StartConsoleSignIn sends the browser to the OpenID provider for the
// operator console: the provider sends it back to CallbackPath (the one
// redirect URI registered there), which hands the verified user and
// groups to Options.ConsoleSignIn. The same PKCE, nonce and browser
// binding as a client's sign-in.
func (s *Server) StartConsoleSignIn(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil || s.opts.ConsoleSignIn == nil {
		s.renderError(w, http.StatusNotFound, "No OpenID provider is configured for the console.")
		return
	}
	s.startProvider(w, r, pendingLogin{Console: true})
}

// callback is where the provider sends the browser back: the user is
// known from the verified ID token, and the client gets its code.
func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		writeJSON(w, http.StatusNotFound, oauthError{Code: "not_found", Description: "no OpenID provider is configured"})
		return
	}
	q := r.URL.Query()
	data, err := s.opts.Store.TakePendingLogin(r.Context(), q.Get("state"))
	if err != nil {
		if !errors.Is(err, store.ErrPendingLogin) {
			s.log.WithError(err).Error("take sign-in")
		}
		s.refusePage(w, r, store.AuditEvent{Action: "sign_in", Outcome: "refused", Reason: "oidc: unknown or expired state", Status: http.StatusBadRequest},
			"This sign-in is unknown or expired.")
		return
	}
	var pl pendingLogin
	if err := json.Unmarshal(data, &pl); err != nil {
		s.renderError(w, http.StatusInternalServerError, "This sign-in cannot go on.")
		return
	}
	c, err := r.Cookie(browserCookie(s.secure(r)))
	if err != nil || subtle.ConstantTimeCompare([]byte(hashHex(c.Value)), []byte(pl.Browser)) != 1 {
		s.refusePage(w, r, store.AuditEvent{Action: "sign_in", ClientID: pl.Form.Get("client_id"), Outcome: "refused",
			Reason: "oidc: the callback came to another browser than the one that consented", Status: http.StatusForbidden},
			"This sign-in was started in another browser. Start it again from the application.")
		return
	}
	s.setSigninCookie(w, r, "", -1)
	if pl.Console {
		s.consoleCallback(w, r, pl)
		return
	}
	req, bad, oerr := s.parseAuthorize(r, pl.Form)
	switch {
	case bad != nil:
		s.renderError(w, http.StatusBadRequest, bad.msg)
		return
	case oerr != nil:
		s.requestError(w, r, req, oerr)
		return
	}
	refuse := func(reason, userMsg string) {
		s.audit(r, store.AuditEvent{Action: "sign_in", ClientID: req.client.ID, Outcome: "refused", Reason: "oidc: " + reason, Status: http.StatusForbidden})
		s.redirect(w, r, req, url.Values{"error": {"access_denied"}, "error_description": {userMsg}})
	}
	if e := q.Get("error"); e != "" {
		refuse("the provider answered "+e+": "+q.Get("error_description"), "the identity provider did not sign the user in")
		return
	}
	user, groups, err := s.identify(r, q.Get("code"), pl)
	if err != nil {
		s.log.WithError(err).Warn("OpenID sign-in")
		refuse(err.Error(), "the identity provider's answer could not be used")
		return
	}
	allowed := s.opts.Scopes
	if gs := s.oidc.opts.GroupScopes; gs != nil {
		allowed = nil
		for _, g := range groups {
			for _, sc := range gs[g] {
				if !slices.Contains(allowed, sc) {
					allowed = append(allowed, sc)
				}
			}
		}
		if len(allowed) == 0 {
			refuse("user "+user+" is in none of the groups allowed", "the user is in none of the groups allowed to sign in")
			return
		}
	}
	ch, msg := parseChoices(req, pl.Form)
	if msg != "" {
		s.renderError(w, http.StatusBadRequest, msg)
		return
	}
	ch.scopes = slices.DeleteFunc(ch.scopes, func(sc string) bool { return !slices.Contains(allowed, sc) })
	if len(ch.scopes) == 0 {
		refuse("user "+user+" may grant none of the scopes chosen", "the user's groups allow none of the permissions asked for")
		return
	}
	s.audit(r, store.AuditEvent{Action: "sign_in", ClientID: req.client.ID, UserID: user, Target: "oidc " + s.oidc.opts.Issuer})
	s.issueCode(w, r, req, ch, user)
}

// consoleCallback ends a console sign-in at the provider: the verified
// user and groups go to Options.ConsoleSignIn, which decides and answers.
func (s *Server) consoleCallback(w http.ResponseWriter, r *http.Request, pl pendingLogin) {
	q := r.URL.Query()
	refuse := func(reason, msg string) {
		s.refusePage(w, r, store.AuditEvent{Action: "console_sign_in", Outcome: "refused", Reason: "oidc: " + reason, Status: http.StatusForbidden}, msg)
	}
	if s.opts.ConsoleSignIn == nil {
		refuse("the console is off", "The console is not served here.")
		return
	}
	if e := q.Get("error"); e != "" {
		refuse("the provider answered "+e+": "+q.Get("error_description"), "The identity provider did not sign you in.")
		return
	}
	user, groups, err := s.identify(r, q.Get("code"), pl)
	if err != nil {
		s.log.WithError(err).Warn("OpenID sign-in to the console")
		refuse(err.Error(), "The identity provider's answer could not be used.")
		return
	}
	s.opts.ConsoleSignIn(w, r, user, groups)
}

// identify redeems the provider's code and returns the toolbus user and
// the groups its claims name.
func (s *Server) identify(r *http.Request, code string, pl pendingLogin) (user string, groups []string, err error) {
	ctx := s.oidc.ctx(r.Context())
	p, err := s.oidc.provider(ctx)
	if err != nil {
		return "", nil, err
	}
	tok, err := s.oidc.config(p, s.opts.Issuer(r)+CallbackPath).Exchange(ctx, code, oauth2.VerifierOption(pl.Verifier))
	if err != nil {
		return "", nil, fmt.Errorf("code exchange: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", nil, errors.New("no ID token in the provider's answer")
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: s.oidc.opts.ClientID}).Verify(ctx, raw)
	if err != nil {
		return "", nil, fmt.Errorf("ID token: %w", err)
	}
	if idt.Nonce != pl.Nonce {
		return "", nil, errors.New("ID token: wrong nonce")
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return "", nil, fmt.Errorf("ID token claims: %w", err)
	}
	// Providers put email and groups in the userinfo answer more often
	// than in the ID token; it fills in what the ID token lacks.
	if p.UserInfoEndpoint() != "" {
		ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return "", nil, fmt.Errorf("userinfo: %w", err)
		}
		more := map[string]any{}
		if err := ui.Claims(&more); err != nil {
			return "", nil, fmt.Errorf("userinfo claims: %w", err)
		}
		if ui.Subject != idt.Subject {
			return "", nil, errors.New("userinfo names another subject than the ID token")
		}
		for k, v := range more {
			if _, ok := claims[k]; !ok {
				claims[k] = v
			}
		}
	}
	v, _ := claims[s.oidc.opts.UserClaim].(string)
	if s.oidc.opts.UserClaim == "email" {
		// An address the user typed but never proved is anyone's.
		if verified, _ := claims["email_verified"].(bool); !verified {
			return "", nil, errors.New("the email claim is not verified (email_verified)")
		}
	}
	if v == "" {
		return "", nil, fmt.Errorf("claim %q holds no user name", s.oidc.opts.UserClaim)
	}
	user = userID(s.oidc.opts.UserPrefix + v)
	switch g := claims[s.oidc.opts.GroupsClaim].(type) {
	case []any:
		for _, x := range g {
			if s, ok := x.(string); ok {
				groups = append(groups, s)
			}
		}
	case string:
		groups = strings.Fields(g)
	}
	return user, groups, nil
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// userID makes a claim's value a toolbus user ID (a topic level, at most
// 128 bytes of A-Z a-z 0-9 _ -), one-to-one. A value that is a level
// already is kept, unless it ends the way a hashed ID does; any other gets
// its characters outside the alphabet replaced by _ and userIDHashLen hex
// digits of its SHA-256 appended. So a kept value never equals a hashed
// one, and two hashed ones differ in their hash ("a.b@x" and "a_b@x"; a
// user who picks the value "a_b_x-<hash of a.b@x>" gets a hash appended).
func userID(claim string) string {
	if claim == "" || contract.ValidLevel(claim) && !looksHashed(claim) {
		return claim
	}
	b := []byte(claim)
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	const suffix = 1 + userIDHashLen // "-" and the hash
	if len(b) > contract.MaxLevelLen-suffix {
		b = b[:contract.MaxLevelLen-suffix]
	}
	return string(b) + "-" + hashHex(claim)[:userIDHashLen]
}

// userIDHashLen is how many hex digits of SHA-256 a hashed user ID ends
// with: 64 bits, so that finding a value whose ID is another user's costs
// a second preimage of 2^64 tries.
const userIDHashLen = 16

// looksHashed reports whether id ends the way userID's hashed IDs do: a
// dash and userIDHashLen lower-case hex digits.
func looksHashed(id string) bool {
	n := len(id) - userIDHashLen
	if n < 1 || id[n-1] != '-' {
		return false
	}
	for _, c := range []byte(id[n:]) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

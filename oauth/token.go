package oauth

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/store"
)

// tokenResponse is RFC 6749 section 5.1's.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
}

// retryAfter sets Retry-After to wait in whole seconds, rounded up, at
// least 1, and returns them.
func retryAfter(w http.ResponseWriter, wait time.Duration) int {
	secs := max(1, int(wait.Seconds()+0.999))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
}

// errUnavailable answers a request the store could not serve (503).
var errUnavailable = oauthError{"temporarily_unavailable", "the store is not available; try again"}

// allowIP applies the per-address rate limit of the token, registration
// and revocation endpoints: 429 with Retry-After when it is spent.
func (s *Server) allowIP(w http.ResponseWriter, r *http.Request, action string) bool {
	ok, wait := s.perIP.Allow(s.clientAddr(r))
	if !ok {
		retryAfter(w, wait)
		s.audit(r, store.AuditEvent{Action: action, Outcome: "refused", Reason: "rate limited", Status: http.StatusTooManyRequests})
		writeJSON(w, http.StatusTooManyRequests, oauthError{Code: "slow_down", Description: "too many requests from this address; retry later"})
	}
	return ok
}

// authenticateClient finds the client of a token or revocation request:
// client_secret_basic, client_secret_post, or a public client's client_id
// alone. A confidential client must present its secret; confidential
// reports that it did.
func (s *Server) authenticateClient(r *http.Request) (id string, confidential bool, _ *oauthError, status int) {
	id, secret, basic := r.BasicAuth()
	if basic {
		// RFC 6749 section 2.3.1: form-urlencoded inside Basic.
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			return "", false, &oauthError{"invalid_client", "malformed Basic credentials"}, http.StatusUnauthorized
		}
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id == "" {
		return "", false, &oauthError{"invalid_client", "no client_id"}, http.StatusUnauthorized
	}
	if isMetadataURL(id) {
		// A metadata document's client is public: PKCE and the code's
		// binding to the client_id prove it.
		if secret != "" {
			return "", false, &oauthError{"invalid_client", "a metadata document's client has no secret"}, http.StatusUnauthorized
		}
		return id, false, nil, 0
	}
	c, err := s.opts.Store.OAuthClient(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", false, &oauthError{"invalid_client", "unknown client"}, http.StatusUnauthorized
	case err != nil:
		s.log.WithError(err).Error("look up client")
		e := errUnavailable
		return "", false, &e, http.StatusServiceUnavailable
	case c.Confidential && !c.CheckSecret(secret):
		return "", false, &oauthError{"invalid_client", "wrong or missing client secret"}, http.StatusUnauthorized
	case !c.Confidential && secret != "":
		return "", false, &oauthError{"invalid_client", "a public client has no secret"}, http.StatusUnauthorized
	}
	return id, c.Confidential, nil, 0
}

// readForm opens a request to the token or revocation endpoint: the
// per-address rate limit, then the form, bounded to maxFormBytes. It
// reports whether the request goes on; if not, it has answered.
func (s *Server) readForm(w http.ResponseWriter, r *http.Request, action string) bool {
	if !s.allowIP(w, r, action) {
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError{"invalid_request", "the body must be application/x-www-form-urlencoded"})
		return false
	}
	return true
}

// token is the token endpoint: authorization_code and refresh_token.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if !s.readForm(w, r, "token") {
		return
	}
	f := r.PostForm
	grant := f.Get("grant_type")
	action := "token"
	if grant == "refresh_token" {
		action = "refresh"
	}
	fail := func(status int, e oauthError, clientID string) {
		s.audit(r, store.AuditEvent{Action: action, ClientID: clientID, Outcome: "refused", Reason: e.Code + ": " + e.Description, Status: status})
		if status == http.StatusUnauthorized && r.Header.Get("Authorization") != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="toolbus"`)
		}
		writeJSON(w, status, e)
	}
	clientID, confidential, cerr, status := s.authenticateClient(r)
	if cerr != nil {
		fail(status, *cerr, r.PostForm.Get("client_id"))
		return
	}
	var toks store.OAuthTokens
	repeat := false // a refresh answered again within the grace
	switch grant {
	case "authorization_code":
		var e *oauthError
		if toks, e, status = s.exchangeCode(r, clientID); e != nil {
			fail(status, *e, clientID)
			return
		}
	case "refresh_token":
		// A public client proves nothing but its client_id, which anyone
		// may know: only a repeat from its own address is its retry, and
		// one from elsewhere, a replay of a stolen token, revokes the grant.
		from := ""
		if !confidential {
			from = s.clientAddr(r)
		}
		resource := f.Get("resource")
		if resource != "" {
			// In its normal form, as the grant's audience is kept; one
			// this server does not serve (a trailing "/") is refused
			// before the grant is touched.
			var ok bool
			if resource, ok = NormalizeResource(resource); !ok || !s.opts.Resource(r, resource) {
				fail(http.StatusBadRequest, oauthError{"invalid_target", "resource " + quoteField(f.Get("resource")) + " is not served here"}, clientID)
				return
			}
		}
		// RFC 6749 section 6: a scope narrows the grant, within what it
		// holds; one the server does not offer is refused before the grant
		// is touched.
		scopes := strings.Fields(f.Get("scope"))
		for _, sc := range scopes {
			if !slices.Contains(s.opts.Scopes, sc) {
				fail(http.StatusBadRequest, oauthError{"invalid_scope", "scope " + quoteField(sc) + " is not offered"}, clientID)
				return
			}
		}
		var err error
		toks, repeat, err = s.grace.refresh(r.Context(), from, store.OAuthRefresh{Token: f.Get("refresh_token"), ClientID: clientID,
			Resource: resource, Scopes: scopes, AccessTTL: s.opts.AccessTTL, RefreshTTL: s.opts.RefreshTTL, MaxAge: s.opts.GrantMaxAge},
			s.opts.Store.RefreshOAuth)
		switch {
		case errors.Is(err, store.ErrInvalidGrant):
			fail(http.StatusBadRequest, oauthError{"invalid_grant", err.Error()}, clientID)
			return
		case errors.Is(err, store.ErrScopeNotGranted):
			fail(http.StatusBadRequest, oauthError{"invalid_scope", err.Error()}, clientID)
			return
		case errors.Is(err, store.ErrInvalidTarget):
			// RFC 8707: a refresh cannot move the grant to another resource.
			fail(http.StatusBadRequest, oauthError{"invalid_target", err.Error()}, clientID)
			return
		case err != nil:
			s.log.WithError(err).Error("refresh")
			writeJSON(w, http.StatusServiceUnavailable, errUnavailable)
			return
		}
	default:
		fail(http.StatusBadRequest, oauthError{"unsupported_grant_type", "grant_type must be authorization_code or refresh_token"}, clientID)
		return
	}
	e := store.AuditEvent{Action: action, ClientID: clientID, UserID: toks.Token.UserID, TokenID: toks.Token.ID, Target: toks.Token.Audience}
	if repeat {
		e.Reason = "repeated within the refresh grace: the same tokens again"
	}
	s.audit(r, e)
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, tokenResponse{
		AccessToken:  toks.Access,
		TokenType:    "Bearer",
		ExpiresIn:    max(0, int64(time.Until(toks.Token.ExpiresAt).Round(time.Second).Seconds())),
		RefreshToken: toks.Refresh,
		Scope:        strings.Join(toks.Token.Scopes, " "),
	})
}

// exchangeCode redeems an authorization code of clientID: the code is
// used up whatever follows, so a stolen one is worth one try. A refusal
// comes with its status: 400, or 503 when the store failed.
func (s *Server) exchangeCode(r *http.Request, clientID string) (store.OAuthTokens, *oauthError, int) {
	refuse := func(code, desc string) (store.OAuthTokens, *oauthError, int) {
		return store.OAuthTokens{}, &oauthError{code, desc}, http.StatusBadRequest
	}
	unavailable := func(what string, err error) (store.OAuthTokens, *oauthError, int) {
		s.log.WithError(err).Error(what)
		e := errUnavailable
		return store.OAuthTokens{}, &e, http.StatusServiceUnavailable // the store, not the client
	}
	f := r.PostForm
	code := f.Get("code")
	c, err := s.opts.Store.RedeemOAuthCode(r.Context(), code)
	if errors.Is(err, store.ErrInvalidGrant) {
		return refuse("invalid_grant", err.Error())
	}
	if err != nil {
		return unavailable("redeem code", err)
	}
	switch {
	case c.ClientID != clientID:
		return refuse("invalid_grant", "the code was issued to another client")
	case c.RedirectURI != "" && f.Get("redirect_uri") == "":
		// RFC 6749 section 4.1.3. OAuth 2.1 drops the parameter because
		// PKCE (required here) binds the code to its client; toolbus
		// keeps RFC 6749's rule, which every MCP client meets.
		return refuse("invalid_request", "redirect_uri is required: the authorization request named one")
	case c.RedirectURI != "" && f.Get("redirect_uri") != c.RedirectURI:
		return refuse("invalid_grant", "redirect_uri differs from the authorization request's")
	case !checkVerifier(f.Get("code_verifier"), c.Challenge):
		return refuse("invalid_grant", "code_verifier missing or wrong (PKCE)")
	case f.Get("resource") != "" && !sameResource(f.Get("resource"), c.Spec.Audience):
		return refuse("invalid_target", "the code was issued for "+c.Spec.Audience)
	}
	toks, err := s.opts.Store.GrantOAuth(r.Context(), c, s.opts.RefreshTTL)
	if errors.Is(err, store.ErrInvalidGrant) {
		return refuse("invalid_grant", err.Error())
	}
	if err != nil {
		return unavailable("grant", err)
	}
	return toks, nil, 0
}

// revoke is RFC 7009's endpoint: either token of a grant ends both.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	if !s.readForm(w, r, "revoke") {
		return
	}
	clientID, _, cerr, status := s.authenticateClient(r)
	if cerr != nil {
		s.audit(r, store.AuditEvent{Action: "revoke", ClientID: r.PostForm.Get("client_id"), Outcome: "refused", Reason: cerr.Description, Status: status})
		writeJSON(w, status, cerr)
		return
	}
	refuse := func(e oauthError) {
		s.audit(r, store.AuditEvent{Action: "revoke", ClientID: clientID, Outcome: "refused", Reason: e.Code + ": " + e.Description, Status: http.StatusBadRequest})
		writeJSON(w, http.StatusBadRequest, e)
	}
	if r.PostForm.Get("token") == "" {
		refuse(oauthError{"invalid_request", "no token to revoke"}) // RFC 7009 section 2.1: token is required
		return
	}
	err := s.opts.Store.RevokeOAuth(r.Context(), r.PostForm.Get("token"), clientID)
	switch {
	case errors.Is(err, store.ErrOtherClient):
		// RFC 7009 section 2.1: the client is told, and the token lives on.
		refuse(oauthError{"unauthorized_client", "the token was not issued to this client"})
		return
	case err != nil:
		s.log.WithError(err).Error("revoke")
		writeJSON(w, http.StatusServiceUnavailable, errUnavailable)
		return
	}
	s.grace.forget(r.PostForm.Get("token"))
	s.audit(r, store.AuditEvent{Action: "revoke", ClientID: clientID})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

package oauth

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/store"
)

// authRequest is a checked authorization request: what the client asks
// for, and where its answer goes.
type authRequest struct {
	client      store.OAuthClient
	redirectURI string
	// redirectGiven: the request named redirectURI (rather than leaving
	// the client's only one implied), so the token request must name it
	// too (RFC 6749 section 4.1.3).
	redirectGiven bool
	state         string
	challenge     string
	scopes        []string
	resource      string
}

// authParams are the request's parameters the page posts back, hidden, so
// that the submission is checked like the request itself.
var authParams = []string{"response_type", "client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method", "scope", "resource"}

// errPage is an authorization request that cannot go back to the client
// (no client, or no redirect URI it registered): the user sees why.
type errPage struct{ msg string }

// parseAuthorize checks an authorization request (RFC 6749 4.1.1, OAuth
// 2.1, RFC 7636, RFC 8707). A bad client or redirect URI gives an errPage;
// anything else wrong gives an OAuth error for the client's redirect URI.
func (s *Server) parseAuthorize(r *http.Request, q url.Values) (*authRequest, *errPage, *oauthError) {
	for _, p := range authParams {
		if len(q[p]) > 1 {
			return nil, &errPage{"parameter " + p + " is repeated"}, nil
		}
	}
	id := q.Get("client_id")
	if id == "" {
		return nil, &errPage{"the request names no client (client_id)"}, nil
	}
	if isMetadataURL(id) {
		// A fetch the stranger's client_id makes the server do: it counts
		// against the address's rate limit unless the cache answers.
		if _, ok := s.meta.cached(id); !ok {
			if ok, _ := s.perIP.Allow(s.clientAddr(r)); !ok {
				return nil, &errPage{"too many requests from this address; wait a minute and try again"}, nil
			}
		}
	}
	c, err := s.client(r.Context(), id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, &errPage{unknownClient(id)}, nil
		}
		if errors.Is(err, errClient) {
			return nil, &errPage{err.Error()}, nil
		}
		s.log.WithError(err).Error("look up client")
		return nil, &errPage{"the server cannot look up the client now; try again"}, nil
	}
	req := &authRequest{client: c, redirectURI: q.Get("redirect_uri"), redirectGiven: q.Get("redirect_uri") != "", state: q.Get("state")}
	switch {
	case req.redirectURI == "" && len(c.RedirectURIs) == 1:
		req.redirectURI = c.RedirectURIs[0]
	case req.redirectURI == "":
		return nil, &errPage{"the request names no redirect_uri, and the client registered several"}, nil
	case !redirectAllowed(c.RedirectURIs, req.redirectURI):
		return nil, &errPage{"redirect_uri " + quoteField(req.redirectURI) + " is not one the client registered"}, nil
	}
	if rt := q.Get("response_type"); rt != "code" {
		return req, nil, &oauthError{"unsupported_response_type", "response_type must be code"}
	}
	req.challenge = q.Get("code_challenge")
	if q.Get("code_challenge_method") != "S256" || !validChallenge(req.challenge) {
		return req, nil, &oauthError{"invalid_request", "PKCE is required: code_challenge (43 characters of base64url) with code_challenge_method S256"}
	}
	if scope := strings.Fields(q.Get("scope")); len(scope) == 0 {
		req.scopes = slices.Clone(store.DefaultScopes)
	} else {
		for _, sc := range scope {
			if !slices.Contains(s.opts.Scopes, sc) {
				return req, nil, &oauthError{"invalid_scope", "scope " + quoteField(sc) + " is not offered; offered: " + strings.Join(s.opts.Scopes, " ")}
			}
			if !slices.Contains(req.scopes, sc) {
				req.scopes = append(req.scopes, sc)
			}
		}
	}
	// The resource becomes the token's audience in its normal form
	// (NormalizeResource), whatever the case of the scheme and host the
	// client wrote.
	res := q.Get("resource")
	if res == "" {
		res = s.opts.DefaultResource(r)
	}
	var ok bool
	if req.resource, ok = NormalizeResource(res); !ok || !s.opts.Resource(r, req.resource) {
		return req, nil, &oauthError{"invalid_target", "resource " + quoteField(res) + " is not served here"}
	}
	return req, nil, nil
}

// validChallenge: an S256 challenge is the base64url SHA-256 of the
// verifier, 43 characters.
func validChallenge(c string) bool {
	b, err := base64.RawURLEncoding.DecodeString(c)
	return err == nil && len(b) == sha256.Size
}

// checkVerifier reports whether verifier (RFC 7636 section 4.1: 43 to 128
// unreserved characters) matches challenge.
func checkVerifier(verifier, challenge string) bool {
	if len(verifier) < 43 || len(verifier) > 128 {
		return false
	}
	for i := 0; i < len(verifier); i++ {
		c := verifier[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:]) == challenge
}

// redirect sends the browser back to the client with params, the state and
// the issuer (RFC 9207, against mix-up attacks).
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, req *authRequest, params url.Values) {
	if req.state != "" {
		params.Set("state", req.state)
	}
	params.Set("iss", s.opts.Issuer(r))
	sep := "?"
	if strings.Contains(req.redirectURI, "?") {
		sep = "&"
	}
	http.Redirect(w, r, req.redirectURI+sep+params.Encode(), http.StatusSeeOther)
}

// requestError answers an authorization request that is wrong though its
// client and redirect URI are right, on a page rather than by redirecting
// to the client: registration is open, so a redirect before the user has
// done anything would make the gateway an open redirector (RFC 9700
// section 4.11.1). The user, not the client, reads why. It counts against
// the address's rate limit (refusePage).
func (s *Server) requestError(w http.ResponseWriter, r *http.Request, req *authRequest, e *oauthError) {
	s.refusePage(w, r, store.AuditEvent{Action: "authorize", ClientID: req.client.ID, Outcome: "refused", Reason: e.Code + ": " + e.Description, Status: http.StatusBadRequest},
		"The application asked wrongly ("+e.Code+"): "+e.Description+".")
}

// authorizePage shows the sign-in and consent page for a valid request.
func (s *Server) authorizePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req, bad, oerr := s.parseAuthorize(r, q)
	switch {
	case bad != nil:
		s.refusePage(w, r, store.AuditEvent{Action: "authorize", ClientID: q.Get("client_id"), Outcome: "refused", Reason: bad.msg, Status: http.StatusBadRequest}, bad.msg)
	case oerr != nil:
		s.requestError(w, r, req, oerr)
	default:
		s.renderConsent(w, http.StatusOK, req, q, consentChoices{scopes: req.scopes}, "", "")
	}
}

// consentChoices are what the user narrowed on the page.
type consentChoices struct {
	scopes   []string
	readOnly bool
	entities []store.Entity
	agents   []string
	// raw text of the fields, shown again after an error
	entitiesText, agentsText string
}

// parseChoices reads the page's narrowing fields; the scopes granted are
// those ticked of those asked for.
func parseChoices(req *authRequest, f url.Values) (consentChoices, string) {
	ch := consentChoices{readOnly: f.Get("read_only") == "on", entitiesText: f.Get("entities"), agentsText: f.Get("agents")}
	for _, sc := range f["grant_scope"] {
		if slices.Contains(req.scopes, sc) && !slices.Contains(ch.scopes, sc) {
			ch.scopes = append(ch.scopes, sc)
		}
	}
	if len(ch.scopes) == 0 {
		return ch, "Choose at least one permission to allow, or deny."
	}
	for _, e := range splitList(ch.entitiesText) {
		ent, err := store.ParseEntity(e)
		if err != nil || ent.Type == store.PlainEntity.Type || ent.ID == store.PlainEntity.ID {
			return ch, "Entity " + quoteField(e) + " is not TYPE/ID."
		}
		ch.entities = append(ch.entities, ent)
	}
	for _, a := range splitList(ch.agentsText) {
		if !contract.ValidLevel(a) {
			return ch, "Agent " + quoteField(a) + " is not a valid agent name."
		}
		ch.agents = append(ch.agents, a)
	}
	if len(ch.entities) > store.MaxTokenEntities || len(ch.agents) > store.MaxTokenAgents {
		return ch, "Too many entities or agents."
	}
	return ch, ""
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

// authorizeSubmit handles the page's form: deny, or sign in and allow.
func (s *Server) authorizeSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.renderError(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	f := r.PostForm
	req, bad, oerr := s.parseAuthorize(r, f)
	switch {
	case bad != nil:
		s.refusePage(w, r, store.AuditEvent{Action: "authorize", ClientID: f.Get("client_id"), Outcome: "refused", Reason: bad.msg, Status: http.StatusBadRequest}, bad.msg)
		return
	case oerr != nil:
		s.requestError(w, r, req, oerr)
		return
	}
	user := f.Get("username")
	if f.Get("action") == "deny" {
		s.audit(r, store.AuditEvent{Action: "deny", ClientID: req.client.ID, UserID: user, Target: req.resource})
		s.redirect(w, r, req, url.Values{"error": {"access_denied"}, "error_description": {"the user denied access"}})
		return
	}
	ch, msg := parseChoices(req, f)
	if msg != "" {
		s.renderConsent(w, http.StatusBadRequest, req, f, ch, user, msg)
		return
	}
	if ok, wait := s.perIP.Allow(s.clientAddr(r)); !ok {
		s.tooMany(w, r, req, f, ch, user, wait)
		return
	}
	if s.oidc != nil {
		s.startOIDC(w, r, req, f)
		return
	}
	if ok, wait := s.perUser.Allow(user); !ok {
		s.tooMany(w, r, req, f, ch, user, wait)
		return
	}
	if err := s.opts.Store.VerifyUser(r.Context(), user, []byte(f.Get("password"))); err != nil {
		if !errors.Is(err, store.ErrBadCredentials) {
			s.log.WithError(err).Error("sign-in")
			s.renderError(w, http.StatusServiceUnavailable, "The server cannot check the sign-in now; try again.")
			return
		}
		s.audit(r, store.AuditEvent{Action: "sign_in", ClientID: req.client.ID, UserID: user, Outcome: "refused", Reason: "wrong user name or password", Status: http.StatusUnauthorized})
		s.renderConsent(w, http.StatusUnauthorized, req, f, ch, user, "Wrong user name or password.")
		return
	}
	s.audit(r, store.AuditEvent{Action: "sign_in", ClientID: req.client.ID, UserID: user})
	s.issueCode(w, r, req, ch, user)
}

// issueCode ends a sign-in: the consent of user becomes a code, and the
// browser goes back to the client with it.
func (s *Server) issueCode(w http.ResponseWriter, r *http.Request, req *authRequest, ch consentChoices, user string) {
	name := "oauth: " + req.client.Name
	if req.client.Name == "" {
		name = "oauth: " + req.client.ID
	}
	name = clip.String(name, store.MaxTokenNameLen)
	spec := store.TokenSpec{UserID: user, Scopes: ch.scopes, ReadOnly: ch.readOnly, Entities: ch.entities, Agents: ch.agents,
		TTL: s.opts.AccessTTL, Name: name, Audience: req.resource, ClientID: req.client.ID}
	redirect := "" // none named: the token request need name none either
	if req.redirectGiven {
		redirect = req.redirectURI
	}
	code, err := s.opts.Store.SaveOAuthCode(r.Context(), store.OAuthCode{ClientID: req.client.ID, RedirectURI: redirect,
		Challenge: req.challenge, Spec: spec, Expires: time.Now().Add(s.opts.CodeTTL)})
	if err == nil {
		s.unused.used(req.client.ID)
	}
	if errors.Is(err, store.ErrNotFound) { // purged while the user consented
		s.audit(r, store.AuditEvent{Action: "consent", Outcome: "refused", ClientID: req.client.ID, UserID: user, Reason: "client purged", Status: http.StatusBadRequest})
		s.renderError(w, http.StatusBadRequest, unknownClient(req.client.ID))
		return
	}
	if err != nil {
		s.log.WithError(err).Error("save code")
		s.renderError(w, http.StatusServiceUnavailable, "The server cannot finish the sign-in now; try again.")
		return
	}
	s.audit(r, store.AuditEvent{Action: "consent", ClientID: req.client.ID, UserID: user, Target: req.resource})
	s.redirect(w, r, req, url.Values{"code": {code}})
}

// tooMany answers a rate-limited sign-in on the page, with Retry-After.
func (s *Server) tooMany(w http.ResponseWriter, r *http.Request, req *authRequest, f url.Values, ch consentChoices, user string, wait time.Duration) {
	secs := retryAfter(w, wait)
	s.audit(r, store.AuditEvent{Action: "sign_in", ClientID: req.client.ID, UserID: user, Outcome: "refused", Reason: "rate limited", Status: http.StatusTooManyRequests})
	s.renderConsent(w, http.StatusTooManyRequests, req, f, ch, user, "Too many sign-in attempts; wait "+strconv.Itoa(secs)+" s and try again.")
}

// pageHeaders keep the page out of frames (clickjacking a consent), out of
// caches and out of other sites' Referer headers, and forbid any script.
// Referrer-Policy is same-origin, not no-referrer: under no-referrer a
// browser without Sec-Fetch-Site posts the form with "Origin: null",
// which the cross-origin check refuses.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "same-origin")
}

type scopeChoice struct {
	Name, Label string
	Checked     bool
}

type hiddenField struct{ Name, Value string }

var scopeLabels = map[string]string{
	store.ScopeToolsList: "see the tools",
	store.ScopeToolsCall: "call the tools",
}

func (s *Server) renderConsent(w http.ResponseWriter, status int, req *authRequest, q url.Values, ch consentChoices, user, msg string) {
	data := struct {
		ClientName, ClientID, RedirectHost, Resource, User, Error, Provider string
		Scopes                                                              []scopeChoice
		ReadOnly                                                            bool
		Entities, Agents                                                    string
		Hidden                                                              []hiddenField
	}{
		ClientName: req.client.Name, ClientID: req.client.ID, Resource: req.resource, User: user, Error: msg,
		ReadOnly: ch.readOnly, Entities: ch.entitiesText, Agents: ch.agentsText,
	}
	if s.oidc != nil {
		data.Provider = s.oidc.opts.Issuer
	}
	if u, err := url.Parse(req.redirectURI); err == nil {
		data.RedirectHost = u.Scheme + "://" + u.Host
	}
	for _, sc := range req.scopes {
		label := scopeLabels[sc]
		if label == "" {
			label = "use the tools that need " + sc
		}
		data.Scopes = append(data.Scopes, scopeChoice{Name: sc, Label: label, Checked: slices.Contains(ch.scopes, sc)})
	}
	for _, p := range authParams {
		if v := q.Get(p); v != "" {
			data.Hidden = append(data.Hidden, hiddenField{p, v})
		}
	}
	pageHeaders(w)
	w.WriteHeader(status)
	if err := consentPage.Execute(w, data); err != nil {
		s.log.WithError(err).Warn("render consent page")
	}
}

func (s *Server) renderError(w http.ResponseWriter, status int, msg string) {
	pageHeaders(w)
	w.WriteHeader(status)
	if err := errorPage.Execute(w, msg); err != nil {
		s.log.WithError(err).Warn("render error page")
	}
}

const pageStyle = `<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:2rem auto;padding:0 1rem;color:#222}
fieldset{border:1px solid #ccc;margin:1rem 0}label{display:block;margin:.4rem 0}input[type=text],input[type=password]{width:100%;box-sizing:border-box}
.error{color:#a00;font-weight:bold}.muted{color:#666;font-size:.9em}button{margin-right:1rem}</style>`

var consentPage = template.Must(template.New("consent").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in to toolbus</title>` + pageStyle + `</head><body>
<h1>Sign in to toolbus</h1>
<p><strong>{{if .ClientName}}{{.ClientName}}{{else}}An unnamed client{{end}}</strong> wants to use toolbus on your behalf.</p>
<p class="muted">Client: {{.ClientID}}<br>It will be sent back to: <strong>{{.RedirectHost}}</strong><br>For: {{.Resource}}</p>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
<form method="post">
{{range .Hidden}}<input type="hidden" name="{{.Name}}" value="{{.Value}}">
{{end}}{{if .Provider}}<p>You will sign in at <strong>{{.Provider}}</strong>.</p>
{{else}}<fieldset><legend>Your toolbus account</legend>
<label>User name <input type="text" name="username" value="{{.User}}" autocomplete="username" required></label>
<label>Password <input type="password" name="password" autocomplete="current-password"></label>
</fieldset>{{end}}
<fieldset><legend>Allow it to</legend>
{{range .Scopes}}<label><input type="checkbox" name="grant_scope" value="{{.Name}}"{{if .Checked}} checked{{end}}> {{.Label}} <span class="muted">({{.Name}})</span></label>
{{end}}<label><input type="checkbox" name="read_only"{{if .ReadOnly}} checked{{end}}> only tools that change nothing (read-only)</label>
<label>Only these entities <span class="muted">(TYPE/ID, comma-separated; empty: any)</span> <input type="text" name="entities" value="{{.Entities}}"></label>
<label>Only these expert agents <span class="muted">(comma-separated; empty: every agent you may use)</span> <input type="text" name="agents" value="{{.Agents}}"></label>
</fieldset>
<button type="submit" name="action" value="allow">Sign in and allow</button>
<button type="submit" name="action" value="deny" formnovalidate>Deny</button>
</form>
</body></html>
`))

var errorPage = template.Must(template.New("error").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>toolbus sign-in</title>` + pageStyle + `</head><body>
<h1>This sign-in cannot go on</h1>
<p class="error" role="alert">{{.}}</p>
<p>Go back to the application you came from and start again.</p>
</body></html>
`))

// unknownClient is the page's text for a client ID with no registration. A
// registration nobody consented to is purged (Options.UnusedClientTTL),
// while the client may still hold its ID.
func unknownClient(id string) string {
	return "unknown client " + quoteField(id) + ": if your MCP client registered a while ago without signing in, remove this server there and add it again"
}

package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/store"
)

// PathPrefix is where the admin API lives.
const PathPrefix = "/api/v1/admin/"

// maxBodyBytes bounds a request body: the largest is a token request with
// its entities, a few KiB.
const maxBodyBytes = 64 << 10

// Handler serves the admin API under PathPrefix (the full path, not
// stripped). It expects the gateway's auth middleware in front of it, which
// puts the caller's token in the request context (store.WithToken): without
// one it answers 401, to a token without the admin scope 403, whatever the
// path.
type Handler struct {
	svc    *Service
	log    *logrus.Entry
	router *mux.Router
}

// NewHandler returns the REST door of svc.
func NewHandler(svc *Service) *Handler {
	h := &Handler{svc: svc, log: svc.log, router: mux.NewRouter()}
	h.routes()
	return h
}

func (h *Handler) routes() {
	r := h.router
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such admin endpoint: "+r.URL.Path+" (see docs/admin-api.md)")
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
	})
	p := strings.TrimSuffix(PathPrefix, "/")
	h.routeConfig(p)
	h.routeCalls(p)
	h.routeAgentLimits(p)
	svc := h.svc
	user := func(r *http.Request) string { return r.URL.Query().Get("user") }
	name := func(r *http.Request) string { return mux.Vars(r)["username"] }
	type none = struct{}

	r.Handle(p+"/tokens", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		toks, err := svc.ListTokens(r.Context(), user(r))
		return tokenList{Tokens: toks}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/tokens", endpoint(h, http.StatusCreated, jsonBody, func(r *http.Request, req TokenRequest) (any, error) {
		return svc.CreateToken(r.Context(), req)
	})).Methods(http.MethodPost)
	r.Handle(p+"/tokens/{id}", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		id := mux.Vars(r)["id"]
		return Done{Done: "revoked token " + id}, svc.RevokeToken(r.Context(), id)
	})).Methods(http.MethodDelete)

	r.Handle(p+"/users", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		users, err := svc.ListUsers(r.Context())
		return userList{Users: users}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/users", endpoint(h, http.StatusCreated, jsonBody, func(r *http.Request, req UserRequest) (any, error) {
		return svc.AddUser(r.Context(), req)
	})).Methods(http.MethodPost)
	r.Handle(p+"/users/{user}", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		return svc.RemoveUser(r.Context(), mux.Vars(r)["user"])
	})).Methods(http.MethodDelete)
	r.Handle(p+"/users/{user}/password", endpoint(h, http.StatusOK, optionalBody, func(r *http.Request, req PasswordRequest) (any, error) {
		return svc.SetUserPassword(r.Context(), mux.Vars(r)["user"], req)
	})).Methods(http.MethodPost)
	r.Handle(p+"/users/{user}/admin", endpoint(h, http.StatusOK, jsonBody, func(r *http.Request, req UserAdminRequest) (any, error) {
		return svc.SetUserAdmin(r.Context(), mux.Vars(r)["user"], req)
	})).Methods(http.MethodPut)
	r.Handle(p+"/users/agents", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		all, err := svc.ListUserAgents(r.Context())
		return userAgentsList{Users: all}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/users/{user}/agents", endpoint(h, http.StatusOK, jsonBody, func(r *http.Request, req UserAgentsRequest) (any, error) {
		return svc.SetUserAgents(r.Context(), mux.Vars(r)["user"], req)
	})).Methods(http.MethodPut)

	r.Handle(p+"/identities", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		ids, err := svc.ListIdentities(r.Context())
		return identityList{Identities: ids}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/identities", endpoint(h, http.StatusCreated, jsonBody, func(r *http.Request, req IdentityRequest) (any, error) {
		return svc.AddIdentity(r.Context(), req)
	})).Methods(http.MethodPost)
	r.Handle(p+"/identities/{username}", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		return svc.RemoveIdentity(r.Context(), name(r))
	})).Methods(http.MethodDelete)
	r.Handle(p+"/identities/{username}/disable", endpoint(h, http.StatusOK, optionalBody, func(r *http.Request, _ none) (any, error) {
		return svc.SetDisabled(r.Context(), name(r), true)
	})).Methods(http.MethodPost)
	r.Handle(p+"/identities/{username}/enable", endpoint(h, http.StatusOK, optionalBody, func(r *http.Request, _ none) (any, error) {
		return svc.SetDisabled(r.Context(), name(r), false)
	})).Methods(http.MethodPost)
	r.Handle(p+"/identities/{username}/password", endpoint(h, http.StatusOK, optionalBody, func(r *http.Request, req PasswordRequest) (any, error) {
		return svc.SetPassword(r.Context(), name(r), req)
	})).Methods(http.MethodPost)

	r.Handle(p+"/rules", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		rules, err := svc.ListRules(r.Context())
		return ruleList{Rules: rules}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/rules", endpoint(h, http.StatusCreated, jsonBody, func(r *http.Request, req RuleRequest) (any, error) {
		return svc.AddRule(r.Context(), req)
	})).Methods(http.MethodPost)
	r.Handle(p+"/rules/{id}", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		id := mux.Vars(r)["id"]
		return Done{Done: "removed rule " + id}, svc.RemoveRule(r.Context(), id)
	})).Methods(http.MethodDelete)

	r.Handle(p+"/clients", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		cls, err := svc.Clients(r.Context())
		if errors.Is(err, ErrNoBroker) {
			err = fmt.Errorf("%w: this toolbus uses an external MQTT broker (--broker-url); list its clients there", err)
		}
		return clientList{Clients: cls}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/agents", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		return svc.Agents(r.Context())
	})).Methods(http.MethodGet)
	r.Handle(p+"/contexts", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		cs, err := svc.Contexts(r.Context(), user(r))
		return contextList{Contexts: cs}, err
	})).Methods(http.MethodGet)
	r.Handle(p+"/contexts/{platformId}/{userId}/{sessionId}/{entityType}/{entityId}", endpoint(h, http.StatusOK, noBody,
		func(r *http.Request, _ none) (any, error) {
			v := mux.Vars(r)
			key := strings.Join([]string{v["platformId"], v["userId"], v["sessionId"], v["entityType"], v["entityId"]}, "/")
			return Done{Done: "evicted context " + key}, svc.EvictContext(r.Context(), key)
		})).Methods(http.MethodDelete)
	h.auditRoutes(r, p) // GET /audit (audit.go)
	h.oauthRoutes(r, p) // GET, DELETE /oauth-clients (oauth.go)
}

// bodyKind says what body an endpoint takes.
type bodyKind int

const (
	noBody       bodyKind = iota // none is read
	jsonBody                     // a JSON object is required
	optionalBody                 // a JSON object, or nothing
)

// endpoint adapts one Service call to HTTP: decode the body into a Req,
// call, answer the result with status or the error with its own.
func endpoint[Req any](h *Handler, status int, body bodyKind, call func(r *http.Request, req Req) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if body != noBody {
			if err := decode(r, &req, body == optionalBody); err != nil {
				h.fail(w, r, err)
				return
			}
		}
		out, err := call(r, req)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		writeJSON(w, status, out)
	})
}

// ServeHTTP checks the admin scope, then routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, _, ok := store.TokenFrom(r.Context())
	if !ok {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, codeUnauthenticated, "the admin API needs a bearer token: Authorization: Bearer <token>")
		return
	}
	if !tok.HasScope(store.ScopeAdmin) {
		h.log.WithFields(logrus.Fields{"token": tok.ID, "user": tok.UserID, "path": r.URL.Path}).Info("admin API refused: no admin scope")
		writeError(w, http.StatusForbidden, codeForbidden, "the admin API needs a token with scope "+store.ScopeAdmin)
		return
	}
	h.router.ServeHTTP(w, r)
}

// fail answers err with its status; internal errors are logged, and their
// text not sent; the store's refusals are logged and sent.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := errorStatus(err)
	msg := err.Error()
	switch {
	case status == http.StatusInternalServerError:
		h.log.WithError(err).WithField("path", r.URL.Path).Error("admin API failed")
		msg = "internal error; the server log has the details"
	case status >= 500: // the store refused a write: the operator has a fault to fix
		h.log.WithError(err).WithField("path", r.URL.Path).Warn("admin API change refused by the store")
	}
	writeError(w, status, code, msg)
}

// decode reads a JSON body into v. An empty body leaves v as it is when
// allowEmpty, for endpoints whose body is optional.
func decode(r *http.Request, v any, allowEmpty bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return invalid("read body: %v", err)
	}
	if len(body) > maxBodyBytes {
		return invalid("body over %d bytes", maxBodyBytes)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if allowEmpty {
			return nil
		}
		return invalid("empty body: want a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields() // a misspelt field must not be silently ignored
	if err := dec.Decode(v); err != nil {
		return invalid("body: %v", err)
	}
	if dec.More() {
		return invalid("body: more than one JSON value")
	}
	return nil
}

// The list answers: objects, so that fields can be added later.
type (
	tokenList struct {
		Tokens []Token `json:"tokens"`
	}
	identityList struct {
		Identities []Identity `json:"identities"`
	}
	userAgentsList struct {
		Users []UserAgents `json:"users"`
	}
	ruleList struct {
		Rules []Rule `json:"rules"`
	}
	clientList struct {
		Clients []MQTTClient `json:"clients"`
	}
	contextList struct {
		Contexts []Context `json:"contexts"`
	}
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot encode the response")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store") // secrets and passwords pass here
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError writes the platform's JSON error shape {"error","message"}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(APIError{Code: code, Message: msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

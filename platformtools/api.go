package platformtools

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/internal/logutil"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// Paths of the platform REST API.
const (
	PathWhoami   = "/api/v1/whoami"
	PathAgents   = "/api/v1/agents"
	PathContexts = "/api/v1/contexts"
)

// AgentInfo is one expert agent instance as GET /api/v1/agents shows it. A
// token limited to some agents (store.Token.AllowsAgent) sees theirs alone.
type AgentInfo struct {
	Agent    string    `json:"agent"` // the agent's name on the bus (its MQTT username)
	ClientID string    `json:"clientId"`
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Online   bool      `json:"online"`
	Since    time.Time `json:"since"`
}

// AgentsFromStatus adapts a presence source (the Requester's Agents) to
// APIOptions.Agents.
func AgentsFromStatus(src func() []requester.AgentStatus) func() []AgentInfo {
	return func() []AgentInfo {
		st := src()
		out := make([]AgentInfo, len(st))
		for i, s := range st {
			out[i] = AgentInfo{Agent: s.Agent, ClientID: s.ClientID, Name: s.Name, Version: s.Version, Online: s.Online, Since: s.Since}
		}
		return out
	}
}

// AgentTool is one tool the expert agents serve, as GET /api/v1/agents
// lists it.
type AgentTool struct {
	Name        string `json:"name"`
	Agent       string `json:"agent"` // the agent that serves it (its name on the bus)
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
}

// ContextInfo is one of the caller's active contexts (a subscription of the
// gateway on the caller's behalf).
type ContextInfo struct {
	PlatformID string    `json:"platformId"`
	SessionID  string    `json:"sessionId"`
	EntityType string    `json:"entityType"`
	EntityID   string    `json:"entityId"`
	LastUsed   time.Time `json:"lastUsed"`
}

// APIOptions configures an API. The zero value of each field is a usable
// default.
type APIOptions struct {
	// Agents lists the expert agent instances the gateway knows of (online
	// or not); nil means none.
	Agents func() []AgentInfo
	// AgentTools lists the tools the expert agents serve to the caller
	// (v1 serves one logical agent per bus, so they are the same for every
	// instance). nil leaves "tools" out of GET /api/v1/agents. It runs under
	// ToolsTimeout.
	AgentTools func(ctx context.Context, tok store.Token) ([]AgentTool, error)
	// ToolsTimeout bounds AgentTools; 0 means 5s.
	ToolsTimeout time.Duration
	// Contexts lists the active contexts of one user; nil means none.
	Contexts func(userID string) []ContextInfo
	// Logger gets the API's logs (component "platformtools.api"); nil
	// discards them.
	Logger *logrus.Entry
}

// API is the platform REST API: an http.Handler for the paths above. It
// expects the gateway's auth middleware in front of it, which puts the
// caller's token in the request context (store.WithToken); without one every
// endpoint answers 401. Errors are JSON {"error": code, "message": text}.
type API struct {
	opts APIOptions
	log  *logrus.Entry
}

// NewAPI returns the REST API.
func NewAPI(opts APIOptions) *API {
	if opts.ToolsTimeout <= 0 {
		opts.ToolsTimeout = 5 * time.Second
	}
	return &API{opts: opts, log: logutil.Component(opts.Logger, "platformtools.api")}
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var h func(http.ResponseWriter, *http.Request, store.Token)
	switch r.URL.Path {
	case PathWhoami:
		h = a.whoami
	case PathAgents:
		h = a.agents
	case PathContexts:
		h = a.contexts
	default:
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+"; use GET")
		return
	}
	tok, _, ok := store.TokenFrom(r.Context())
	if !ok {
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeError(w, http.StatusUnauthorized, "unauthenticated", "this endpoint needs a bearer token: Authorization: Bearer <token>")
		return
	}
	h(w, r, tok)
}

type whoamiResponse struct {
	User      string         `json:"user"`
	TokenID   string         `json:"tokenId"`
	Scopes    []string       `json:"scopes"`
	ReadOnly  bool           `json:"readOnly"`
	Entities  []store.Entity `json:"entities"`  // {"type","id"}
	ExpiresAt *time.Time     `json:"expiresAt"` // null: never expires
}

// whoami needs no scope: any live token may learn what it is.
func (a *API) whoami(w http.ResponseWriter, _ *http.Request, tok store.Token) {
	resp := whoamiResponse{
		User:     tok.UserID,
		TokenID:  tok.ID,
		Scopes:   tok.Scopes,
		ReadOnly: tok.ReadOnly,
		Entities: tok.Entities,
	}
	// Always arrays, never null: scripts index them.
	if resp.Scopes == nil {
		resp.Scopes = []string{}
	}
	if resp.Entities == nil {
		resp.Entities = []store.Entity{}
	}
	if !tok.ExpiresAt.IsZero() {
		t := tok.ExpiresAt.UTC()
		resp.ExpiresAt = &t
	}
	writeJSON(w, http.StatusOK, resp)
}

type agentsResponse struct {
	Agents []AgentInfo `json:"agents"`
	// Tools is left out when APIOptions.AgentTools is nil.
	Tools *[]AgentTool `json:"tools,omitempty"`
	// ToolsError says why Tools is missing when AgentTools failed.
	ToolsError string `json:"toolsError,omitempty"`
}

func (a *API) agents(w http.ResponseWriter, r *http.Request, tok store.Token) {
	if !tok.HasScope(store.ScopeToolsList) {
		writeError(w, http.StatusForbidden, "forbidden", "this endpoint needs scope "+store.ScopeToolsList)
		return
	}
	resp := agentsResponse{Agents: []AgentInfo{}}
	if a.opts.Agents != nil {
		// A token limited to some agents (its own list within its user's
		// grants) learns of those agents' instances alone, as it lists
		// their tools alone.
		for _, ag := range a.opts.Agents() {
			if tok.AllowsAgent(ag.Agent) {
				resp.Agents = append(resp.Agents, ag)
			}
		}
	}
	sort.Slice(resp.Agents, func(i, j int) bool { return resp.Agents[i].ClientID < resp.Agents[j].ClientID })
	if a.opts.AgentTools != nil {
		ctx, cancel := context.WithTimeout(r.Context(), a.opts.ToolsTimeout)
		tools, err := a.opts.AgentTools(ctx, tok)
		cancel()
		if err != nil {
			a.log.WithError(err).Warn("listing the expert agents' tools failed")
			resp.ToolsError = "the expert agents did not list their tools: " + err.Error()
		} else {
			// AgentTools lists the caller's tools; the filter here keeps
			// this endpoint's promise whatever source it is given.
			tools = slices.DeleteFunc(tools, func(t AgentTool) bool { return !tok.AllowsAgent(t.Agent) })
			if tools == nil {
				tools = []AgentTool{}
			}
			sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
			resp.Tools = &tools
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

type contextsResponse struct {
	Contexts []ContextInfo `json:"contexts"`
}

// contexts shows the caller's own contexts only; an entity-narrowed token
// sees only those of its entities.
func (a *API) contexts(w http.ResponseWriter, _ *http.Request, tok store.Token) {
	resp := contextsResponse{Contexts: []ContextInfo{}}
	if a.opts.Contexts != nil {
		for _, c := range a.opts.Contexts(tok.UserID) {
			if tok.AllowsEntity(store.Entity{Type: c.EntityType, ID: c.EntityID}) {
				resp.Contexts = append(resp.Contexts, c)
			}
		}
	}
	sort.SliceStable(resp.Contexts, func(i, j int) bool { return resp.Contexts[i].LastUsed.After(resp.Contexts[j].LastUsed) })
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "cannot encode the response")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// Token identity and session IDs must not sit in shared caches.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError writes the platform's JSON error shape {"error","message"}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(APIError{Code: code, Message: msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

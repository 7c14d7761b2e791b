package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/store"
)

// AgentLimit is an expert agent's rate limit across all its callers: the
// tools/call requests it gets from every token together, beside the
// per-token and per-user limits (the stricter refuses).
type AgentLimit struct {
	// Agent is the agent's name on the bus.
	Agent string `json:"agent"`
	// Limit is as set, "PER_MINUTE" or "PER_MINUTE:BURST"; "" means none.
	Limit string `json:"limit"`
	// Rate is Limit read ("600/min burst 50"; "none").
	Rate string `json:"rate"`
}

// AgentLimitRequest sets an agent's rate limit (PUT
// /agents/{agent}/limit): "PER_MINUTE" or "PER_MINUTE:BURST" (e.g.
// "600:50"); "" or "0" removes it.
type AgentLimitRequest struct {
	Limit string `json:"limit"`
}

type agentLimitList struct {
	Agents []AgentLimit `json:"agents"`
}

// newAgentLimit describes agent's limit text as stored. A text the
// gateway cannot read (a hand-edited store) says so in Rate: the gateway
// leaves it out.
func newAgentLimit(agent, text string) AgentLimit {
	out := AgentLimit{Agent: agent, Limit: text}
	if l, err := gateway.ParseLimit(text); err != nil {
		out.Rate = "invalid, not in force"
	} else {
		out.Rate = l.String()
	}
	return out
}

// AgentLimits lists the expert agents with a rate limit of their own, by
// agent.
func (s *Service) AgentLimits(ctx context.Context) ([]AgentLimit, error) {
	all, err := s.opts.Store.AgentLimits(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]AgentLimit, 0, len(all))
	for agent, text := range all {
		out = append(out, newAgentLimit(agent, text))
	}
	slices.SortFunc(out, func(a, b AgentLimit) int { return strings.Compare(a.Agent, b.Agent) })
	return out, nil
}

// SetAgentLimit sets agent's rate limit across all its callers; "" or "0"
// removes it. The agent need not be connected, or known yet: the limit
// waits for it. With ApplyAgentLimits the running gateway enforces the
// change at once; an agent whose limit did not change keeps its bucket.
func (s *Service) SetAgentLimit(ctx context.Context, agent string, req AgentLimitRequest) (AgentLimit, error) {
	text := strings.TrimSpace(req.Limit)
	target := "agent " + agent + " limit " + text
	if text == "" {
		target = "agent " + agent + " limit none"
	}
	var out AgentLimit
	err := s.change(ctx, "agent.limit", target, func() error {
		l, err := gateway.ParseLimit(text)
		if err != nil {
			return invalid("%v", err)
		}
		if l == (gateway.Limit{}) {
			text = "" // "0" is none: no row rather than a row that limits nothing
		}
		s.agentLimitsMu.Lock()
		defer s.agentLimitsMu.Unlock()
		if err := s.opts.Store.SetAgentLimit(ctx, agent, text); err != nil {
			if errors.Is(err, store.ErrInvalidAgentLimit) {
				return invalid("%v", err)
			}
			return err
		}
		out = AgentLimit{Agent: agent, Limit: text, Rate: l.String()}
		return s.applyAgentLimits(ctx)
	})
	return out, err
}

// ReloadAgentLimits hands the store's per-agent limits to the running
// gateway (ApplyAgentLimits): at start, and on a reload that picks up the
// changes made on the store while the process ran. It is ordered with
// SetAgentLimit, so neither puts older limits in force over newer ones.
func (s *Service) ReloadAgentLimits(ctx context.Context) error {
	s.agentLimitsMu.Lock()
	defer s.agentLimitsMu.Unlock()
	return s.applyAgentLimits(ctx)
}

// applyAgentLimits hands the store's per-agent limits to the running
// gateway. Called with agentLimitsMu held, so that a slow read cannot put
// older limits in force over newer ones.
func (s *Service) applyAgentLimits(ctx context.Context) error {
	if s.opts.ApplyAgentLimits == nil {
		return nil
	}
	// The change is committed: a caller that goes away now must not leave
	// the gateway behind the store.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reloadTimeout)
	defer cancel()
	texts, err := s.opts.Store.AgentLimits(ctx)
	if err != nil {
		return fmt.Errorf("the change is stored, but the running gateway still enforces the old agent limits: %w", err)
	}
	// A row the gateway cannot read was not written here (this Service
	// checks every limit): ParseAgentLimits leaves it out, and the rest
	// apply.
	limits, err := gateway.ParseAgentLimits(texts)
	if err != nil {
		s.log.WithError(err).Warn("a stored agent rate limit is invalid and is not enforced")
	}
	s.opts.ApplyAgentLimits(limits)
	return nil
}

// routeAgentLimits adds GET /agents/limits and PUT /agents/{agent}/limit.
func (h *Handler) routeAgentLimits(p string) {
	h.router.Handle(p+"/agents/limits", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ struct{}) (any, error) {
		all, err := h.svc.AgentLimits(r.Context())
		return agentLimitList{Agents: all}, err
	})).Methods(http.MethodGet)
	h.router.Handle(p+"/agents/{agent}/limit", endpoint(h, http.StatusOK, jsonBody, func(r *http.Request, req AgentLimitRequest) (any, error) {
		return h.svc.SetAgentLimit(r.Context(), mux.Vars(r)["agent"], req)
	})).Methods(http.MethodPut)
}

// AgentLimits is Service.AgentLimits over HTTP.
func (c *Client) AgentLimits(ctx context.Context) ([]AgentLimit, error) {
	var out agentLimitList
	return out.Agents, c.do(ctx, http.MethodGet, "/agents/limits", nil, nil, &out)
}

// SetAgentLimit is Service.SetAgentLimit over HTTP.
func (c *Client) SetAgentLimit(ctx context.Context, agent string, req AgentLimitRequest) (AgentLimit, error) {
	var out AgentLimit
	return out, c.do(ctx, http.MethodPut, "/agents/"+seg(agent)+"/limit", nil, req, &out)
}

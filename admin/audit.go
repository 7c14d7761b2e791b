package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/toolbus/toolbus/store"
)

// AuditEvent is one record of the audit log (GET /audit).
type AuditEvent struct {
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	// Kind: tool_call, refused, admin, agent_connect, agent_disconnect,
	// mqtt_denied.
	Kind string `json:"kind"`
	// The actor: a token's ID and its user, or an MQTT identity (User) and
	// its client ID.
	TokenID    string `json:"tokenId,omitempty"`
	User       string `json:"user,omitempty"`
	ClientID   string `json:"clientId,omitempty"`
	SessionID  string `json:"sessionId,omitempty"`
	EntityType string `json:"entityType,omitempty"`
	EntityID   string `json:"entityId,omitempty"`
	Tool       string `json:"tool,omitempty"`
	// Agent is the expert agent that serves Tool (Source agent).
	Agent string `json:"agent,omitempty"`
	// Source: platform or agent for a tool call; api or data-dir for an
	// admin change; mqtt or presence for agents and MQTT refusals.
	Source string `json:"source,omitempty"`
	// Action and Target: the admin change ("identity.disable", "identity
	// a7"), the MQTT action and topic refused, or the method and path of a
	// refused request.
	Action     string  `json:"action,omitempty"`
	Target     string  `json:"target,omitempty"`
	Status     int     `json:"status,omitempty"`
	DurationMs float64 `json:"durationMs"`
	// Outcome: ok, tool_error, timeout, refused, error, cancelled.
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
	RequestID string `json:"requestId,omitempty"`
}

// NewAuditEvent converts a stored record.
func NewAuditEvent(e store.AuditEvent) AuditEvent {
	return AuditEvent{
		ID: e.ID, Time: e.Time.UTC(), Kind: e.Kind, TokenID: e.TokenID, User: e.UserID, ClientID: e.ClientID,
		SessionID: e.SessionID, EntityType: e.EntityType, EntityID: e.EntityID, Tool: e.Tool, Agent: e.Agent, Source: e.Source,
		Action: e.Action, Target: e.Target, Status: e.Status, Outcome: e.Outcome, Reason: e.Reason, RequestID: e.RequestID,
		DurationMs: float64(e.Duration.Microseconds()) / 1000,
	}
}

// AuditQuery selects audit records; zero fields select everything.
type AuditQuery struct {
	// Since (inclusive) and Until (exclusive) bound the records' times.
	Since, Until              time.Time
	User, Tool, Outcome, Kind string
	// Agent selects the calls of the tools an expert agent serves.
	Agent string
	// Limit is the page size: 0 means 100, at most 1000.
	Limit int
	// Cursor continues a previous page (AuditPage.Next).
	Cursor string
}

// AuditPage is one page of audit records, newest first.
type AuditPage struct {
	Events []AuditEvent `json:"events"`
	// Next is the cursor of the next (older) page; "" when this is the last.
	Next string `json:"next,omitempty"`
}

// Audit reads the audit log. Records reach it within the writer's flush
// interval (serve --audit-flush-interval).
func (s *Service) Audit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	evs, next, err := s.opts.Store.QueryAudit(ctx, store.AuditQuery(q))
	if errors.Is(err, store.ErrInvalidAuditQuery) {
		return AuditPage{}, invalid("%v", err)
	}
	if err != nil {
		return AuditPage{}, err
	}
	out := AuditPage{Events: make([]AuditEvent, len(evs)), Next: next}
	for i, e := range evs {
		out.Events[i] = NewAuditEvent(e)
	}
	return out, nil
}

// AuditTail is what was written to the audit log since a mark.
type AuditTail struct {
	// Events are the records q selects written after the mark, oldest
	// first.
	Events []AuditEvent
	// Mark is where the next AuditTail starts.
	Mark int64
	// More: more records were written than the limit; those past it were
	// skipped (Mark is past them).
	More bool
}

// AuditTail returns the records q selects (its filters and time range;
// not its cursor or limit) written after mark, at most limit of them: the
// console's live tail. A negative mark returns none and the current mark,
// where a tail starts.
func (s *Service) AuditTail(ctx context.Context, q AuditQuery, mark int64, limit int) (AuditTail, error) {
	evs, next, more, err := s.opts.Store.AuditAfter(ctx, store.AuditQuery(q), mark, limit)
	if err != nil {
		return AuditTail{Mark: mark}, err
	}
	out := AuditTail{Events: make([]AuditEvent, len(evs)), Mark: next, More: more}
	for i, e := range evs {
		out.Events[i] = NewAuditEvent(e)
	}
	return out, nil
}

// Values is q as the query string of GET /audit.
func (q AuditQuery) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	set("user", q.User)
	set("tool", q.Tool)
	set("outcome", q.Outcome)
	set("kind", q.Kind)
	set("agent", q.Agent)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	set("cursor", q.Cursor)
	return v
}

// ParseAuditQuery reads the query string of GET /audit: times in RFC 3339.
func ParseAuditQuery(v url.Values) (AuditQuery, error) {
	q := AuditQuery{User: v.Get("user"), Tool: v.Get("tool"), Outcome: v.Get("outcome"), Kind: v.Get("kind"),
		Agent: v.Get("agent"), Cursor: v.Get("cursor")}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(t.name); s != "" {
			tm, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return q, invalid("%s %q: want an RFC 3339 time such as 2026-11-26T10:00:00Z", t.name, s)
			}
			*t.dst = tm
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.MaxAuditLimit {
			return q, invalid("limit %q: want 1..%d", s, store.MaxAuditLimit)
		}
		q.Limit = n
	}
	return q, nil
}

// auditRoutes adds GET /audit under p.
func (h *Handler) auditRoutes(r *mux.Router, p string) {
	type none = struct{}
	r.Handle(p+"/audit", endpoint(h, http.StatusOK, noBody, func(r *http.Request, _ none) (any, error) {
		q, err := ParseAuditQuery(r.URL.Query())
		if err != nil {
			return nil, err
		}
		return h.svc.Audit(r.Context(), q)
	})).Methods(http.MethodGet)
}

// Audit is Service.Audit over HTTP.
func (c *Client) Audit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	var out AuditPage
	return out, c.do(ctx, http.MethodGet, "/audit", q.Values(), nil, &out)
}

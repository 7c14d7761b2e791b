package audit

import (
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/gateway"
)

// maxField bounds every text field of a record: a path, a topic or an
// error text from a client cannot grow the log without bound.
const maxField = 256

var _ gateway.Observer = (*Log)(nil)

// ToolCall implements gateway.Observer: one record per tools/call, at its
// start time, without its arguments.
func (l *Log) ToolCall(tc *gateway.ToolCall) {
	l.Record(acl.AuditEvent{
		Time: tc.Start, Kind: acl.AuditToolCall, TokenID: tc.TokenID, UserID: tc.UserID, SessionID: clip(tc.SessionID),
		EntityType: tc.EntityType, EntityID: tc.EntityID, Tool: clip(tc.Tool), Source: tc.Source,
		Duration: tc.Duration, Outcome: tc.Outcome, Reason: clip(tc.Reason), RequestID: tc.RequestID,
	})
}

// Refused implements gateway.Observer: one record per request refused
// before it ran. A request refused for its token (401) is attributed to the
// token ID the bearer secret claims, never to the secret.
func (l *Log) Refused(r *http.Request, status int, reason string) {
	e := acl.AuditEvent{
		Time: time.Now(), Kind: acl.AuditRefused, Status: status, Outcome: gateway.OutcomeRefused, Reason: clip(reason),
		Action: r.Method, Target: clip(r.URL.Path), RequestID: gateway.RequestID(r.Context()),
	}
	if tok, _, ok := acl.TokenFrom(r.Context()); ok {
		e.TokenID, e.UserID = tok.ID, tok.UserID
	} else if scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		e.TokenID = acl.TokenIDOf(strings.TrimSpace(secret))
	}
	l.Record(e)
}

// Request implements gateway.Observer; the audit log keeps tools/call
// only.
func (l *Log) Request(string, time.Duration) {}

// AgentRequest implements gateway.Observer; the tools/call record has what
// matters.
func (l *Log) AgentRequest(string, time.Duration, error) {}

// AdminChange records a change asked of the admin model (admin.Options.OnChange).
func (l *Log) AdminChange(c admin.Change) {
	l.Record(adminEvent(c))
}

// adminEvent is the record of an admin change: through the API it names
// the token and its user, through a data directory Source is "data-dir".
func adminEvent(c admin.Change) acl.AuditEvent {
	e := acl.AuditEvent{Time: c.Time, Kind: acl.AuditAdmin, TokenID: c.TokenID, UserID: c.User,
		Action: c.Action, Target: clip(c.Target), Outcome: gateway.OutcomeOK, Source: "api"}
	if c.Local {
		e.Source = "data-dir"
	}
	if c.Err != nil {
		e.Outcome, e.Reason = gateway.OutcomeError, clip(c.Err.Error())
	}
	return e
}

// AdminChangeEvent is the record of an admin change, for a process that
// writes it itself (the CLI on a data directory).
func AdminChangeEvent(c admin.Change) acl.AuditEvent { return adminEvent(c) }

// BrokerEvent records what the embedded broker reports (broker.Options.Events):
// the connects and disconnects of expert agents, and every ACL refusal.
func (l *Log) BrokerEvent(e broker.Event) {
	r := acl.AuditEvent{Time: e.Time, UserID: e.Username, ClientID: clip(e.ClientID), Outcome: gateway.OutcomeOK, Source: "mqtt"}
	switch e.Kind {
	case broker.EventConnect, broker.EventDisconnect:
		if e.Role != acl.RoleExpertAgent {
			return
		}
		r.Kind, r.Target = acl.AuditAgentConnect, e.Remote
		if e.Kind == broker.EventDisconnect {
			r.Kind = acl.AuditAgentDisconnect
			if e.Err != nil {
				r.Reason = clip(e.Err.Error())
			}
		}
	case broker.EventDenied:
		r.Kind, r.Outcome, r.Action, r.Target = acl.AuditMQTTDenied, gateway.OutcomeRefused, e.Action, clip(e.Topic)
		r.Reason = "acl"
		if e.Err != nil {
			r.Reason = "acl: " + clip(e.Err.Error())
		}
	case broker.EventLoginRefused:
		r.Kind, r.Outcome, r.Action = acl.AuditMQTTDenied, gateway.OutcomeRefused, "connect"
		r.Reason = "login"
		if e.Err != nil {
			r.Reason = "login: " + clip(e.Err.Error())
		}
	default:
		return
	}
	l.Record(r)
}

// clip cuts s to maxField bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxField {
		return s
	}
	s = s[:maxField]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

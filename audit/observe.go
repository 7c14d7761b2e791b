package audit

import (
	"net/http"
	"strings"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/broker"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/internal/netsrc"
	"github.com/toolbus/toolbus/store"
)

// maxField bounds every text field of a record (clipEvent): a user name, a
// client ID, a path, a topic or an error text from a client cannot grow
// the log without bound.
const maxField = 256

var _ gateway.Observer = (*Log)(nil)

// ToolCall implements gateway.Observer: one record per tools/call, at its
// start time, without its arguments. Like every record, its text fields
// are clipped by Record.
func (l *Log) ToolCall(tc *gateway.ToolCall) {
	l.Record(store.AuditEvent{
		Time: tc.Start, Kind: store.AuditToolCall, TokenID: tc.TokenID, UserID: tc.UserID, SessionID: tc.SessionID,
		EntityType: tc.EntityType, EntityID: tc.EntityID, Tool: tc.Tool, Agent: tc.Agent, Source: tc.Source,
		Duration: tc.Duration, Outcome: tc.Outcome, Reason: tc.Reason, RequestID: tc.RequestID,
	})
}

// Refused implements gateway.Observer: one record per request refused
// before it ran. A request refused for its token (401) is attributed to the
// token ID the bearer secret claims, never to the secret. Its aggregation
// source is the client's address (Options.TrustedProxies), and a method
// HTTP does not define is recorded as "other".
func (l *Log) Refused(r *http.Request, status int, reason string) {
	e := store.AuditEvent{
		Time: time.Now(), Kind: store.AuditRefused, Status: status, Outcome: gateway.OutcomeRefused, Reason: reason,
		Action: httpMethod(r.Method), Target: r.URL.Path, RequestID: gateway.RequestID(r.Context()),
	}
	who := "" // the aggregation key's actor: only one the gateway authenticated
	if tok, _, ok := store.TokenFrom(r.Context()); ok {
		e.TokenID, e.UserID = tok.ID, tok.UserID
		who = tok.ID
	} else if scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		e.TokenID = store.TokenIDOf(strings.TrimSpace(secret))
	}
	l.record(e, netsrc.ClientKey(r, l.opts.TrustedProxies), who)
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
// the token and its user, through the console the operator (Source
// "console"), through a data directory Source is "data-dir".
func adminEvent(c admin.Change) store.AuditEvent {
	e := store.AuditEvent{Time: c.Time, Kind: store.AuditAdmin, TokenID: c.TokenID, UserID: c.User,
		Action: c.Action, Target: c.Target, Outcome: gateway.OutcomeOK, Source: c.Door}
	switch {
	case c.Door != "":
	case c.Local:
		e.Source = admin.DoorDataDir
	default:
		e.Source = admin.DoorAPI
	}
	if c.Err != nil {
		e.Outcome, e.Reason = gateway.OutcomeError, c.Err.Error()
	}
	clipEvent(&e) // also for the CLI, which writes it itself
	return e
}

// AdminChangeEvent is the record of an admin change, for a process that
// writes it itself (the CLI on a data directory).
func AdminChangeEvent(c admin.Change) store.AuditEvent { return adminEvent(c) }

// BrokerEvent records what the embedded broker reports (broker.Options.Events):
// the connects and disconnects of expert agents, and every ACL refusal and
// refused login. A refused login's user name and client ID are the
// client's to choose: they are clipped like every field, and its
// aggregation key is its remote address alone (Target holds it).
func (l *Log) BrokerEvent(e broker.Event) {
	r := store.AuditEvent{Time: e.Time, UserID: e.Username, ClientID: e.ClientID, Outcome: gateway.OutcomeOK, Source: "mqtt"}
	who := "" // the aggregation key's actor: a logged-in client only
	switch e.Kind {
	case broker.EventConnect, broker.EventDisconnect:
		if e.Role != acl.RoleExpertAgent {
			return
		}
		r.Kind, r.Target = store.AuditAgentConnect, e.Remote
		if e.Kind == broker.EventDisconnect {
			r.Kind = store.AuditAgentDisconnect
			if e.Err != nil {
				r.Reason = e.Err.Error()
			}
		}
	case broker.EventDenied:
		r.Kind, r.Outcome, r.Action, r.Target = store.AuditMQTTDenied, gateway.OutcomeRefused, e.Action, e.Topic
		r.Reason = "acl"
		if e.Err != nil {
			r.Reason = "acl: " + e.Err.Error()
		}
		// A logged-in client: its identity and client ID are its own.
		who = clip.String(e.Username, maxField) + "\x00" + clip.String(e.ClientID, maxField)
	case broker.EventLoginRefused:
		r.Kind, r.Outcome, r.Action, r.Target = store.AuditMQTTDenied, gateway.OutcomeRefused, "connect", e.Remote
		r.Reason = "login"
		if e.Err != nil {
			r.Reason = "login: " + e.Err.Error()
		}
	default:
		return
	}
	l.record(r, netsrc.Key(e.Remote), who)
}

// clipEvent cuts every text field of e to maxField bytes: whichever a
// client can choose (an MQTT user name or client ID, a path, a reason
// quoting a client's input) stays short in the store.
func clipEvent(e *store.AuditEvent) {
	for _, f := range []*string{&e.Kind, &e.TokenID, &e.UserID, &e.ClientID, &e.SessionID, &e.EntityType, &e.EntityID,
		&e.Tool, &e.Agent, &e.Source, &e.Action, &e.Target, &e.Outcome, &e.Reason, &e.RequestID} {
		*f = clip.String(*f, maxField)
	}
}

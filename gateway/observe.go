package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Outcomes of a tools/call, as ToolCall.Outcome names them.
const (
	OutcomeOK        = "ok"         // a result without isError
	OutcomeToolError = "tool_error" // a result with isError: true, from the tool
	OutcomeTimeout   = "timeout"    // the expert agent did not answer in time
	OutcomeRefused   = "refused"    // scope, read-only token, unknown tool, bad arguments
	OutcomeError     = "error"      // no agent online, agent unreachable, protocol error
	OutcomeCancelled = "cancelled"  // the client went away or cancelled
)

// Sources of a tool, as ToolCall.Source names them.
const (
	SourcePlatform = "platform"
	SourceAgent    = "agent"
)

// ToolCall is one finished tools/call, as an Observer hears of it. It holds
// no secret and no argument values.
type ToolCall struct {
	Start                time.Time
	Duration             time.Duration
	RequestID            string
	TokenID              string // the token's public ID (its visible prefix)
	UserID               string
	SessionID            string
	EntityType, EntityID string
	Tool                 string
	Source               string // SourcePlatform, SourceAgent, or "" when no tool was found
	Agent                string // the agent that serves the tool (SourceAgent only)
	Outcome              string
	Reason               string // for refusals and errors: why, in a few words
}

// Observer hears what the gateway does: metrics and the audit log implement
// it. Its methods run on the request's goroutine, on the hot path: they must
// be quick and must not block.
type Observer interface {
	// ToolCall is called once per tools/call that reached tool lookup.
	ToolCall(tc *ToolCall)
	// Refused is called for every request refused before it ran (status
	// 401, 403, 413, ...), with the reason code of the error body.
	Refused(r *http.Request, status int, reason string)
	// Request is called once per answered MCP request: its JSON-RPC method
	// (one of the methods the gateway serves, else "other") and how long
	// it took.
	Request(method string, d time.Duration)
	// AgentRequest is called once per request sent to the expert agents
	// (the MQTT round trip, input rounds included), with its error if any.
	AgentRequest(method string, d time.Duration, err error)
}

// isErrorResult reports whether a tools/call result has isError: true at
// its top level. Most results never mention isError, and those are told
// apart without decoding.
func isErrorResult(result []byte) bool {
	if !bytes.Contains(result, []byte(`"isError"`)) {
		return false
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &r) == nil && r.IsError
}

// observedMethods are the method labels an Observer may see; any other
// method is "other", so that a client cannot make labels up.
var observedMethods = map[string]string{
	"initialize": "initialize", "server/discover": "server/discover", "ping": "ping",
	"logging/setLevel": "logging/setLevel", "tools/list": "tools/list", "tools/call": "tools/call",
	"resources/list": "resources/list", "resources/read": "resources/read",
	"resources/templates/list": "resources/templates/list", "prompts/list": "prompts/list",
	"prompts/get": "prompts/get", "completion/complete": "completion/complete",
	"resources/subscribe": "resources/subscribe", "resources/unsubscribe": "resources/unsubscribe",
}

func observedMethod(m string) string {
	if l, ok := observedMethods[m]; ok {
		return l
	}
	return "other"
}

// callOutcome is what toolsCall learnt about a call, for the Observer.
type callOutcome struct {
	source, agent, outcome, reason string
}

// setOutcome notes how the call ended, unless something more precise was
// noted first. (toolsCall notes the call's source when it resolves the tool.)
func (r *request) setOutcome(outcome, reason string) {
	if r.outcome.outcome != "" {
		return
	}
	r.outcome.outcome, r.outcome.reason = outcome, reason
}

// resultOutcome notes a result: ok or tool_error.
func (r *request) resultOutcome(result []byte) {
	if isErrorResult(result) {
		r.setOutcome(OutcomeToolError, "")
		return
	}
	r.setOutcome(OutcomeOK, "")
}

// observeCall reports a finished tools/call.
func (g *Gateway) observeCall(r *request, name string, start time.Time) {
	o := r.outcome
	if o.outcome == "" {
		o.outcome = OutcomeError
	}
	g.opts.Observer.ToolCall(&ToolCall{
		Start: start, Duration: time.Since(start), RequestID: requestIDOf(r.ctx),
		TokenID: r.tok.ID, UserID: r.tok.UserID, SessionID: r.bus.SessionID,
		EntityType: r.bus.EntityType, EntityID: r.bus.EntityID,
		Tool: clip(name), Source: o.source, Agent: o.agent, Outcome: o.outcome, Reason: o.reason,
	})
}

// Observers fans every report out to each Observer in turn (metrics, then
// the audit log). Each must be quick: they run on the request's goroutine.
type Observers []Observer

var _ Observer = Observers(nil)

// ToolCall implements Observer.
func (obs Observers) ToolCall(tc *ToolCall) {
	for _, o := range obs {
		o.ToolCall(tc)
	}
}

// Refused implements Observer.
func (obs Observers) Refused(r *http.Request, status int, reason string) {
	for _, o := range obs {
		o.Refused(r, status, reason)
	}
}

// Request implements Observer.
func (obs Observers) Request(method string, d time.Duration) {
	for _, o := range obs {
		o.Request(method, d)
	}
}

// AgentRequest implements Observer.
func (obs Observers) AgentRequest(method string, d time.Duration, err error) {
	for _, o := range obs {
		o.AgentRequest(method, d, err)
	}
}

// RequestID is the ID the gateway gave the request of ctx (the one echoed in
// X-Request-Id), or "" outside a gateway request: for Observers, whose
// Refused gets the request.
func RequestID(ctx context.Context) string { return requestIDOf(ctx) }

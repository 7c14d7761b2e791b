package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/store"
)

// The MCP methods. The transport (transport.go) reads a request off the
// wire, checks its framing, finds its session and context, and hands the
// methods a request; a method returns the result or the JSON-RPC error, and
// the transport writes it (choosing the HTTP status from the answer's
// refusal).
// While it runs, a method may send messages ahead of its answer through the
// request's stream.

// request is one MCP request as the methods see it.
type request struct {
	ctx    context.Context // ends when the client goes away
	id     json.RawMessage
	method string
	params json.RawMessage // forwarded to the agents as they came
	p      rpcParams       // the members of params the gateway reads
	tok    store.Token
	secret string // the bearer token, forwarded to platform tools
	modern bool   // the stateless era (2026-07-28)
	sess   *session
	bus    contract.Context // the request's context on the bus
	minLog int              // lowest log level relayed; -1: relay none
	out    stream

	// Set by the methods for the transport and the Observer.
	sessionID string      // a session initialize created
	outcome   callOutcome // how a tools/call ended
}

// rpcParams holds the members of params that the gateway itself reads, for
// every method it serves. Everything else is forwarded untouched.
type rpcParams struct {
	Meta *struct {
		ProtocolVersion    string          `json:"io.modelcontextprotocol/protocolVersion"`
		ClientCapabilities json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
		LogLevel           string          `json:"io.modelcontextprotocol/logLevel"`
	} `json:"_meta"`
	Cursor          string          `json:"cursor"`          // tools/list
	Name            string          `json:"name"`            // tools/call
	Arguments       json.RawMessage `json:"arguments"`       // tools/call
	ProtocolVersion string          `json:"protocolVersion"` // initialize
	Capabilities    json.RawMessage `json:"capabilities"`    // initialize
	Level           string          `json:"level"`           // logging/setLevel
}

// stream carries messages to the client ahead of a request's answer:
// notifications and server-to-client requests.
type stream interface {
	// open reports whether the client can receive such messages at all.
	open() bool
	// send sends one message; it reports false when it could not.
	send(msg []byte) bool
}

// answer is a method's answer: a result, or a JSON-RPC error and how the
// request was refused, which the transport maps onto its own signals
// (HTTP status, Retry-After). The zero answer is none: the client went
// away.
type answer struct {
	result     json.RawMessage
	err        *jsonrpc.Error
	refusal    refusal
	retryAfter int // seconds, with refusedRateLimited and refusedTooManySessions
	// needScope is the scope whose lack refused the request, for the
	// 403's insufficient_scope challenge (step-up authorization).
	needScope string
}

// refusal is why an error answer turned the request down.
type refusal int

const (
	notRefused               refusal = iota
	refusedForbidden                 // the token may not do this
	refusedRateLimited               // a rate limit; retry after answer.retryAfter
	refusedUnknownMethod             // no such method in the request's era
	refusedMissingCapability         // the client lacks a capability the answer needs
	refusedTooManySessions           // the user's session bound; retry after answer.retryAfter
)

func result(b []byte) answer          { return answer{result: b} }
func failure(e *jsonrpc.Error) answer { return answer{err: e} }
func invalidParams(format string, args ...any) answer {
	return failure(jsonrpc.NewError(jsonrpc.CodeInvalidParams, format, args...))
}

// handle serves one request by method.
func (g *Gateway) handle(r *request) answer {
	if g.opts.Observer != nil {
		start := time.Now()
		defer func() { g.opts.Observer.Request(observedMethod(r.method), time.Since(start)) }()
	}
	switch r.method {
	case "initialize":
		if r.modern {
			return methodNotFound(r)
		}
		return g.initialize(r)
	case "server/discover":
		if !r.modern {
			return methodNotFound(r)
		}
		return g.discover()
	case "ping":
		if r.modern {
			return methodNotFound(r)
		}
		return result([]byte(`{}`))
	case "logging/setLevel":
		if r.modern {
			return methodNotFound(r)
		}
		return setLevel(r)
	case "subscriptions/listen":
		if !r.modern {
			return methodNotFound(r)
		}
		return g.subscriptionsListen(r)
	case "tools/list":
		return g.toolsList(r)
	case "tools/call":
		if n := r.p.Name; n != "" && !mcp.ValidName(n) && r.tok.HasScope(store.ScopeToolsCall) {
			// No tool has such a name: answered without asking the agents
			// for their list, and without echoing a name of any size.
			return invalidParams("unknown tool %q", clip(n))
		}
		return g.toolsCall(r)
	}
	if m, ok := agentMethods[r.method]; ok {
		return g.passThrough(r, m)
	}
	return methodNotFound(r)
}

func methodNotFound(r *request) answer {
	return answer{err: jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method %q not found", clip(r.method)), refusal: refusedUnknownMethod}
}

// Capabilities the endpoint declares. Resources, prompts and completion
// come from the expert agents. Clients hear of tool list changes on a
// legacy session's GET stream, or on a 2026 subscriptions/listen stream
// (listen.go); prompt and resource changes are not relayed yet, so neither
// is declared.
var (
	capabilitiesJSON       = []byte(`{"tools":{"listChanged":true},"resources":{"subscribe":true},"prompts":{},"completions":{},"logging":{}}`)
	modernCapabilitiesJSON = []byte(`{"tools":{"listChanged":true},"resources":{},"prompts":{},"completions":{}}`)
)

func (g *Gateway) initialize(r *request) answer {
	version := r.p.ProtocolVersion
	if !legacyVersion(version) {
		version = version20251125
	}
	caps := r.p.Capabilities
	if !declaresAny(caps) {
		caps = nil // nothing to tell the agents: spares re-encoding params per call
	}
	// create copies what it keeps of version and caps: both point into the
	// request body, which a session must not pin for its life.
	var err error
	if _, r.sessionID, err = g.sessions.create(r.tok.UserID, r.tok.Holder(), version, caps); err != nil {
		return tooManySessions(r)
	}
	res := map[string]any{
		"protocolVersion": version,
		"capabilities":    json.RawMessage(capabilitiesJSON),
		"serverInfo":      g.serverInfo,
	}
	if g.opts.Instructions != "" {
		res["instructions"] = g.opts.Instructions
	}
	b, _ := json.Marshal(res)
	return result(b)
}

// declaresAny reports whether a capabilities object has any member.
func declaresAny(caps json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(caps, &m) == nil && len(m) > 0
}

func (g *Gateway) discover() answer {
	b, _ := json.Marshal(map[string]any{
		"supportedVersions": supportedVersions,
		"capabilities":      json.RawMessage(modernCapabilitiesJSON),
		"resultType":        resultTypeComplete,
		"ttlMs":             0,
		"cacheScope":        "private",
		"serverInfo":        g.serverInfo,
		"_meta":             map[string]any{metaServerInfo: g.serverInfo},
	})
	return result(b)
}

func setLevel(r *request) answer {
	lv := logLevelIndex(r.p.Level)
	if lv < 0 {
		return invalidParams("unknown log level %q", r.p.Level)
	}
	r.sess.mu.Lock()
	r.sess.logLevel = lv
	r.sess.mu.Unlock()
	return result([]byte(`{}`))
}

// forbidden answers a request the token may not make: a JSON-RPC error
// (which the transport sends with HTTP 403), so MCP clients see an ordinary
// error response.
func (g *Gateway) forbidden(r *request, msg string) answer {
	r.setOutcome(OutcomeRefused, "forbidden")
	g.logger(r.ctx).WithField("method", r.method).Info("forbidden: " + msg)
	return answer{err: &jsonrpc.Error{Code: codeForbidden, Message: "forbidden: " + msg}, refusal: refusedForbidden}
}

// lacksScope is forbidden for a token without scope: the 403 also says
// which scope the request needs (RFC 6750 insufficient_scope), so that an
// OAuth client can ask the user for it (the MCP spec's step-up).
func (g *Gateway) lacksScope(r *request, scope string) answer {
	a := g.forbidden(r, "the token lacks the "+scope+" scope")
	a.needScope = scope
	return a
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/store"
)

// agentMethod describes an MCP method that the expert agents serve and the
// gateway passes through: params forwarded, the result returned raw.
type agentMethod struct {
	scope string // the token scope it needs
	// list names the array of a list result: the answer when no agent is
	// there is an empty list, not an error.
	list string
	// cacheable results carry ttlMs and cacheScope on the 2026 wire.
	cacheable bool
	// mrtr methods may answer "input required" (SEP-2322).
	mrtr bool
	// legacyOnly methods do not exist on the 2026 wire.
	legacyOnly bool
}

// agentMethods are aggregated from the expert agents the way tools are: same
// contexts, same topics, same scopes and narrowing. Reads (resources/read,
// prompts/get) need tools:call like calls do; listings need tools:list.
var agentMethods = map[string]agentMethod{
	"resources/list":           {scope: store.ScopeToolsList, list: "resources", cacheable: true},
	"resources/templates/list": {scope: store.ScopeToolsList, list: "resourceTemplates", cacheable: true},
	"resources/read":           {scope: store.ScopeToolsCall, cacheable: true, mrtr: true},
	"resources/subscribe":      {scope: store.ScopeToolsList, legacyOnly: true},
	"resources/unsubscribe":    {scope: store.ScopeToolsList, legacyOnly: true},
	"prompts/list":             {scope: store.ScopeToolsList, list: "prompts", cacheable: true},
	"prompts/get":              {scope: store.ScopeToolsCall, mrtr: true},
	"completion/complete":      {scope: store.ScopeToolsList},
}

// passThrough serves one agentMethods method.
func (g *Gateway) passThrough(r *request, m agentMethod) answer {
	if m.legacyOnly && r.modern {
		return methodNotFound(r)
	}
	if !r.tok.HasScope(m.scope) {
		return g.lacksScope(r, m.scope)
	}
	agents := slices.DeleteFunc(g.opts.Agents.OnlineAgents(r.ctx), func(a string) bool { return !r.tok.AllowsAgent(a) })
	switch {
	case len(agents) == 0:
		if m.list != "" {
			return passResult(r, m, []byte(`{"`+m.list+`":[]}`))
		}
		return g.agentError(r, requester.ErrNoAgent)
	case len(agents) > 1 && m.list != "":
		return g.mergeList(r, m, agents)
	case len(agents) > 1:
		return g.route(r, m, agents)
	}
	msg, err := g.agentRequest(r, agents[0], r.method, r.params, m.mrtr)
	if err != nil {
		if r.ctx.Err() != nil {
			return answer{} // nobody to answer
		}
		if m.list != "" {
			// As with tools/list: what the gateway has (nothing) comes back at once.
			g.stats.agentListFailed()
			g.logger(r.ctx).WithError(err).Warn(r.method + " without the expert agents")
			return passResult(r, m, []byte(`{"`+m.list+`":[]}`))
		}
		return g.agentError(r, err)
	}
	if msg.Error != nil {
		if m.list != "" && msg.Error.Code == jsonrpc.CodeMethodNotFound {
			// An agent with tools only need not serve the other lists.
			return passResult(r, m, []byte(`{"`+m.list+`":[]}`))
		}
		return agentRPCError(msg.Error)
	}
	return passResult(r, m, msg.Result)
}

func passResult(r *request, m agentMethod, res []byte) answer {
	if r.modern && m.cacheable {
		res = withCacheFields(res)
	}
	return result(res)
}

// agentError answers a non-tool request the agents could not serve.
func (g *Gateway) agentError(r *request, err error) answer {
	internal := func(format string, args ...any) answer {
		return failure(jsonrpc.NewError(jsonrpc.CodeInternalError, format, args...))
	}
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr):
		return agentRPCError(rpcErr)
	case errors.Is(err, requester.ErrNoAgent):
		return internal("no expert agent is online to serve %s; try again once one is connected", r.method)
	case errors.Is(err, requester.ErrTimeout):
		return internal("the expert agent did not answer %s in time", r.method)
	case errors.Is(err, requester.ErrAgentGone):
		return internal("the expert agent serving %s went offline before it answered; try again", r.method)
	case errors.Is(err, requester.ErrLinkLost):
		return internal("the gateway lost its connection to the MQTT broker during %s; try again in a moment", r.method)
	case errors.Is(err, requester.ErrClosed):
		return internal("the gateway is shutting down; try %s again in a moment", r.method)
	}
	g.logger(r.ctx).WithError(err).Warn("agent request failed")
	return internal("the expert agent could not be reached for %s", r.method)
}

// agentRPCError passes an agent's JSON-RPC error on. On the 2026 wire a
// missing client capability (-32021) is an HTTP 400, as the specification
// requires (the transport's business); everything else travels in a 200.
func agentRPCError(e *jsonrpc.Error) answer {
	if e.Code == codeMissingCapability {
		return answer{err: e, refusal: refusedMissingCapability}
	}
	return failure(e)
}

// withCacheFields adds the 2026 caching members to a list or read result
// that lacks them: the lists depend on the token, so they are private, and
// stale at once (agents may change them at any time).
func withCacheFields(result []byte) []byte {
	if len(result) < 2 || result[0] != '{' || bytes.Contains(result, []byte(`"ttlMs"`)) {
		return result
	}
	rest := bytes.TrimSpace(result[1:])
	out := make([]byte, 0, len(result)+40)
	out = append(out, `{"ttlMs":0,"cacheScope":"private"`...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// agentRequest sends one request to agent in the call's context,
// relaying their notifications to the client while it runs. On a legacy
// session it also serves the agents' "input required" answers itself
// (SEP-2322): it asks the client over the request's stream, as servers of
// those versions do, and calls the agents again with the answers. On the
// 2026 wire such answers go to the client as they are.
func (g *Gateway) agentRequest(r *request, agent, method string, params json.RawMessage, mrtr bool) (_ *jsonrpc.Message, err error) {
	ctx := r.ctx
	if r.sess != nil {
		// A notifications/cancelled from the client for this request ends it.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		key := string(r.id)
		r.sess.setInflight(key, cancel)
		defer r.sess.setInflight(key, nil)
		if caps := r.sess.caps; len(caps) > 0 {
			// Agents learn what the client can do from _meta, as on the 2026 wire.
			params = withMeta(params, metaClientCapabilities, caps)
		}
	}
	if g.opts.Observer != nil {
		start := time.Now()
		defer func() { g.opts.Observer.AgentRequest(method, time.Since(start), err) }()
	}
	relay := func(_ string, m *jsonrpc.Message) { g.relay(r, agent, m) }
	for round := 0; ; round++ {
		msg, err := g.opts.Agents.Request(ctx, r.bus, agent, callerOf(r.tok), method, params, relay)
		if err != nil || msg.Error != nil || !mrtr || r.modern || r.sess == nil {
			return msg, err
		}
		// Most results are final: the search spares them a decoding of the
		// whole result (1 MiB payloads included) on every call.
		var ir inputRequired
		if !bytes.Contains(msg.Result, resultInputRequired) ||
			json.Unmarshal(msg.Result, &ir) != nil || ir.ResultType != "input_required" {
			return msg, nil
		}
		if round == maxInputRounds {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "the expert agent asked for input %d times; giving up", round)
		}
		answers, err := g.askClient(ctx, r, ir.InputRequests)
		if err != nil {
			return nil, err
		}
		params = withInputResponses(params, answers, ir.RequestState)
	}
}

// resultInputRequired is in every result that asks for input, as its
// resultType. JSON allows \u escapes of plain letters too, but encoders
// write them as they are; a result that spelled it escaped would pass as
// final.
var resultInputRequired = []byte("input_required")

// maxInputRounds bounds the input rounds of one request, as clients bound them.
const maxInputRounds = 10

type inputRequired struct {
	ResultType    string                  `json:"resultType"`
	InputRequests map[string]inputRequest `json:"inputRequests"`
	RequestState  json.RawMessage         `json:"requestState"`
}

type inputRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// askClient sends each input request to the client as a server-to-client
// request on this request's SSE stream and waits for the answers, which the
// client POSTs as JSON-RPC responses on its session.
func (g *Gateway) askClient(ctx context.Context, r *request, reqs map[string]inputRequest) (map[string]json.RawMessage, error) {
	if !r.out.open() {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "the expert agent needs input from the client, which does not accept text/event-stream")
	}
	answers := make(map[string]json.RawMessage, len(reqs))
	for key, in := range reqs {
		if !clientCan(r.sess.caps, in.Method) {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "the expert agent asked for %s, which the client did not declare", in.Method)
		}
		id := "tb-" + strconv.FormatUint(g.requestSeq.Add(1), 36)
		ch := r.sess.expectResponse(id)
		params := in.Params
		if len(params) == 0 {
			params = json.RawMessage(`{}`)
		}
		b, _ := json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      string          `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params"`
		}{jsonrpc.Version, id, in.Method, params})
		r.out.send(b)
		select {
		case resp := <-ch:
			if resp.Error != nil {
				return nil, fmt.Errorf("the client answered %s with an error: %w", in.Method, resp.Error)
			}
			answers[key] = resp.Result
		case <-ctx.Done():
			r.sess.expectResponse(id) // drop the slot
			return nil, ctx.Err()
		}
	}
	return answers, nil
}

// clientCan reports whether the client declared the capability a
// server-to-client request needs.
func clientCan(caps json.RawMessage, method string) bool {
	var declared map[string]json.RawMessage
	_ = json.Unmarshal(caps, &declared)
	switch method {
	case "sampling/createMessage":
		return declared["sampling"] != nil
	case "elicitation/create":
		return declared["elicitation"] != nil
	case "roots/list":
		return declared["roots"] != nil
	}
	return false
}

// withMeta returns params with _meta[key] = value (params may be empty).
func withMeta(params json.RawMessage, key string, value json.RawMessage) json.RawMessage {
	p := map[string]json.RawMessage{}
	if len(params) > 0 {
		_ = json.Unmarshal(params, &p)
	}
	meta := map[string]json.RawMessage{}
	if m := p["_meta"]; len(m) > 0 {
		_ = json.Unmarshal(m, &meta)
	}
	meta[key] = value
	p["_meta"], _ = json.Marshal(meta)
	out, _ := json.Marshal(p)
	return out
}

// withInputResponses returns params for the next round: the answers and
// the agent's requestState (echoed exactly, left out if it sent none).
func withInputResponses(params json.RawMessage, answers map[string]json.RawMessage, state json.RawMessage) json.RawMessage {
	p := map[string]json.RawMessage{}
	if len(params) > 0 {
		_ = json.Unmarshal(params, &p)
	}
	p["inputResponses"], _ = json.Marshal(answers)
	delete(p, "requestState")
	if len(state) > 0 && string(state) != "null" {
		p["requestState"] = state
	}
	out, _ := json.Marshal(p)
	return out
}

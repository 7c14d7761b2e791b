package expertagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// agentProtocolVersions are the MCP versions initialize accepts, newest first.
var agentProtocolVersions = []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// errAgentCancelled is the cause of a request context cancelled by
// notifications/cancelled.
var errAgentCancelled = errors.New("cancelled by the caller")

// agentInbound is one decoded message from a request topic.
type agentInbound struct {
	// levels are the request topic's five context levels, as they stand in
	// it: what the reply topic and the call's key take from the topic.
	levels string
	ctx    contract.Context
	env    contract.Envelope
	msg    jsonrpc.Message
}

// onMessage runs on the link's delivery goroutine (paho's router, which
// delivers one message at a time: OrderMatters), so it neither blocks nor
// publishes. It decodes, handles cancellation at once (a cancel must not
// wait behind the calls it cancels), and hands everything else to the
// workers. payload is the message's own: in keeps pointing into it.
func (a *Agent) onMessage(topic string, payload []byte) {
	a.stats.received.Add(1)
	// The call carries its decoded request: one allocation for both.
	call := &agentCall{agent: a}
	in := &call.in
	if err := a.decode(topic, payload, in); err != nil {
		a.stats.dropped.Add(1)
		a.log.WithError(err).WithField("topic", topic).Debug("dropped message")
		return
	}
	switch {
	case in.msg.Method == agentMethodCancelled:
		a.cancelCall(in)
		return
	case in.msg.IsRequest():
	case in.msg.IsNotification():
		if a.methods[in.msg.Method] == nil {
			return // notifications/initialized and the like need nothing
		}
	default:
		// A response: the agent sends no requests to the client yet.
		a.stats.dropped.Add(1)
		a.log.WithField("correlationId", in.env.CorrelationID).Debug("dropped response message")
		return
	}
	a.enqueue(call)
}

// decode fills in from a request topic and its payload, the envelope and
// its JSON-RPC message in one pass (contract.Decode). paho hands every
// message its own payload slice, which nobody changes: in keeps pointing
// into it.
func (a *Agent) decode(topic string, payload []byte, in *agentInbound) error {
	t, err := agentParseRequestTopic(topic)
	if err != nil {
		return err
	}
	// The broker delivers nothing else to the agent's filters; a request for
	// another agent or instance must not be answered as this one all the same.
	if t.agent != a.opts.Username {
		return fmt.Errorf("topic %q: a request for agent %q, not %q", topic, t.agent, a.opts.Username)
	}
	if t.instance != contract.AnyInstance && t.instance != a.opts.ClientID {
		return fmt.Errorf("topic %q: a request for instance %q, not %q", topic, t.instance, a.opts.ClientID)
	}
	if err := t.ctx.Validate(); err != nil {
		return fmt.Errorf("topic %q: %w", topic, err)
	}
	in.levels, in.ctx = t.levels, t.ctx
	if err := contract.Decode(payload, &in.env, &in.msg); err != nil {
		return err
	}
	if in.msg.JSONRPC != jsonrpc.Version {
		return fmt.Errorf("%w: jsonrpc %q", contract.ErrBadEnvelope, in.msg.JSONRPC)
	}
	return nil
}

// agentRequestTopic is a request topic, split. Every string is a substring
// of the topic.
type agentRequestTopic struct {
	agent, instance string
	levels          string // the five context levels, joined by '/'
	ctx             contract.Context
}

// agentParseRequestTopic splits a request topic as contract.ParseTopic
// does, without the allocations of strings.Split, and leaves the levels
// unchecked: decode compares agent and instance with its own, which are
// valid, before it validates the context.
func agentParseRequestTopic(topic string) (agentRequestTopic, error) {
	rest, ok := strings.CutPrefix(topic, contract.TopicPrefix)
	if !ok {
		return agentRequestTopic{}, fmt.Errorf("topic %q: not under %s", topic, contract.TopicPrefix)
	}
	var t agentRequestTopic
	levels, ok := strings.CutSuffix(rest, "/"+contract.Request)
	if ok {
		t.agent, levels, ok = strings.Cut(levels, "/")
	}
	if ok {
		t.instance, levels, ok = strings.Cut(levels, "/")
	}
	t.levels = levels
	var l [5]string
	for i := 0; ok && i < len(l)-1; i++ {
		l[i], levels, ok = strings.Cut(levels, "/")
	}
	l[4] = levels
	if !ok || strings.IndexByte(levels, '/') >= 0 {
		return agentRequestTopic{}, fmt.Errorf("topic %q: want %s<agent>/<instance>/<5 levels>/%s", topic, contract.TopicPrefix, contract.Request)
	}
	t.ctx = contract.Context{PlatformID: l[0], UserID: l[1], SessionID: l[2], EntityType: l[3], EntityID: l[4]}
	return t, nil
}

// enqueue registers a request as in flight (so that it can be cancelled
// while it waits) and queues it; a full queue refuses it with a busy reply.
func (a *Agent) enqueue(call *agentCall) {
	in := &call.in
	now := time.Now()
	if in.env.Deadline > 0 && now.UnixMilli() >= in.env.Deadline {
		a.stats.expired.Add(1)
		a.log.WithField("correlationId", in.env.CorrelationID).Debug("request arrived after its deadline")
		return
	}
	a.newCall(call)
	if in.msg.IsRequest() {
		a.flightMu.Lock()
		if _, dup := a.inflight[call.key]; dup {
			a.flightMu.Unlock()
			call.cancel(nil)
			a.stats.dropped.Add(1)
			a.log.WithField("correlationId", in.env.CorrelationID).Debug("dropped duplicate request")
			return
		}
		call.started = now
		a.inflight[call.key] = call
		a.flightMu.Unlock()
	}
	a.inMu.RLock()
	defer a.inMu.RUnlock()
	if a.closing {
		a.forget(call)
		a.stats.dropped.Add(1)
		return
	}
	select {
	case a.queue <- call:
		return
	default:
	}
	a.forget(call)
	if !in.msg.IsRequest() {
		a.stats.dropped.Add(1)
		return
	}
	select {
	case a.rejects <- call:
		a.stats.rejected.Add(1)
	default:
		a.stats.dropped.Add(1)
		a.log.WithField("correlationId", in.env.CorrelationID).Warn("queue and busy replies full; request dropped")
	}
}

// newCall gives a request its context: the envelope's deadline, cancellable
// by notifications/cancelled and by a shutdown that gives up waiting.
func (a *Agent) newCall(call *agentCall) {
	in := &call.in
	parent := a.serveCtx
	if in.env.Deadline > 0 {
		parent, call.stopDeadline = context.WithDeadline(parent, time.UnixMilli(in.env.Deadline))
	}
	call.ctx, call.cancelCause = context.WithCancelCause(parent)
	call.key = agentCallKey{in.levels, in.env.CorrelationID}
	call.topic = a.replyTopic(in.levels)
	call.corrID = in.env.CorrelationID
}

// replyTopic is this instance's reply topic of a context, ReplyTopic(
// Username, ClientID), whichever instance level the request had: the broker
// takes replies only under the instance's own names, and a gateway learns
// from them who answered. levels are the context's, as in the request
// topic; one allocation.
func (a *Agent) replyTopic(levels string) string {
	return a.replyPrefix + levels + "/" + contract.Reply
}

// agentCallKey names a call in flight: its context levels and correlation
// ID (a struct key: no string to build per call). Not the instance level:
// a call requested from the pool ("_") is cancelled by a cancel addressed
// to the instance that claimed it, and a request that came both ways is
// one call.
type agentCallKey struct{ levels, corrID string }

// forget removes call from the in-flight table and releases its context.
func (a *Agent) forget(call *agentCall) {
	a.flightMu.Lock()
	if a.inflight[call.key] == call {
		delete(a.inflight, call.key)
	}
	a.flightMu.Unlock()
	call.cancel(context.Canceled)
}

// cancelCall handles notifications/cancelled: it cancels the call of the
// same context whose request ID (the gateway uses the correlation ID) is
// params.requestId, or else the envelope's correlation ID.
func (a *Agent) cancelCall(in *agentInbound) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
		Reason    string          `json:"reason"`
	}
	_ = json.Unmarshal(in.msg.Params, &p) // no usable requestId: fall back to the correlation ID
	keys := []agentCallKey{{in.levels, in.env.CorrelationID}}
	if id := agentIDString(p.RequestID); id != "" && id != in.env.CorrelationID {
		keys = append([]agentCallKey{{in.levels, id}}, keys...)
	}
	a.flightMu.Lock()
	var call *agentCall
	for _, k := range keys {
		if call = a.inflight[k]; call != nil {
			break
		}
	}
	a.flightMu.Unlock()
	if call == nil {
		a.log.WithField("correlationId", in.env.CorrelationID).Debug("cancel for no call in flight")
		return
	}
	reason := p.Reason
	if reason == "" {
		reason = "no reason given"
	}
	call.cancel(fmt.Errorf("%w: %s", errAgentCancelled, reason))
}

// agentIDString turns a JSON-RPC id (string or number) into its string form.
func agentIDString(id json.RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) == 0 || bytes.Equal(id, []byte("null")) {
		return ""
	}
	if id[0] == '"' {
		var s string
		if json.Unmarshal(id, &s) != nil {
			return ""
		}
		return s
	}
	return string(id)
}

// worker serves queued requests until the queue is closed.
func (a *Agent) worker() {
	for call := range a.queue {
		a.handle(call)
	}
}

// rejectLoop answers the requests the queue had no room for.
func (a *Agent) rejectLoop() {
	for call := range a.rejects {
		out := errorReply(call, fmt.Sprintf("expert agent %s is busy (%d requests in progress); retry shortly", a.opts.ClientID, 2*a.opts.Concurrency))
		if err := a.reply(context.Background(), call.topic, out); err != nil { // bounded by agentOpTimeout
			a.log.WithError(err).Warn("busy reply")
		}
	}
}

// handle runs one request and sends its response, unless the caller
// cancelled it or its deadline passed (nobody waits for it then).
func (a *Agent) handle(call *agentCall) {
	defer a.forget(call)
	in := &call.in
	var result json.RawMessage
	var rpcErr *jsonrpc.Error
	if call.ctx.Err() == nil {
		result, rpcErr = a.dispatch(call)
	} else if errors.Is(context.Cause(call.ctx), errAgentStopping) {
		rpcErr = jsonrpc.NewError(jsonrpc.CodeInternalError, "%s before the request ran; retry", errAgentStopping)
	}
	if !in.msg.IsRequest() {
		return
	}
	cause := context.Cause(call.ctx)
	switch {
	case errors.Is(cause, errAgentCancelled):
		a.stats.cancelled.Add(1)
		_ = call.finish(call.ctx, nil)
		a.log.WithField("correlationId", call.corrID).Debug("call cancelled by the caller; no response")
		return
	case errors.Is(cause, context.DeadlineExceeded):
		a.stats.expired.Add(1)
		_ = call.finish(call.ctx, nil)
		a.log.WithField("correlationId", call.corrID).Debug("call passed its deadline; no response")
		return
	}
	out := agentResponseEnvelope(call.corrID, in.msg.ID, result, rpcErr)
	if !a.fits(call.topic, out) {
		out = a.tooLarge(call, len(out))
	}
	// The response goes out even if the Agent is stopping meanwhile (the
	// call's context may be cancelled by now); the wait for the broker's
	// acknowledgement is bounded by agentOpTimeout alone.
	if err := call.finish(context.Background(), out); err != nil {
		a.log.WithError(err).WithField("correlationId", call.corrID).Warn("response not delivered")
		return
	}
	a.stats.responses.Add(1)
}

// tooLarge is the response that replaces one of size bytes the broker
// would not take: published, it would make the broker drop the
// connection, and every call in flight with it.
func (a *Agent) tooLarge(call *agentCall, size int) []byte {
	in := &call.in
	a.stats.tooLarge.Add(1)
	a.log.WithFields(map[string]any{"correlationId": call.corrID, "method": in.msg.Method, "bytes": size, "maxPacketSize": a.opts.MaxPacketSize}).
		Warn("response larger than the broker's maximum packet size; answered with an error instead")
	return errorReply(call, fmt.Sprintf("the result is too large to send: %d bytes, more than the %d bytes the broker accepts in one message; "+
		"ask for less (a narrower query, a smaller page)", size, a.opts.MaxPacketSize))
}

// errorReply is the response that tells call's caller msg: for tools/call
// a tool error (a result the model reads), for the other methods a
// JSON-RPC internal error.
func errorReply(call *agentCall, msg string) []byte {
	in := &call.in
	if in.msg.Method == agentMethodToolsCall {
		res, _ := encodeResult(mcp.ErrorResult("%s", msg))
		return agentResponseEnvelope(call.corrID, in.msg.ID, res, nil)
	}
	return agentResponseEnvelope(call.corrID, in.msg.ID, nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s", msg))
}

// agentResponse encodes a JSON-RPC response with encoding/json: the path
// for errors (agentResponseEnvelope writes results itself).
func agentResponse(id json.RawMessage, result json.RawMessage, rpcErr *jsonrpc.Error) []byte {
	m := jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: id}
	if rpcErr != nil {
		m.Error = rpcErr
	} else {
		if result == nil {
			result = json.RawMessage("{}")
		}
		m.Result = result
	}
	b, err := json.Marshal(&m)
	if err != nil { // only a malformed raw result gets here
		m.Result, m.Error = nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "encode response: %v", err)
		b, _ = json.Marshal(&m)
	}
	return b
}

// agentParams is what the built-in methods read from params.
type agentParams struct {
	Name            string          `json:"name"`
	Arguments       json.RawMessage `json:"arguments"`
	ProtocolVersion string          `json:"protocolVersion"`
	Meta            struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	} `json:"_meta"`
}

// dispatch runs the handler of the request's method. Every result it
// returns is compact JSON as json.Marshal writes it (agentResponseEnvelope
// copies it as is).
func (a *Agent) dispatch(call *agentCall) (json.RawMessage, *jsonrpc.Error) {
	in := &call.in
	a.stats.requests.Add(1)
	var p agentParams
	var paramsErr error
	if len(bytes.TrimSpace(in.msg.Params)) > 0 {
		paramsErr = agentDecodeParams(in.msg.Params, &p)
	}
	// The request lives in the call: no allocation of its own.
	call.req = CallRequest{MethodRequest: MethodRequest{
		Context: in.ctx, Caller: in.env.Caller, CorrelationID: in.env.CorrelationID,
		Method: in.msg.Method, Params: in.msg.Params, call: call,
	}}
	req := &call.req.MethodRequest
	if in.env.Deadline > 0 {
		req.Deadline = time.UnixMilli(in.env.Deadline)
	}
	if t := bytes.TrimSpace(p.Meta.ProgressToken); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		req.ProgressToken = t
	}
	if h := a.methods[in.msg.Method]; h != nil {
		return a.runMethod(call.ctx, h, req)
	}
	switch in.msg.Method {
	case agentMethodInitialize, agentMethodPing, agentMethodToolsList, agentMethodToolsCall:
		if paramsErr != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s: params must be an object: %v", in.msg.Method, paramsErr)
		}
	}
	switch in.msg.Method {
	case agentMethodInitialize:
		return a.initialize(p.ProtocolVersion)
	case agentMethodPing:
		return json.RawMessage("{}"), nil
	case agentMethodToolsList:
		return a.toolList, nil
	case agentMethodToolsCall:
		return a.callTool(call.ctx, &call.req, &p)
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %s", in.msg.Method)
}

// initialize answers MCP's initialize: the client's protocol version if
// supported (else the newest), capabilities, and serverInfo.
func (a *Agent) initialize(requested string) (json.RawMessage, *jsonrpc.Error) {
	version := agentProtocolVersions[0]
	if slices.Contains(agentProtocolVersions, requested) {
		version = requested
	}
	caps := map[string]any{"tools": map[string]bool{"listChanged": false}}
	for m := range a.methods {
		switch {
		case strings.HasPrefix(m, "resources/"):
			caps["resources"] = struct{}{}
		case strings.HasPrefix(m, "prompts/"):
			caps["prompts"] = struct{}{}
		case m == "completion/complete":
			caps["completions"] = struct{}{}
		case m == "logging/setLevel":
			caps["logging"] = struct{}{}
		}
	}
	b, err := json.Marshal(map[string]any{
		"protocolVersion": version,
		"capabilities":    caps,
		"serverInfo":      map[string]string{"name": a.opts.Name, "version": a.opts.Version},
	})
	if err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "initialize: %v", err)
	}
	return b, nil
}

// callTool serves tools/call: an unknown tool or malformed params are
// JSON-RPC errors (-32602); whatever the tool does is a result. req is the
// call's request, its MethodRequest filled in.
func (a *Agent) callTool(ctx context.Context, req *CallRequest, p *agentParams) (json.RawMessage, *jsonrpc.Error) {
	if p.Name == "" {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "tools/call: params.name is required")
	}
	idx, ok := a.byName[p.Name]
	if !ok {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool: %q", p.Name)
	}
	args := bytes.TrimSpace(p.Arguments)
	if bytes.Equal(args, []byte("null")) {
		args = nil
	}
	if len(args) > 0 && args[0] != '{' {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "tools/call %s: arguments must be a JSON object", p.Name)
	}
	tool := &a.tools[idx]
	var res *mcp.CallToolResult
	if req.Caller != nil && req.Caller.ReadOnly && !tool.ReadOnly() {
		// The gateway checks this first; an agent never widens what a caller may do.
		res = mcp.ErrorResult("tool %q changes state and the caller's token is read-only; use a token without --read-only", tool.Name)
	} else {
		var rpcErr *jsonrpc.Error
		req.Name, req.Arguments, req.required = p.Name, args, tool.required
		res, rpcErr = a.runTool(ctx, tool, req)
		if rpcErr != nil {
			return nil, rpcErr
		}
	}
	b, err := encodeResult(res)
	if err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "tool %q: %v", tool.Name, err)
	}
	return b, nil
}

// runTool calls the tool's handler; an error or a panic becomes an isError
// result, a *jsonrpc.Error a JSON-RPC error.
func (a *Agent) runTool(ctx context.Context, tool *Tool, req *CallRequest) (res *mcp.CallToolResult, rpcErr *jsonrpc.Error) {
	defer func() {
		if v := recover(); v != nil {
			a.stats.panics.Add(1)
			a.log.WithFields(map[string]any{"tool": tool.Name, "panic": fmt.Sprint(v), "stack": string(debug.Stack())}).Error("tool handler panicked")
			res, rpcErr = mcp.ErrorResult("tool %q failed with an internal error", tool.Name), nil
		}
	}()
	res, err := tool.Handler(ctx, req)
	if err != nil {
		if errors.As(err, &rpcErr) {
			return nil, rpcErr
		}
		if errors.Is(context.Cause(ctx), errAgentStopping) {
			return mcp.ErrorResult("tool %q was stopped because the %s; retry the call", tool.Name, errAgentStopping), nil
		}
		return mcp.ErrorResult("%s", err.Error()), nil
	}
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	return res, nil
}

// runMethod calls a handler registered with Handle.
func (a *Agent) runMethod(ctx context.Context, h MethodHandler, req *MethodRequest) (result json.RawMessage, rpcErr *jsonrpc.Error) {
	defer func() {
		if v := recover(); v != nil {
			a.stats.panics.Add(1)
			a.log.WithFields(map[string]any{"method": req.Method, "panic": fmt.Sprint(v), "stack": string(debug.Stack())}).Error("method handler panicked")
			result, rpcErr = nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s failed with an internal error", req.Method)
		}
	}()
	v, err := h(ctx, req)
	if err != nil {
		if errors.As(err, &rpcErr) {
			return nil, rpcErr
		}
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s: %v", req.Method, err)
	}
	if raw, ok := v.(json.RawMessage); ok && len(raw) > 0 {
		// Compacted and checked here, as encoding the response did before:
		// the response is assembled from it as is.
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "encode response: %v", err)
		}
		return b, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "%s: encode result: %v", req.Method, err)
	}
	if bytes.Equal(b, []byte("null")) {
		b = []byte("{}") // JSON-RPC needs a result; MCP results are objects
	}
	return b, nil
}

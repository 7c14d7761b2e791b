package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	sdkrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// notifyTimeout bounds relaying one notification (progress, log, a list
// change) to the bus: the go-sdk client handles the upstream's
// notifications one at a time.
const notifyTimeout = 5 * time.Second

// lifetime is one life of the upstream: its client session, the agent that
// serves it, and the calls open upstream. It ends when the upstream does.
type lifetime struct {
	b      *Bridge
	log    *logrus.Entry
	cs     *sdk.ClientSession
	stderr *lineLogger        // a stdio upstream's
	proc   *process           // a stdio upstream's
	agent  *expertagent.Agent // set by register, under mu

	// ctx is the parent of every upstream call: calls outlive the bus
	// request that starts them while they wait for the client's input,
	// and end with the lifetime.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	calls     sync.WaitGroup // the goroutines that wait for upstream calls

	mu       sync.Mutex
	open     map[string]*call // by id: every call open upstream
	held     map[string]*call // by the state of the round they wait for
	tokens   map[string]*call // by the progress token sent upstream
	readOnly map[string]bool  // readOnlyHint by tool, from the latest tools/list; nil = not listed yet
	busy     int              // bus requests being served now
	seq      uint64
}

func newLifetime(b *Bridge) *lifetime {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifetime{
		b: b, log: b.log, ctx: ctx, cancel: cancel,
		open:   make(map[string]*call),
		held:   make(map[string]*call),
		tokens: make(map[string]*call),
	}
}

// close ends the lifetime: every upstream call, then the session (which
// stops a stdio upstream's process).
func (l *lifetime) close() {
	l.closeOnce.Do(func() {
		l.releaseHeld()
		l.cancel()
		l.forgetAll()
		if l.cs != nil {
			_ = l.cs.Close()
		}
		l.stderr.flush()
	})
}

// heldReleaseWait bounds how long a closing lifetime waits for the calls
// it held to end upstream.
const heldReleaseWait = 2 * time.Second

// releaseHeld answers the questions of the calls held for a next round
// with an error, and waits (heldReleaseWait at most) for those calls to
// end upstream: a server that closed its session while its own request
// was unanswered could wait for the answer for ever (the go-sdk's does).
func (l *lifetime) releaseHeld() {
	l.mu.Lock()
	var held []*call
	for _, c := range l.held {
		held = append(held, c)
		c.pending.answer <- answer{err: errors.New("the bridge is stopping; the client's answer will not come")}
		delete(l.held, c.state)
		c.pending, c.state = nil, ""
		c.expiry.Stop()
	}
	l.mu.Unlock()
	t := time.NewTimer(heldReleaseWait)
	defer t.Stop()
	for _, c := range held {
		select {
		case <-c.done:
		case <-t.C:
			return
		}
	}
}

// wait returns once no goroutine of the lifetime runs.
func (l *lifetime) wait() {
	l.close()
	l.calls.Wait()
}

// ended forgets the calls open upstream: the upstream that held them is
// gone. (The calls running fail on their own too, with the session.)
func (l *lifetime) ended(err error) {
	l.log.WithError(l.b.redact.err(err)).Warn("upstream ended")
	l.forgetAll()
}

func (l *lifetime) forgetAll() {
	l.mu.Lock()
	open := make([]*call, 0, len(l.open))
	for _, c := range l.open {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open {
		l.forget(c)
	}
}

// register serves on agent what the upstream declared.
func (l *lifetime) register(a *expertagent.Agent, caps *sdk.ServerCapabilities) {
	l.mu.Lock()
	l.agent = a // the upstream may announce a change from now on
	l.mu.Unlock()
	agent := countingAgent{a, l}
	if caps == nil {
		caps = &sdk.ServerCapabilities{}
	}
	if caps.Tools != nil {
		agent.Handle("tools/list", l.listTools)
		agent.Handle("tools/call", l.callTool)
	}
	if caps.Resources != nil {
		agent.Handle("resources/list", func(ctx context.Context, _ *expertagent.MethodRequest) (any, error) {
			return listAll(l, "resources", l.cs.Resources(ctx, nil))
		})
		agent.Handle("resources/templates/list", func(ctx context.Context, _ *expertagent.MethodRequest) (any, error) {
			return listAll(l, "resourceTemplates", l.cs.ResourceTemplates(ctx, nil))
		})
		agent.Handle("resources/read", l.readResource)
		if caps.Resources.Subscribe {
			agent.Handle("resources/subscribe", func(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
				var p sdk.SubscribeParams
				if err := decodeInto(req.Params, &p); err != nil {
					return nil, err
				}
				return struct{}{}, l.upstreamErrOrNil(l.cs.Subscribe(ctx, &p))
			})
			agent.Handle("resources/unsubscribe", func(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
				var p sdk.UnsubscribeParams
				if err := decodeInto(req.Params, &p); err != nil {
					return nil, err
				}
				return struct{}{}, l.upstreamErrOrNil(l.cs.Unsubscribe(ctx, &p))
			})
		}
	}
	if caps.Prompts != nil {
		agent.Handle("prompts/list", func(ctx context.Context, _ *expertagent.MethodRequest) (any, error) {
			return listAll(l, "prompts", l.cs.Prompts(ctx, nil))
		})
		agent.Handle("prompts/get", l.getPrompt)
	}
	if caps.Completions != nil {
		agent.Handle("completion/complete", l.complete)
	}
}

// countingAgent registers handlers that count the bus requests being
// served (lifetime.busy): a notification or a question of the upstream is
// tied to a call only while nothing else is in flight.
type countingAgent struct {
	*expertagent.Agent
	l *lifetime
}

func (c countingAgent) Handle(method string, h expertagent.MethodHandler) {
	c.Agent.Handle(method, func(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
		c.l.mu.Lock()
		c.l.busy++
		c.l.mu.Unlock()
		defer func() {
			c.l.mu.Lock()
			c.l.busy--
			c.l.mu.Unlock()
		}()
		return h(ctx, req)
	})
}

// listAll gathers every page of an upstream list into {"<key>": [...]}:
// the gateway merges the lists of many agents and pages them itself.
func listAll[T any](l *lifetime, key string, items iter.Seq2[*T, error]) (any, error) {
	all, err := gather(l, items)
	if err != nil {
		return nil, err
	}
	return map[string]any{key: all}, nil
}

// gather reads every page of an upstream list (never nil: an empty list
// is [] on the wire).
func gather[T any](l *lifetime, items iter.Seq2[*T, error]) ([]*T, error) {
	all := []*T{}
	for it, err := range items {
		if err != nil {
			return nil, l.upstreamErr(err)
		}
		all = append(all, it)
	}
	return all, nil
}

func (l *lifetime) listTools(ctx context.Context, _ *expertagent.MethodRequest) (any, error) {
	tools, err := gather(l, l.cs.Tools(ctx, nil))
	if err != nil {
		return nil, err
	}
	ro := make(map[string]bool, len(tools))
	for _, t := range tools {
		ro[t.Name] = t.Annotations != nil && t.Annotations.ReadOnlyHint
	}
	l.mu.Lock()
	l.readOnly = ro
	l.mu.Unlock()
	return map[string]any{"tools": tools}, nil
}

// toolReadOnly reports whether the upstream annotates tool readOnlyHint,
// listing the tools first if they have not been listed since the last
// change.
func (l *lifetime) toolReadOnly(ctx context.Context, tool string) (bool, error) {
	l.mu.Lock()
	ro := l.readOnly
	l.mu.Unlock()
	if ro == nil {
		if _, err := l.listTools(ctx, nil); err != nil {
			return false, err
		}
		l.mu.Lock()
		ro = l.readOnly
		l.mu.Unlock()
	}
	return ro[tool], nil
}

// callParams are the members of a tools/call, prompts/get or
// resources/read the bridge reads itself.
type callParams struct {
	Meta           map[string]json.RawMessage `json:"_meta"`
	Name           string                     `json:"name"`
	URI            string                     `json:"uri"`
	Arguments      json.RawMessage            `json:"arguments"`
	InputResponses json.RawMessage            `json:"inputResponses"`
	RequestState   string                     `json:"requestState"`
}

func decodeCallParams(raw json.RawMessage) (*callParams, error) {
	p := &callParams{}
	return p, decodeInto(raw, p)
}

func (l *lifetime) callTool(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
	p, err := decodeCallParams(req.Params)
	if err != nil {
		return nil, err
	}
	if req.Caller != nil && req.Caller.ReadOnly {
		ro, err := l.toolReadOnly(ctx, p.Name)
		if err != nil {
			return nil, err
		}
		if !ro {
			return mcp.ErrorResult("tool %q is not annotated read-only, and this token may call read-only tools only", p.Name), nil
		}
	}
	return l.call(ctx, req, p, "tools/call "+p.Name, toolFailure, func(ctx context.Context, meta sdk.Meta) (any, error) {
		params := &sdk.CallToolParams{Meta: meta, Name: p.Name, RequestState: p.RequestState}
		if len(p.Arguments) > 0 {
			params.Arguments = p.Arguments
		}
		if err := unmarshalResponses(p.InputResponses, &params.InputResponses); err != nil {
			return nil, err
		}
		return l.cs.CallTool(ctx, params)
	})
}

func (l *lifetime) getPrompt(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
	p, err := decodeCallParams(req.Params)
	if err != nil {
		return nil, err
	}
	var args map[string]string // a prompt's arguments are strings
	if len(p.Arguments) > 0 {
		if err := json.Unmarshal(p.Arguments, &args); err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid prompt arguments: %v", err)
		}
	}
	return l.call(ctx, req, p, "prompts/get "+p.Name, rpcFailure, func(ctx context.Context, meta sdk.Meta) (any, error) {
		params := &sdk.GetPromptParams{Meta: meta, Name: p.Name, Arguments: args, RequestState: p.RequestState}
		if err := unmarshalResponses(p.InputResponses, &params.InputResponses); err != nil {
			return nil, err
		}
		return l.cs.GetPrompt(ctx, params)
	})
}

func (l *lifetime) readResource(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
	p, err := decodeCallParams(req.Params)
	if err != nil {
		return nil, err
	}
	return l.call(ctx, req, p, "resources/read "+p.URI, rpcFailure, func(ctx context.Context, meta sdk.Meta) (any, error) {
		params := &sdk.ReadResourceParams{Meta: meta, URI: p.URI, RequestState: p.RequestState}
		if err := unmarshalResponses(p.InputResponses, &params.InputResponses); err != nil {
			return nil, err
		}
		return l.cs.ReadResource(ctx, params)
	})
}

func (l *lifetime) complete(ctx context.Context, req *expertagent.MethodRequest) (any, error) {
	var params sdk.CompleteParams
	if err := decodeInto(req.Params, &params); err != nil {
		return nil, err
	}
	params.Meta = l.upstreamMeta(req, params.Meta, "")
	res, err := l.cs.Complete(ctx, &params)
	if err != nil {
		return nil, l.upstreamErr(err)
	}
	return res, nil
}

// decodeInto decodes a request's params into v; bad ones are -32602.
func decodeInto(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

// unmarshalResponses decodes a 2026 upstream's inputResponses, echoed by
// the caller, for the go-sdk's params.
func unmarshalResponses(raw json.RawMessage, into *sdk.InputResponseMap) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid inputResponses: %v", err)
	}
	return nil
}

// protocolMetaPrefix starts the _meta members the MCP protocol defines.
const protocolMetaPrefix = "io.modelcontextprotocol/"

// upstreamMeta is the _meta the upstream gets: the caller's, without its
// progress token (token instead, if the caller asked for progress and
// token is not empty), with the caller the gateway authenticated.
func (l *lifetime) upstreamMeta(req *expertagent.MethodRequest, in sdk.Meta, token string) sdk.Meta {
	m := sdk.Meta{}
	for k, v := range in {
		// The protocol's own members describe the caller's hop (its
		// version, its client); the go-sdk client writes the bridge's.
		if !strings.HasPrefix(k, protocolMetaPrefix) && k != "progressToken" && k != CallerMetaKey {
			m[k] = v
		}
	}
	if caps, ok := in[metaClientCapabilities]; ok && l.cs.InitializeResult().ProtocolVersion >= "2026-07-28" {
		// A 2026 upstream asks the caller itself (input required results
		// pass through): it must know what the caller can answer.
		m[metaClientCapabilities] = caps
	}
	if req.Caller != nil {
		m[CallerMetaKey] = req.Caller
	}
	if token != "" && req.ProgressToken != nil {
		m["progressToken"] = token
	}
	return m
}

// metaOf turns the raw _meta members into the go-sdk's Meta.
func metaOf(raw map[string]json.RawMessage) sdk.Meta {
	m := make(sdk.Meta, len(raw))
	for k, v := range raw {
		m[k] = v
	}
	return m
}

// nextToken returns a new progress token for an upstream call.
func (l *lifetime) nextToken() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	return "tb-" + strconv.FormatUint(l.seq, 36)
}

// upstreamErr passes an upstream JSON-RPC error on as it is; any other
// failure (the upstream gone, a transport error) becomes an internal error
// that says so.
func (l *lifetime) upstreamErr(err error) error {
	var we *sdkrpc.Error
	if errors.As(err, &we) {
		// The upstream's own words and data; redacted all the same,
		// should they quote the URL it was reached at.
		return &jsonrpc.Error{Code: int(we.Code), Message: l.b.redact.text(we.Message), Data: l.b.redact.json(we.Data)}
	}
	return jsonrpc.NewError(jsonrpc.CodeInternalError, "the upstream MCP server %s failed: %v", l.b.upstreamName(), l.b.redact.err(err))
}

func (l *lifetime) upstreamErrOrNil(err error) error {
	if err == nil {
		return nil
	}
	return l.upstreamErr(err)
}

// failure turns what ended a call into its answer: tools/call answers a
// tool error (a result the model reads), the others a JSON-RPC error.
type failure func(err error) (any, error)

func toolFailure(err error) (any, error) {
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && rpcErr.Code != jsonrpc.CodeInternalError {
		return nil, rpcErr // the upstream's own protocol error (unknown tool...)
	}
	msg := err.Error()
	if rpcErr != nil {
		msg = rpcErr.Message
	}
	return mcp.ErrorResult("%s", msg), nil
}

func rpcFailure(err error) (any, error) { return nil, err }

// listChanged tells the gateways that the upstream's lists changed.
func (l *lifetime) listChanged(what string) {
	l.mu.Lock()
	if what == "tools" {
		l.readOnly = nil
	}
	agent := l.agent
	l.mu.Unlock()
	if agent == nil {
		return // not serving yet: the announce to come says it all
	}
	ctx, cancel := context.WithTimeout(l.ctx, notifyTimeout)
	defer cancel()
	if err := agent.Changed(ctx); err != nil {
		// Not serving yet: the announce to come says it all.
		l.log.WithError(err).WithField("list", what).Debug("list change not announced")
		return
	}
	l.log.WithField("list", what).Info("upstream list changed; announced")
}

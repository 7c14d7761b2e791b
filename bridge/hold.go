package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
)

// Errors an upstream's request for input, or a round that brings the
// answer, can meet.
var (
	// errNotHeld answers a round whose requestState names a call this
	// instance does not hold (any more).
	errNotHeld = errors.New("the bridge no longer holds this request (it finished, waited too long for the answer, " +
		"or the upstream restarted); call again without requestState and inputResponses to start over")
	// errNoCall refuses an upstream's request for input made outside a
	// call: there is no client to ask.
	errNoCall = errors.New("no call is open to ask a client")
	// errAmbiguous refuses one made while several calls run.
	errAmbiguous = errors.New("the server is busy with several requests, and the bridge cannot tell which one asks; the upstream sees one client")
)

// The client methods an upstream can ask during a call, and the
// capability each needs.
var askCapability = map[string]string{
	"sampling/createMessage": "sampling",
	"elicitation/create":     "elicitation",
	"roots/list":             "roots",
}

// metaClientCapabilities is where the gateway tells an agent what the
// client declared.
const metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"

// call is one upstream request that may ask the client for input: a
// tools/call, prompts/get or resources/read. It runs while a bus request
// waits on it, and is held between rounds.
type call struct {
	id     string // in the requestState: unguessable
	user   string // the caller it runs for: no other may resume it
	target string // method and name: a state resumes only the same
	token  string // the progress token sent upstream

	done   chan outcome // the upstream's answer; buffered
	asks   chan *ask    // the upstream's requests for input
	cancel context.CancelFunc
	ended  chan struct{} // closed when the bridge forgets the call
	endOne sync.Once

	noted chan struct{} // size 1: notes were added

	// Guarded by lifetime.mu.
	state   string                     // held: the round's state, new each round (single use)
	notes   []note                     // to relay to the caller, in order
	req     *expertagent.MethodRequest // the bus request waiting now; nil while held
	caps    json.RawMessage            // what that request's client can answer
	pending *ask                       // held: the question the next round answers
	expiry  *time.Timer                // held: forgets the call after HoldTimeout
	round   int
}

type outcome struct {
	result any
	err    error
}

// ask is one request of the upstream for the client's input.
type ask struct {
	key    string
	method string
	params json.RawMessage
	answer chan answer // buffered: the round that brings it never waits
}

type answer struct {
	result json.RawMessage
	err    error
}

// call serves a request that may ask for input: a new one (started
// upstream with start), or the next round of one this instance holds.
func (l *lifetime) call(ctx context.Context, req *expertagent.MethodRequest, p *callParams, target string, fail failure,
	start func(ctx context.Context, meta sdk.Meta) (any, error)) (any, error) {
	if clientID, id, ok := contract.HeldState(p.RequestState); ok {
		if clientID != l.b.opts.Agent.ClientID {
			return fail(errNotHeld)
		}
		return l.resume(ctx, req, p, id, target, fail)
	}
	c := &call{
		id:     contract.RandomID(16),
		target: target,
		token:  l.nextToken(),
		done:   make(chan outcome, 1),
		asks:   make(chan *ask),
		ended:  make(chan struct{}),
		noted:  make(chan struct{}, 1),
	}
	if req.Caller != nil {
		c.user = req.Caller.UserID
	}
	meta := l.upstreamMeta(req, metaOf(p.Meta), c.token)
	uctx, cancel := context.WithCancel(l.ctx)
	c.cancel = cancel
	// The bus request is the call's from the start (await says so again):
	// an upstream that asks for input at once must find it running.
	c.req, c.caps = req, json.RawMessage(p.Meta[metaClientCapabilities])
	l.mu.Lock()
	l.open[c.id] = c
	l.tokens[c.token] = c
	l.mu.Unlock()
	l.calls.Add(1)
	go func() {
		defer l.calls.Done()
		res, err := start(uctx, meta)
		c.done <- outcome{res, err}
	}()
	return l.await(ctx, req, p, c, fail)
}

// await waits, for the bus request req, until the upstream answers the
// call (its answer) or asks for input (an input required result that holds
// the call), or the caller gives up (the upstream's call is cancelled).
func (l *lifetime) await(ctx context.Context, req *expertagent.MethodRequest, p *callParams, c *call, fail failure) (any, error) {
	l.mu.Lock()
	c.req, c.caps = req, json.RawMessage(p.Meta[metaClientCapabilities])
	l.mu.Unlock()
	for {
		select {
		case <-c.noted:
			l.relayNotes(ctx, req, c)
			continue
		case o := <-c.done:
			// What the upstream sent before its answer goes first.
			l.relayNotes(ctx, req, c)
			l.forget(c)
			if o.err != nil {
				return fail(l.upstreamErr(o.err))
			}
			return o.result, nil
		case a := <-c.asks:
			l.relayNotes(ctx, req, c)
			state := contract.RandomID(16)
			l.mu.Lock()
			c.req, c.pending, c.state = nil, a, state
			l.held[state] = c
			c.expiry = time.AfterFunc(l.b.opts.HoldTimeout, func() { l.expire(c, state) })
			l.mu.Unlock()
			return inputRequired{
				ResultType:    "input_required",
				InputRequests: map[string]inputRequest{a.key: {Method: a.method, Params: a.params}},
				RequestState:  contract.HoldState(l.b.opts.Agent.ClientID, state),
			}, nil
		case <-ctx.Done():
			l.forget(c)
			return nil, ctx.Err()
		}
	}
}

// inputRequired is an InputRequiredResult (SEP-2322).
type inputRequired struct {
	ResultType    string                  `json:"resultType"`
	InputRequests map[string]inputRequest `json:"inputRequests"`
	RequestState  string                  `json:"requestState"`
}

type inputRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// resume serves the round that answers a held call's question.
func (l *lifetime) resume(ctx context.Context, req *expertagent.MethodRequest, p *callParams, id, target string, fail failure) (any, error) {
	user := ""
	if req.Caller != nil {
		user = req.Caller.UserID
	}
	l.mu.Lock()
	c := l.held[id]
	if c == nil || c.user != user || c.target != target {
		l.mu.Unlock()
		return fail(errNotHeld)
	}
	delete(l.held, id)
	a := c.pending
	c.pending, c.state = nil, ""
	c.expiry.Stop()
	// Running again before the answer goes: the upstream's next question
	// is this round's.
	c.req, c.caps = req, json.RawMessage(p.Meta[metaClientCapabilities])
	l.mu.Unlock()

	var responses map[string]json.RawMessage
	if err := json.Unmarshal(p.InputResponses, &responses); err != nil || responses[a.key] == nil {
		a.answer <- answer{err: fmt.Errorf("the client sent no answer to %s", a.method)}
	} else {
		a.answer <- answer{result: responses[a.key]}
	}
	return l.await(ctx, req, p, c, fail)
}

// expire forgets a call whose round (state) did not come in time; a call
// resumed meanwhile, and perhaps held again for another round, stays.
func (l *lifetime) expire(c *call, state string) {
	l.mu.Lock()
	held := l.held[state] == c
	l.mu.Unlock()
	if held {
		l.log.WithField("target", c.target).Info("no answer came for a held call in time; cancelled upstream")
		l.forget(c)
	}
}

// forget ends a call: the upstream's request is cancelled, its question
// (if any) gets no answer.
func (l *lifetime) forget(c *call) {
	l.mu.Lock()
	delete(l.open, c.id)
	delete(l.tokens, c.token)
	delete(l.held, c.state)
	c.req, c.pending, c.state = nil, nil, ""
	if c.expiry != nil {
		c.expiry.Stop()
	}
	l.mu.Unlock()
	c.endOne.Do(func() { close(c.ended) })
	c.cancel()
}

// runningAlone returns the call a bus request waits on, if it is the only
// one; nil otherwise.
func (l *lifetime) runningAlone() *call {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, _ := l.aloneLocked()
	return c
}

// aloneLocked returns the call a bus request waits on if the upstream can
// be doing nothing else: the only bus request in flight (lists and
// completions count), and no call held (its server handler may ask
// again); running is how many calls run. l.mu is held.
func (l *lifetime) aloneLocked() (alone *call, running int) {
	var found *call
	for _, c := range l.open {
		if c.req != nil {
			found = c
			running++
		}
	}
	if running != 1 || l.busy != 1 || len(l.held) > 0 {
		return nil, running
	}
	return found, running
}

// askClient asks the client of the running call for input on the
// upstream's behalf (method, params) and waits for its answer, the end
// of the call, or ctx.
func (l *lifetime) askClient(ctx context.Context, method string, params any) (json.RawMessage, error) {
	l.mu.Lock()
	c, running := l.aloneLocked()
	held := len(l.held)
	var caps json.RawMessage
	if c != nil {
		caps = c.caps
		c.round++
	}
	l.mu.Unlock()
	switch {
	case running == 0 && held == 0:
		return nil, fmt.Errorf("%s: %w", method, errNoCall)
	case c == nil:
		l.log.WithField("method", method).Warn("the upstream asked for input while several calls ran; refused")
		return nil, fmt.Errorf("%s: %w", method, errAmbiguous)
	}
	if !declares(caps, askCapability[method]) {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "the caller's client did not declare %s, which %s needs", askCapability[method], method)
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("%s: encode params: %w", method, err)
	}
	a := &ask{key: "bridge-" + strconv.Itoa(c.round), method: method, params: raw, answer: make(chan answer, 1)}
	select {
	case c.asks <- a:
	case <-c.ended:
		return nil, fmt.Errorf("%s: the call ended", method)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case ans := <-a.answer:
		return ans.result, ans.err
	case <-c.ended:
		return nil, fmt.Errorf("%s: the call ended before the client answered", method)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, fmt.Errorf("%s: the bridge is stopping", method)
	}
}

// declares reports whether a client's capabilities object has name.
func declares(caps json.RawMessage, name string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(caps, &m) != nil {
		return false
	}
	v, ok := m[name]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// sample is the upstream's sampling/createMessage, asked of the caller.
func (l *lifetime) sample(ctx context.Context, r *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
	raw, err := l.askClient(ctx, "sampling/createMessage", r.Params)
	if err != nil {
		return nil, err
	}
	var res sdk.CreateMessageResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("the client's sampling answer: %w", err)
	}
	return &res, nil
}

// elicit is the upstream's elicitation/create, asked of the caller.
func (l *lifetime) elicit(ctx context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	var params any = r.Params
	if r.Params != nil && r.Params.Mode == "" {
		// The go-sdk writes an absent mode as "mode":"", which clients
		// refuse; absent, it means a form, as the upstream meant.
		params = struct {
			*sdk.ElicitParams
			Mode string `json:"mode,omitempty"`
		}{ElicitParams: r.Params}
	}
	raw, err := l.askClient(ctx, "elicitation/create", params)
	if err != nil {
		return nil, err
	}
	var res sdk.ElicitResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("the client's elicitation answer: %w", err)
	}
	return &res, nil
}

// rootsMiddleware asks the caller for roots/list during a call; outside
// one, the bridge answers with its own roots (none).
func (l *lifetime) rootsMiddleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method != "roots/list" {
			return next(ctx, method, req)
		}
		raw, err := l.askClient(ctx, method, req.GetParams())
		if errors.Is(err, errNoCall) {
			return next(ctx, method, req)
		}
		if err != nil {
			return nil, err
		}
		var res sdk.ListRootsResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("the client's roots answer: %w", err)
		}
		return &res, nil
	}
}

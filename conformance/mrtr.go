package conformance

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
)

// The client methods an input request can name (SEP-2322).
const (
	methodElicit   = "elicitation/create"
	methodSampling = "sampling/createMessage"
	methodRoots    = "roots/list"
)

// resultTypeInputRequired marks a result that asks the client for input.
// Complete results carry no resultType: the gateway adds
// "resultType":"complete" for 2026-07-28 clients.
const resultTypeInputRequired = "input_required"

// inputRequest is one thing the fixture asks the client for: a client
// request without jsonrpc and id.
type inputRequest struct {
	Method string `json:"method"`
	Params any    `json:"params"`
}

// inputRequired is an InputRequiredResult (SEP-2322).
type inputRequired struct {
	ResultType    string                  `json:"resultType"`
	InputRequests map[string]inputRequest `json:"inputRequests"`
	RequestState  string                  `json:"requestState,omitempty"`
}

// exchange is one round of a request that may ask the client for input:
// the answers it brings (inputResponses) and the verified state of the
// round before.
type exchange struct {
	f         *fixture
	bind      binding
	meta      requestMeta
	responses map[string]json.RawMessage // nil: the request carried none
	state     *statePayload              // nil: the request carried none
}

// newExchange reads the MRTR members of a tools/call or prompts/get
// request (method) for tool or prompt name. A requestState that fails its
// check, or inputResponses or requestState of the wrong JSON type, is the
// JSON-RPC error -32602: the request is malformed or forged, and answering
// anything else would let a client skip rounds.
func (f *fixture) newExchange(req *expertagent.MethodRequest, method, name string, p *requestParams) (*exchange, error) {
	x := &exchange{
		f:    f,
		meta: parseMeta(p.Meta),
		bind: binding{target: method + " " + name, args: argsDigest(p.Arguments)},
	}
	if req.Caller != nil {
		x.bind.user = req.Caller.UserID
	}
	if raw := bytes.TrimSpace(p.InputResponses); len(raw) > 0 {
		if raw[0] != '{' {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s %s: inputResponses must be an object of responses keyed like inputRequests", method, name)
		}
		if err := json.Unmarshal(raw, &x.responses); err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s %s: inputResponses: %v", method, name, err)
		}
	}
	if raw := bytes.TrimSpace(p.RequestState); len(raw) > 0 {
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s %s: requestState must be the string the server sent", method, name)
		}
		st, err := f.open(s, x.bind)
		if err != nil {
			f.log.WithField("target", x.bind.target).WithError(err).Info("refused requestState")
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s %s: %v; call again without requestState and inputResponses to start over", method, name, err)
		}
		x.state = st
	}
	return x, nil
}

// round is the round the request's state says the client is answering;
// 0 without a state (a first call, or a round that needs no state).
func (x *exchange) round() int {
	if x.state == nil {
		return 0
	}
	return x.state.Round
}

// data is a copy of what the state carries from earlier rounds.
func (x *exchange) data() map[string]string {
	if x.state == nil {
		return map[string]string{}
	}
	d := maps.Clone(x.state.Data)
	if d == nil {
		d = map[string]string{}
	}
	return d
}

// ask returns an input_required result with reqs. round 0 sends no
// requestState (the next call needs nothing from this one); round n > 0
// sends a sealed state for round n carrying data. A request the client
// did not declare the capability for is not asked: the whole call fails
// with -32021 naming what is missing.
func (x *exchange) ask(round int, data map[string]string, reqs map[string]inputRequest) (*inputRequired, error) {
	var missing []string
	for _, r := range reqs {
		if c := capabilityOf(r.Method); !x.meta.caps.canAnswer(r.Method) && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, missingCapability(x.bind.target, missing...)
	}
	res := &inputRequired{ResultType: resultTypeInputRequired, InputRequests: reqs}
	if round > 0 {
		if len(data) == 0 {
			data = nil
		}
		res.RequestState = x.f.seal(statePayload{
			Target: x.bind.target, Args: x.bind.args, User: x.bind.user,
			Round: round, Expires: x.f.expiry(), Data: data,
		})
	}
	return res, nil
}

// elicitation is the client's answer under key to an elicitation with
// schema; ok is false when there is none or it is malformed (the caller
// asks again).
func (x *exchange) elicitation(key string, schema *elicitSchema) (elicitAnswer, bool) {
	raw, ok := x.responses[key]
	if !ok {
		return elicitAnswer{}, false
	}
	a, err := parseElicitAnswer(raw, schema)
	if err != nil {
		x.f.log.WithField("target", x.bind.target).WithField("key", key).WithError(err).Debug("unusable elicitation answer")
		return elicitAnswer{}, false
	}
	return a, true
}

// sampled is the text of the client's sampling answer under key.
func (x *exchange) sampled(key string) (string, bool) {
	raw, ok := x.responses[key]
	if !ok {
		return "", false
	}
	text, err := parseSamplingAnswer(raw)
	if err != nil {
		x.f.log.WithField("target", x.bind.target).WithField("key", key).WithError(err).Debug("unusable sampling answer")
		return "", false
	}
	return text, true
}

// rootsAnswer is the root URIs of the client's roots/list answer under key.
func (x *exchange) rootsAnswer(key string) ([]string, bool) {
	raw, ok := x.responses[key]
	if !ok {
		return nil, false
	}
	uris, err := parseRootsAnswer(raw)
	if err != nil {
		x.f.log.WithField("target", x.bind.target).WithField("key", key).WithError(err).Debug("unusable roots answer")
		return nil, false
	}
	return uris, true
}

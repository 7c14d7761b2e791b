package expertagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	segjson "github.com/segmentio/encoding/json"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
)

// ErrInvalidArguments is wrapped by the errors of CallRequest.Bind.
var ErrInvalidArguments = errors.New("invalid arguments")

// ErrCallDone is returned by Progress and Log once the final response of the
// call has been sent: nothing may follow it for the same correlation ID.
var ErrCallDone = errors.New("call already answered")

// ErrInvalidLogLevel is returned by Log for a level MCP does not define.
var ErrInvalidLogLevel = errors.New("invalid log level")

// MCP method names the Agent sends or serves itself.
const (
	agentMethodInitialize   = "initialize"
	agentMethodPing         = "ping"
	agentMethodToolsList    = "tools/list"
	agentMethodToolsCall    = "tools/call"
	agentMethodCancelled    = "notifications/cancelled"
	agentMethodInitialized  = "notifications/initialized"
	agentMethodProgress     = "notifications/progress"
	agentMethodLogMessage   = "notifications/message"
	agentMethodToolsChanged = "notifications/tools/list_changed"
)

// MethodRequest is one JSON-RPC request or notification from the gateway,
// with the context it came in and the caller it is made for.
type MethodRequest struct {
	// Context is the conversation the request belongs to (from its topic).
	Context contract.Context
	// Caller is who the gateway authenticated; nil if the envelope has none.
	Caller *contract.Caller
	// CorrelationID ties every reply to this request.
	CorrelationID string
	// Method and Params are the JSON-RPC method and its raw params.
	Method string
	Params json.RawMessage
	// Deadline is when the gateway stops waiting; zero if it set none.
	Deadline time.Time
	// ProgressToken is params._meta.progressToken, raw; nil if the caller
	// asked for no progress.
	ProgressToken json.RawMessage

	call *agentCall // nil for a request built by hand (tests): Progress and Log do nothing
}

// CallRequest is a tools/call request.
type CallRequest struct {
	MethodRequest
	// Name is the tool called.
	Name string
	// Arguments are the call's arguments, a raw JSON object (nil if none).
	Arguments json.RawMessage

	// required are the top-level "required" properties of the tool's
	// inputSchema, which Bind checks (nil for a request built by hand).
	required []string
}

// Bind decodes the arguments into v (a pointer), refusing fields v does not
// have, and checks that every property the top level of the tool's
// inputSchema lists as "required" is present (the gateway does not
// validate arguments). Absent arguments leave v untouched, unless
// properties are required. The error wraps ErrInvalidArguments and names
// the offending property by its key in the arguments, as the schema does
// ("text", not the Go field Text), with the JSON type it wants; returned
// from a ToolHandler it becomes an isError result the model can act on.
func (r *CallRequest) Bind(v any) error {
	args := bytes.TrimSpace(r.Arguments)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		return agentMissing(r.required, nil)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return agentBindError(err, args)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing data after the arguments object", ErrInvalidArguments)
	}
	if len(r.required) == 0 {
		return nil
	}
	if agentHasKeys(args, r.required) {
		return nil
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(args, &present); err != nil {
		return fmt.Errorf("%w: arguments must be an object", ErrInvalidArguments)
	}
	return agentMissing(r.required, present)
}

// agentHasKeys reports whether args, a JSON object, has every key of
// required at its top level. It walks the tokens without decoding the
// values (most calls pass, and this runs on each of them); false means a
// key is missing or args is no object, which the caller then works out.
func agentHasKeys(args []byte, required []string) bool {
	if len(required) > 64 {
		return false
	}
	var tok segjson.Tokenizer
	tok.Reset(args)
	defer tok.Reset(nil) // its stack goes back to the pool
	var found uint64
	for tok.Next() {
		if !tok.IsKey || tok.Depth != 1 {
			continue
		}
		key := tok.String()
		for i, name := range required {
			if string(key) == name {
				found |= 1 << i
			}
		}
	}
	return tok.Err == nil && found == 1<<len(required)-1
}

// agentMissing names the required properties absent from present, or
// returns nil.
func agentMissing(required []string, present map[string]json.RawMessage) error {
	var missing []string
	for _, k := range required {
		if _, ok := present[k]; !ok {
			missing = append(missing, strconv.Quote(k))
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: field %s is required", ErrInvalidArguments, missing[0])
	}
	return fmt.Errorf("%w: fields %s are required", ErrInvalidArguments, strings.Join(missing, ", "))
}

// agentBindError words a decoding error of args for the model: the
// property by its key in args, the types as JSON names them.
func agentBindError(err error, args []byte) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return fmt.Errorf("%w: arguments must be a JSON %s, got %s", ErrInvalidArguments, agentJSONType(typeErr.Type), typeErr.Value)
		}
		return fmt.Errorf("%w: field %q: want %s, got %s", ErrInvalidArguments, agentArgPath(args, typeErr.Field), agentJSONType(typeErr.Type), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("%w: not valid JSON at offset %d: %v", ErrInvalidArguments, syntaxErr.Offset, err)
	}
	// encoding/json reports an unknown field only by text: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%w: unknown field %s", ErrInvalidArguments, name)
	}
	return fmt.Errorf("%w: %v", ErrInvalidArguments, err)
}

// agentArgPath turns the path encoding/json reports for a type error
// (names of Go fields, "Inner.On", for fields without a json tag) into the
// keys of args that it matched ("inner.on"), as the schema names them:
// encoding/json matches keys to untagged fields without regard to case. A
// segment args has no key for (the name of an embedded struct) is left
// out; where args does not go that deep (an array), the rest is kept as
// it is.
func agentArgPath(args []byte, path string) string {
	segs := strings.Split(path, ".")
	out := make([]string, 0, len(segs))
	objs := []json.RawMessage{args} // the objects the next segment may be a key of
	for i, seg := range segs {
		var next []json.RawMessage
		key := ""
		for _, raw := range objs {
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) != nil {
				continue
			}
			k, ok := agentFindKey(m, seg)
			if !ok {
				continue
			}
			key = k
			next = append(next, agentElems(m[k])...)
		}
		switch {
		case key == "" && i < len(segs)-1:
			continue // an embedded struct: its fields are at this level
		case key == "":
			out = append(out, seg)
		default:
			out = append(out, key)
			objs = next
		}
	}
	return strings.Join(out, ".")
}

// agentFindKey finds the key of m that encoding/json would match to the
// field name: the same, or else the same but for case.
func agentFindKey(m map[string]json.RawMessage, name string) (string, bool) {
	if _, ok := m[name]; ok {
		return name, true
	}
	for k := range m {
		if strings.EqualFold(k, name) {
			return k, true
		}
	}
	return "", false
}

// agentElems is raw, or its elements if it is an array: a path does not
// name array indexes.
func agentElems(raw json.RawMessage) []json.RawMessage {
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) == nil {
		return elems
	}
	return []json.RawMessage{raw}
}

// agentJSONType names t as JSON Schema names types, the words of the
// inputSchema the model read.
func agentJSONType(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.String()
}

// Progress sends notifications/progress for this request with the caller's
// progress token: progress so far, total if known (0 = unknown) and an
// optional message. progress must increase from one call to the next. It
// does nothing (and returns nil) if the caller sent no progress token. It
// returns ErrCallDone after the response was sent, ErrReplyTooLarge for a
// notification larger than AgentOptions.MaxPacketSize (not sent), and
// ctx's error once ctx is done.
func (r *MethodRequest) Progress(ctx context.Context, progress, total float64, message string) error {
	if r.call == nil || len(r.ProgressToken) == 0 {
		return nil
	}
	return r.call.notify(ctx, agentMethodProgress, agentProgressParams{
		ProgressToken: r.ProgressToken, Progress: progress, Total: total, Message: message,
	})
}

type agentProgressParams struct {
	ProgressToken json.RawMessage `json:"progressToken"`
	Progress      float64         `json:"progress"`
	Total         float64         `json:"total,omitempty"`
	Message       string          `json:"message,omitempty"`
}

// ToolsChanged tells the gateway, during this request, that the agent's
// tool list changed: it drops the list it cached for this request's
// context, and tells the MCP clients that listen. (For every context at
// once, publish the online presence again with a new since.) Errors as
// for Progress.
func (r *MethodRequest) ToolsChanged(ctx context.Context) error {
	if r.call == nil {
		return nil
	}
	return r.call.notify(ctx, agentMethodToolsChanged, struct{}{})
}

// agentLogLevels are MCP's logging levels (RFC 5424 severities).
var agentLogLevels = map[string]bool{
	"debug": true, "info": true, "notice": true, "warning": true,
	"error": true, "critical": true, "alert": true, "emergency": true,
}

// Log sends notifications/message for this request: a log entry the gateway
// relays to the MCP client while the call is open. level is one of MCP's
// levels (debug, info, notice, warning, error, critical, alert, emergency);
// data is any JSON-encodable value. Errors as for Progress.
func (r *MethodRequest) Log(ctx context.Context, level string, data any) error {
	if !agentLogLevels[level] {
		return fmt.Errorf("%w: %q", ErrInvalidLogLevel, level)
	}
	if r.call == nil {
		return nil
	}
	return r.call.notify(ctx, agentMethodLogMessage, struct {
		Level  string `json:"level"`
		Logger string `json:"logger,omitempty"`
		Data   any    `json:"data"`
	}{level, r.call.agent.opts.Name, data})
}

// agentCall is the state of one request from its arrival to its response:
// its context (cancelled by notifications/cancelled), and the lock that keeps
// notifications before the final response.
type agentCall struct {
	agent        *Agent
	in           agentInbound
	req          CallRequest // what the handler gets (set by dispatch)
	key          agentCallKey
	topic        string // reply topic: this instance's, in the request's context
	corrID       string
	ctx          context.Context
	cancelCause  context.CancelCauseFunc
	stopDeadline context.CancelFunc // nil without a deadline

	started time.Time // when it was queued: claimLoop claims it after ClaimAfter

	mu      sync.Mutex
	done    bool // final response sent (or abandoned): no more notifications
	claimed bool // the claim was sent
	// claimTries counts the claims tried (at most maxClaimTries)
	claimTries uint8
}

// cancel ends the call's context with cause and releases its deadline timer.
func (c *agentCall) cancel(cause error) {
	c.cancelCause(cause)
	if c.stopDeadline != nil {
		c.stopDeadline()
	}
}

// notify publishes a notification tied to this call, unless the call is over.
func (c *agentCall) notify(ctx context.Context, method string, params any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("%s: encode params: %w", method, err)
	}
	msg, err := json.Marshal(&jsonrpc.Message{JSONRPC: jsonrpc.Version, Method: method, Params: p})
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	env := agentEnvelope(c.corrID, msg)
	if !c.agent.fits(c.topic, env) {
		return fmt.Errorf("%s: %w: %d bytes, the broker accepts %d", method, ErrReplyTooLarge, len(env), c.agent.opts.MaxPacketSize)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return fmt.Errorf("%s: %w", method, ErrCallDone)
	}
	if err := c.agent.reply(ctx, c.topic, env); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	c.agent.stats.notifications.Add(1)
	return nil
}

// finish sends the final message, a whole envelope (nil: none), and closes
// the call to notifications. It waits for a notification being published to
// finish first, so that the response is the last message of the call.
func (c *agentCall) finish(ctx context.Context, envelope []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return ErrCallDone
	}
	c.done = true
	if envelope == nil {
		return nil
	}
	return c.agent.reply(ctx, c.topic, envelope)
}

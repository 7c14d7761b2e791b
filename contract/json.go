package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/jsonenc"
	"github.com/toolbus/toolbus/jsonrpc"
)

// The contract's JSON fast paths, for both sides. Every envelope crosses
// the bus twice per call, and encoding/json costs more than the rest of the requester: it
// re-validates and compacts each RawMessage it marshals, and decoding an
// envelope then its message scans the message twice. Encoding here appends
// straight into the payload. Decoding takes one pass over envelope and
// message, but only for payloads it fully understands: anything unusual
// (escapes, keys that differ from a field name only in case, duplicate
// keys, numbers that are not plain integers, deep nesting) makes it give up,
// and the caller decodes with encoding/json. So a payload either
// decodes exactly as encoding/json would, or goes to encoding/json.

// appendJSONString appends s as a JSON string, byte for byte as
// json.Marshal writes it.
func appendJSONString(dst []byte, s string) []byte { return jsonenc.AppendString(dst, s, true) }

// Decode decodes a payload: the envelope, and the JSON-RPC message in it
// into msg; as DecodeEnvelope followed by json.Unmarshal of the message
// into a jsonrpc.Message. It reads the payload in one pass when it can
// vouch for the result and leaves anything unusual to encoding/json.
// env.Message and the raw members of msg (id, params, result) may point
// into payload: payload must not change afterwards. Errors wrap
// ErrBadEnvelope, ErrEnvelopeVersion or ErrEnvelopeTooLarge.
func Decode(payload []byte, env *Envelope, msg *jsonrpc.Message) error {
	*env, *msg = Envelope{}, jsonrpc.Message{}
	if len(payload) <= MaxEnvelopeSize && decodeEnvelopeFast(payload, env, msg) {
		return env.check()
	}
	*msg = jsonrpc.Message{}
	e, err := DecodeEnvelope(payload)
	if err != nil {
		return err
	}
	*env = e
	if err := json.Unmarshal(env.Message, msg); err != nil {
		return fmt.Errorf("%w: %w", ErrBadEnvelope, err)
	}
	return nil
}

// appendCompactJSON appends raw, validated and compacted; it fails on
// anything that is not one JSON value.
func appendCompactJSON(dst []byte, raw []byte) ([]byte, error) {
	if isCompactJSON(raw) { // the usual case: checking is cheaper than compacting
		return append(dst, raw...), nil
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

// appendCaller appends c as encoding/json marshals a Caller.
func appendCaller(dst []byte, c *Caller) []byte {
	dst = append(dst, `{"userId":`...)
	dst = appendJSONString(dst, c.UserID)
	if len(c.Scopes) > 0 {
		dst = append(dst, `,"scopes":[`...)
		for i, s := range c.Scopes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, s)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"readOnly":`...)
	dst = strconv.AppendBool(dst, c.ReadOnly)
	return append(dst, '}')
}

// appendEnvelopeHead appends an envelope up to and including `"message":`,
// members in the order (and with the omissions) of json.Marshal.
func appendEnvelopeHead(dst []byte, correlationID string, deadline int64, caller *Caller, agent string) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, EnvelopeVersion, 10)
	dst = append(dst, `,"correlationId":`...)
	dst = appendJSONString(dst, correlationID)
	if deadline != 0 {
		dst = append(dst, `,"deadline":`...)
		dst = strconv.AppendInt(dst, deadline, 10)
	}
	if caller != nil {
		dst = append(dst, `,"caller":`...)
		dst = appendCaller(dst, caller)
	}
	if agent != "" {
		dst = append(dst, `,"agent":`...)
		dst = appendJSONString(dst, agent)
	}
	return append(dst, `,"message":`...)
}

// AppendRequest appends the envelope of one request of the
// gateway: message {"jsonrpc":"2.0","id":id,"method":method,"params":params},
// params omitted when empty. params are validated and compacted on the way.
func AppendRequest(dst []byte, id string, deadline int64, caller *Caller, method string, params []byte) ([]byte, error) {
	dst = appendEnvelopeHead(dst, id, deadline, caller, "")
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"method":`...)
	dst = appendJSONString(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		var err error
		if dst, err = appendCompactJSON(dst, params); err != nil {
			return nil, err
		}
	}
	return append(dst, "}}"...), nil
}

// isCompactJSON reports whether raw is one valid JSON value without
// insignificant whitespace (false can also mean: too deep to tell here).
func isCompactJSON(raw []byte) bool {
	s := fastScanner{b: raw}
	_, ok := s.skipValue(1)
	return ok && s.i == len(raw) && !s.spaced
}

// maxFastDepth bounds the nesting the fast decoder follows; deeper
// payloads go to encoding/json (which has its own, larger, limit).
const maxFastDepth = 200

// fastScanner walks one JSON text. Every method reports false on anything
// it does not handle, which includes everything invalid.
type fastScanner struct {
	b      []byte
	i      int
	spaced bool // whitespace was skipped
}

func (s *fastScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
			s.spaced = true
		default:
			return
		}
	}
}

// consume skips whitespace, then c.
func (s *fastScanner) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *fastScanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// plainString reads a string without escapes, valid UTF-8 (what
// encoding/json hands over unchanged). s.i is at the opening quote.
func (s *fastScanner) plainString() ([]byte, bool) {
	start := s.i + 1
	ascii := true
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			v := s.b[start:i]
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			s.i = i + 1
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// skipString skips a valid string, escapes included. s.i is at the
// opening quote.
func (s *fastScanner) skipString() bool {
	next := 0 // where the next word test may start (jsonenc.PlainWords)
	for i := s.i + 1; i < len(s.b); i++ {
		if i >= next {
			i, _ = jsonenc.PlainWords(s.b, i)
			if next = i + 8; i >= len(s.b) {
				break
			}
		}
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(s.b) {
				return false
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.b) {
					return false
				}
				for _, h := range s.b[i+1 : i+5] {
					if !isHex(h) {
						return false
					}
				}
				i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipNumber skips a number of the JSON grammar and reports whether it is
// a plain integer (no fraction, no exponent).
func (s *fastScanner) skipNumber() (ok, integer bool) {
	i := s.i
	if i < len(s.b) && s.b[i] == '-' {
		i++
	}
	switch {
	case i < len(s.b) && s.b[i] == '0':
		i++
	case i < len(s.b) && '1' <= s.b[i] && s.b[i] <= '9':
		for i < len(s.b) && isDigit(s.b[i]) {
			i++
		}
	default:
		return false, false
	}
	integer = true
	if i < len(s.b) && s.b[i] == '.' {
		integer = false
		i++
		if i >= len(s.b) || !isDigit(s.b[i]) {
			return false, false
		}
		for i < len(s.b) && isDigit(s.b[i]) {
			i++
		}
	}
	if i < len(s.b) && (s.b[i] == 'e' || s.b[i] == 'E') {
		integer = false
		i++
		if i < len(s.b) && (s.b[i] == '+' || s.b[i] == '-') {
			i++
		}
		if i >= len(s.b) || !isDigit(s.b[i]) {
			return false, false
		}
		for i < len(s.b) && isDigit(s.b[i]) {
			i++
		}
	}
	s.i = i
	return true, integer
}

func (s *fastScanner) literal(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// skipValue skips one valid value and returns its bytes.
func (s *fastScanner) skipValue(depth int) ([]byte, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	s.ws()
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	ok := false
	switch c := s.b[s.i]; {
	case c == '"':
		ok = s.skipString()
	case c == '{':
		s.i++
		if s.consume('}') {
			ok = true
			break
		}
		for {
			if s.peek() != '"' || !s.skipString() || !s.consume(':') {
				return nil, false
			}
			if _, ok := s.skipValue(depth + 1); !ok {
				return nil, false
			}
			if s.consume(',') {
				continue
			}
			ok = s.consume('}')
			break
		}
	case c == '[':
		s.i++
		if s.consume(']') {
			ok = true
			break
		}
		for {
			if _, ok := s.skipValue(depth + 1); !ok {
				return nil, false
			}
			if s.consume(',') {
				continue
			}
			ok = s.consume(']')
			break
		}
	case c == '-' || isDigit(c):
		ok, _ = s.skipNumber()
	case c == 't':
		ok = s.literal("true")
	case c == 'f':
		ok = s.literal("false")
	case c == 'n':
		ok = s.literal("null")
	}
	if !ok {
		return nil, false
	}
	return s.b[start:s.i:s.i], true // capped: an append must not write over what follows
}

// object walks the members of an object (s.i before its '{'), calling
// member with each key; member reads the value. Keys must be plain ASCII
// strings; a key that equals one of known ignoring case but not exactly
// would be matched by encoding/json's case folding: give up on it.
func (s *fastScanner) object(known []string, member func(key []byte) bool) bool {
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		k, ok := s.plainString()
		if !ok || !s.consume(':') {
			return false
		}
		for _, c := range k {
			if c >= utf8.RuneSelf {
				return false // encoding/json folds some non-ASCII letters onto ASCII ones
			}
		}
		for _, name := range known {
			if len(k) == len(name) && string(k) != name && asciiEqualFold(k, name) {
				return false
			}
		}
		if !member(k) {
			return false
		}
		if s.consume(',') {
			continue
		}
		return s.consume('}')
	}
}

func asciiEqualFold(a []byte, b string) bool {
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}

// str reads a plain string value into *dst (once: a repeated member gives up).
func (s *fastScanner) str(dst *string, seen *bool) bool {
	if *seen || s.peek() != '"' {
		return false
	}
	v, ok := s.plainString()
	if !ok {
		return false
	}
	if string(v) == jsonrpc.Version {
		*dst = jsonrpc.Version // every message has one: spare the allocation
	} else {
		*dst = string(v)
	}
	*seen = true
	return true
}

// integer reads an integer value that fits bits into *dst.
func (s *fastScanner) integer(dst *int64, bits int, seen *bool) bool {
	if *seen {
		return false
	}
	if c := s.peek(); c != '-' && !isDigit(c) {
		return false
	}
	start := s.i
	ok, isInt := s.skipNumber()
	if !ok || !isInt {
		return false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, bits)
	if err != nil {
		return false
	}
	*dst, *seen = n, true
	return true
}

// raw reads any value into *dst, sharing the scanned bytes.
func (s *fastScanner) raw(dst *json.RawMessage, seen *bool) bool {
	if *seen {
		return false
	}
	v, ok := s.skipValue(1)
	if !ok {
		return false
	}
	*dst, *seen = v, true
	return true
}

var (
	envelopeKeys = []string{"v", "correlationId", "deadline", "caller", "agent", "message"}
	callerKeys   = []string{"userId", "scopes", "readOnly"}
	messageKeys  = []string{"jsonrpc", "id", "method", "params", "result", "error"}
	errorKeys    = []string{"code", "message", "data"}
)

// decodeEnvelopeFast decodes payload into env, sharing its bytes, and, if m
// is not nil, also decodes env.Message into m as json.Unmarshal would. It
// reports false when it cannot vouch for the result: the caller then
// decodes with encoding/json. It does not check what DecodeEnvelope checks
// after decoding (version, correlation ID, message shape).
func decodeEnvelopeFast(payload []byte, env *Envelope, m *jsonrpc.Message) bool {
	s := fastScanner{b: payload}
	if s.peek() != '{' {
		return false
	}
	var v, deadline int64
	var seenV, seenID, seenDeadline, seenCaller, seenAgent, seenMsg bool
	ok := s.object(envelopeKeys, func(key []byte) bool {
		switch string(key) {
		case "v":
			return s.integer(&v, strconv.IntSize, &seenV)
		case "correlationId":
			return s.str(&env.CorrelationID, &seenID)
		case "deadline":
			return s.integer(&deadline, 64, &seenDeadline)
		case "caller":
			if seenCaller {
				return false
			}
			seenCaller = true
			return s.caller(&env.Caller)
		case "agent":
			return s.str(&env.Agent, &seenAgent)
		case "message":
			if seenMsg {
				return false
			}
			seenMsg = true
			if m != nil && s.peek() == '{' {
				start := s.i
				if !s.message(m) {
					return false
				}
				env.Message = payload[start:s.i:s.i]
				return true
			}
			var dummy bool
			return s.raw(&env.Message, &dummy)
		}
		_, ok := s.skipValue(1)
		return ok
	})
	if !ok {
		return false
	}
	s.ws()
	if s.i != len(s.b) {
		return false
	}
	if m != nil && (!seenMsg || len(env.Message) == 0 || env.Message[0] != '{') {
		return false // json.Unmarshal of the message would fail or differ
	}
	env.V, env.Deadline = int(v), deadline
	return true
}

// caller reads the caller member: null or a Caller object.
func (s *fastScanner) caller(dst **Caller) bool {
	if s.peek() == 'n' {
		return s.literal("null") // a nil pointer stays nil
	}
	if s.peek() != '{' {
		return false
	}
	c := new(Caller)
	var seenUser, seenScopes, seenRO bool
	ok := s.object(callerKeys, func(key []byte) bool {
		switch string(key) {
		case "userId":
			return s.str(&c.UserID, &seenUser)
		case "scopes":
			if seenScopes {
				return false
			}
			seenScopes = true
			return s.scopes(&c.Scopes)
		case "readOnly":
			if seenRO {
				return false
			}
			seenRO = true
			switch s.peek() {
			case 't':
				c.ReadOnly = true
				return s.literal("true")
			case 'f':
				return s.literal("false")
			}
			return false
		}
		_, ok := s.skipValue(2)
		return ok
	})
	if !ok {
		return false
	}
	*dst = c
	return true
}

// scopes reads null or an array of plain strings ([] gives an empty,
// non-nil slice, as encoding/json does).
func (s *fastScanner) scopes(dst *[]string) bool {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	if !s.consume('[') {
		return false
	}
	out := []string{}
	if s.consume(']') {
		*dst = out
		return true
	}
	for {
		var v string
		var seen bool
		if !s.str(&v, &seen) {
			return false
		}
		out = append(out, v)
		if s.consume(',') {
			continue
		}
		if !s.consume(']') {
			return false
		}
		*dst = out
		return true
	}
}

// message reads a JSON-RPC message object into m.
func (s *fastScanner) message(m *jsonrpc.Message) bool {
	var seenV, seenID, seenMethod, seenParams, seenResult, seenError bool
	return s.object(messageKeys, func(key []byte) bool {
		switch string(key) {
		case "jsonrpc":
			return s.str(&m.JSONRPC, &seenV)
		case "id":
			return s.raw(&m.ID, &seenID)
		case "method":
			return s.str(&m.Method, &seenMethod)
		case "params":
			return s.raw(&m.Params, &seenParams)
		case "result":
			return s.raw(&m.Result, &seenResult)
		case "error":
			if seenError {
				return false
			}
			seenError = true
			return s.rpcError(&m.Error)
		}
		_, ok := s.skipValue(2)
		return ok
	})
}

// rpcError reads the error member of a response: null or an Error object.
func (s *fastScanner) rpcError(dst **jsonrpc.Error) bool {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	if s.peek() != '{' {
		return false
	}
	e := new(jsonrpc.Error)
	var code int64
	var seenCode, seenMsg, seenData bool
	ok := s.object(errorKeys, func(key []byte) bool {
		switch string(key) {
		case "code":
			return s.integer(&code, strconv.IntSize, &seenCode)
		case "message":
			return s.str(&e.Message, &seenMsg)
		case "data":
			return s.raw(&e.Data, &seenData)
		}
		_, ok := s.skipValue(3)
		return ok
	})
	if !ok {
		return false
	}
	e.Code = int(code)
	*dst = e
	return true
}

package expertagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/toolbus/toolbus/internal/jsonenc"
	"github.com/toolbus/toolbus/jsonrpc"
)

// The Agent's hot path decodes one request envelope per call and encodes one
// reply. encoding/json did both by reflection, twice over (the envelope,
// then its message, then params; the response, then the envelope around
// it, which validates and compacts the response again): a quarter of the
// agent's CPU per call. This file does the same in one pass each way, with
// encoding/json's acceptance rules and output bytes, so that nothing a peer
// sees changes. The fuzz tests in agent_json_test.go compare both ways with
// encoding/json.

// agentMaxDepth is encoding/json's nesting limit: deeper documents are
// refused, here as there.
const agentMaxDepth = 10000

var (
	// errAgentJSON is wrapped by the syntax errors of agentScan.
	errAgentJSON = errors.New("invalid JSON")
	// errAgentJSONType is wrapped by its type errors: valid JSON of the
	// wrong type for the field it fills.
	errAgentJSONType = errors.New("wrong JSON type")
)

// agentScan is a validating scanner over one JSON document. Its methods
// leave i after what they consumed.
type agentScan struct {
	b     []byte
	i     int
	depth int
}

func (s *agentScan) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", errAgentJSON, s.i, fmt.Sprintf(format, args...))
}

// next skips whitespace and returns the next byte (0 at the end).
func (s *agentScan) next() byte {
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return c
		}
	}
	return 0
}

// end checks that only whitespace follows the document.
func (s *agentScan) end() error {
	if s.next(); s.i != len(s.b) {
		return s.errorf("data after the top-level value")
	}
	return nil
}

// str scans the string at i and returns its contents between the quotes.
// esc reports backslash escapes, high bytes of 0x80 or more: with either,
// the contents may need encoding/json's unquoting rather than a plain
// conversion.
func (s *agentScan) str() (raw []byte, esc, high bool, err error) {
	if s.next() != '"' {
		return nil, false, false, s.errorf("want a string")
	}
	start := s.i + 1
	next := 0 // where the next word test may start (jsonenc.PlainWords)
	for j := start; j < len(s.b); j++ {
		if j >= next {
			var h bool
			if j, h = jsonenc.PlainWords(s.b, j); h {
				high = true
			}
			if next = j + 8; j >= len(s.b) {
				break
			}
		}
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], esc, high, nil
		case c == '\\':
			esc = true
			j++
			if j >= len(s.b) {
				break // unterminated, reported after the loop
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s.b) {
					s.i = j
					return nil, false, false, s.errorf("short \\u escape")
				}
				for k := j + 1; k <= j+4; k++ {
					if !agentIsHex(s.b[k]) {
						s.i = k
						return nil, false, false, s.errorf("bad \\u escape")
					}
				}
				j += 4
			default:
				s.i = j
				return nil, false, false, s.errorf("bad escape")
			}
		case c < 0x20:
			s.i = j
			return nil, false, false, s.errorf("control character in string")
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	s.i = len(s.b)
	return nil, false, false, s.errorf("unterminated string")
}

func agentIsHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// string decodes the string at i as encoding/json does (escapes resolved,
// invalid UTF-8 and lone surrogates replaced by U+FFFD).
func (s *agentScan) string() (string, error) {
	start := s.i
	raw, esc, high, err := s.str()
	if err != nil {
		return "", err
	}
	if !esc && (!high || utf8.Valid(raw)) {
		return agentIntern(raw), nil
	}
	// Rare: let encoding/json resolve escapes and bad UTF-8 its own way.
	var v string
	if err := json.Unmarshal(s.b[s.skipSpace(start):s.i], &v); err != nil {
		return "", fmt.Errorf("%w: %v", errAgentJSON, err)
	}
	return v, nil
}

// skipSpace returns the offset of the first non-space byte at or after i.
func (s *agentScan) skipSpace(i int) int {
	for i < len(s.b) && (s.b[i] == ' ' || s.b[i] == '\t' || s.b[i] == '\n' || s.b[i] == '\r') {
		i++
	}
	return i
}

// agentIntern returns the constant for strings every request carries (the
// JSON-RPC version and the methods the Agent serves), so that decoding them
// allocates nothing; anything else is copied.
func agentIntern(b []byte) string {
	switch string(b) { // no allocation: the compiler compares in place
	case jsonrpc.Version:
		return jsonrpc.Version
	case agentMethodToolsCall:
		return agentMethodToolsCall
	case agentMethodToolsList:
		return agentMethodToolsList
	case agentMethodPing:
		return agentMethodPing
	case agentMethodInitialize:
		return agentMethodInitialize
	case agentMethodCancelled:
		return agentMethodCancelled
	case agentMethodInitialized:
		return agentMethodInitialized
	}
	return string(b)
}

// literal consumes true, false or null and returns its first byte.
func (s *agentScan) literal() (byte, error) {
	c := s.next()
	var want string
	switch c {
	case 't':
		want = "true"
	case 'f':
		want = "false"
	case 'n':
		want = "null"
	default:
		return 0, s.errorf("want a literal")
	}
	if len(s.b)-s.i < len(want) || string(s.b[s.i:s.i+len(want)]) != want {
		return 0, s.errorf("bad literal")
	}
	s.i += len(want)
	return c, nil
}

// number consumes a number (JSON's grammar) and returns its text.
func (s *agentScan) number() ([]byte, error) {
	s.next()
	start, j, n := s.i, s.i, len(s.b)
	digits := func() bool {
		k := j
		for j < n && s.b[j] >= '0' && s.b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < n && s.b[j] == '-' {
		j++
	}
	switch {
	case j < n && s.b[j] == '0':
		j++
	case j < n && s.b[j] >= '1' && s.b[j] <= '9':
		digits()
	default:
		s.i = j
		return nil, s.errorf("bad number")
	}
	if j < n && s.b[j] == '.' {
		j++
		if !digits() {
			s.i = j
			return nil, s.errorf("bad fraction")
		}
	}
	if j < n && (s.b[j] == 'e' || s.b[j] == 'E') {
		j++
		if j < n && (s.b[j] == '+' || s.b[j] == '-') {
			j++
		}
		if !digits() {
			s.i = j
			return nil, s.errorf("bad exponent")
		}
	}
	s.i = j
	return s.b[start:j], nil
}

// int64 decodes an integer member the way encoding/json fills an int or
// int64 field: null leaves *v alone, anything but an integer in range is an
// error.
func (s *agentScan) int64(v *int64) error {
	switch s.next() {
	case 'n':
		_, err := s.literal()
		return err
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		num, err := s.number()
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: number %s is not an integer in range", errAgentJSONType, num)
		}
		*v = n
		return nil
	}
	return s.typeError("an integer")
}

// stringField decodes a string member: null leaves *v alone.
func (s *agentScan) stringField(v *string) error {
	switch s.next() {
	case 'n':
		_, err := s.literal()
		return err
	case '"':
		str, err := s.string()
		if err == nil {
			*v = str
		}
		return err
	}
	return s.typeError("a string")
}

// raw consumes any value and returns its bytes, as a json.RawMessage field
// gets them (null included). They are the document's own bytes, capped so
// that appending to them (a handler extending req.Arguments, say) copies
// rather than overwrites what follows, such as the request's id.
func (s *agentScan) raw() (json.RawMessage, error) {
	s.next()
	start := s.i
	if err := s.skip(); err != nil {
		return nil, err
	}
	return s.b[start:s.i:s.i], nil
}

// typeError reports a value of the wrong type, after checking that the
// value is at least valid JSON (encoding/json reports syntax first).
func (s *agentScan) typeError(want string) error {
	at := s.i
	if err := s.skip(); err != nil {
		return err
	}
	return fmt.Errorf("%w at offset %d: want %s", errAgentJSONType, at, want)
}

// skip consumes one value of any type, validating it.
func (s *agentScan) skip() error {
	switch c := s.next(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == '"':
		_, _, _, err := s.str()
		return err
	case c == 't' || c == 'f' || c == 'n':
		_, err := s.literal()
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, err := s.number()
		return err
	case s.i >= len(s.b):
		return s.errorf("unexpected end of JSON")
	}
	return s.errorf("unexpected character %q", s.b[s.i])
}

// push and pop track nesting against agentMaxDepth.
func (s *agentScan) push() error {
	if s.depth++; s.depth > agentMaxDepth {
		return s.errorf("exceeded max depth")
	}
	return nil
}

func (s *agentScan) pop() { s.depth-- }

// object consumes an object, calling member for each key with i at the
// value; member must consume the value and must not keep key. Keys are
// passed as written when they hold no escapes and no high bytes (the common
// case: no allocation), decoded otherwise.
func (s *agentScan) object(member func(key []byte) error) error {
	if s.next() != '{' {
		return s.errorf("want an object")
	}
	s.i++
	if err := s.push(); err != nil {
		return err
	}
	if s.next() == '}' {
		s.i++
		s.pop()
		return nil
	}
	for {
		start := s.i
		raw, esc, high, err := s.str()
		if err != nil {
			return err
		}
		key := raw
		if esc || high {
			s.i = start
			k, err := s.string()
			if err != nil {
				return err
			}
			key = []byte(k)
		}
		if s.next() != ':' {
			return s.errorf("want ':' after an object key")
		}
		s.i++
		if err := member(key); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
			if s.next() != '"' {
				return s.errorf("want a key after ','")
			}
		case '}':
			s.i++
			s.pop()
			return nil
		default:
			return s.errorf("want ',' or '}' in an object")
		}
	}
}

// array consumes an array, calling elem with i at each element; elem must
// consume it.
func (s *agentScan) array(elem func() error) error {
	if s.next() != '[' {
		return s.errorf("want an array")
	}
	s.i++
	if err := s.push(); err != nil {
		return err
	}
	if s.next() == ']' {
		s.i++
		s.pop()
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			s.pop()
			return nil
		default:
			return s.errorf("want ',' or ']' in an array")
		}
	}
}

// agentKey matches an object key to a field name as encoding/json does: an
// exact match, else one that ignores case (Unicode simple folding).
func agentKey(key []byte, name string) bool {
	return string(key) == name || bytes.EqualFold(key, []byte(name))
}

// agentDecodeRequest decodes a request payload (an envelope and the
// JSON-RPC message in it) in one pass. It accepts exactly what
// DecodeEnvelope followed by json.Unmarshal of the message into a
// jsonrpc.Message accepts, and fills env and msg the same way; env.Message
// is the message's bytes, and raw members (id, params) point into payload
// too: payload must not change afterwards.
func agentDecodeRequest(payload []byte, env *Envelope, msg *jsonrpc.Message) error {
	if len(payload) > MaxEnvelopeSize {
		return fmt.Errorf("%w: %d bytes", ErrEnvelopeTooLarge, len(payload))
	}
	*env, *msg = Envelope{}, jsonrpc.Message{}
	s := agentScan{b: payload}
	var v, deadline int64
	switch s.next() {
	case '{':
	case 'n': // null decodes to a zero envelope: version 0
		if _, err := s.literal(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadEnvelope, err)
		}
		if err := s.end(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadEnvelope, err)
		}
		return fmt.Errorf("%w: 0", ErrEnvelopeVersion)
	default:
		return fmt.Errorf("%w: %v", ErrBadEnvelope, s.typeError("an object"))
	}
	// A type error inside a "message" member counts only if that member is
	// the last "message": encoding/json decodes the message from the last
	// one alone.
	var msgErr error
	err := s.object(func(key []byte) error {
		switch {
		case agentKey(key, "v"):
			return s.int64(&v)
		case agentKey(key, "correlationId"):
			return s.stringField(&env.CorrelationID)
		case agentKey(key, "deadline"):
			return s.int64(&deadline)
		case agentKey(key, "caller"):
			return s.caller(&env.Caller)
		case agentKey(key, "agent"):
			return s.stringField(&env.Agent)
		case agentKey(key, "message"):
			// The envelope keeps the last "message" whole (a raw member),
			// and the message is decoded from it alone.
			*msg, msgErr = jsonrpc.Message{}, nil
			if s.next() != '{' {
				var err error
				env.Message, err = s.raw()
				return err
			}
			start, depth := s.i, s.depth
			if err := s.message(msg); err != nil {
				if !errors.Is(err, errAgentJSONType) {
					return err
				}
				// Still check the member's syntax, from its start.
				s.i, s.depth, msgErr = start, depth, err
				if err := s.skip(); err != nil {
					return err
				}
			}
			env.Message = s.b[start:s.i:s.i]
			return nil
		}
		return s.skip()
	})
	if err == nil {
		err = s.end()
	}
	if err == nil {
		err = msgErr
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadEnvelope, err)
	}
	env.V, env.Deadline = int(v), deadline
	switch {
	case env.V != EnvelopeVersion:
		return fmt.Errorf("%w: %d", ErrEnvelopeVersion, env.V)
	case env.CorrelationID == "":
		return fmt.Errorf("%w: no correlationId", ErrBadEnvelope)
	case len(env.Message) == 0 || env.Message[0] != '{':
		return fmt.Errorf("%w: message is not a JSON object", ErrBadEnvelope)
	}
	return nil
}

// caller decodes the caller member into *c, reusing an existing *c as
// encoding/json does for a repeated member; null sets it to nil.
func (s *agentScan) caller(c **Caller) error {
	switch s.next() {
	case 'n':
		_, err := s.literal()
		*c = nil
		return err
	case '{':
	default:
		return s.typeError("an object")
	}
	if *c == nil {
		*c = new(Caller)
	}
	cl := *c
	return s.object(func(key []byte) error {
		switch {
		case agentKey(key, "userId"):
			return s.stringField(&cl.UserID)
		case agentKey(key, "scopes"):
			return s.strings(&cl.Scopes)
		case agentKey(key, "readOnly"):
			switch s.next() {
			case 't', 'f', 'n':
				c, err := s.literal()
				if c != 'n' {
					cl.ReadOnly = c == 't'
				}
				return err
			}
			return s.typeError("a boolean")
		}
		return s.skip()
	})
}

// strings decodes a []string member as encoding/json does: null sets nil;
// an array reuses the slice's backing array (so a null element keeps what
// the slot held) and [] gives an empty, non-nil slice.
func (s *agentScan) strings(v *[]string) error {
	switch s.next() {
	case 'n':
		_, err := s.literal()
		*v = nil
		return err
	case '[':
	default:
		return s.typeError("an array")
	}
	out := (*v)[:0]
	err := s.array(func() error {
		if len(out) < cap(out) {
			out = out[:len(out)+1]
		} else {
			out = append(out, "")
		}
		return s.stringField(&out[len(out)-1])
	})
	if out == nil {
		out = []string{}
	}
	*v = out
	return err
}

// message decodes a JSON-RPC message object into m.
func (s *agentScan) message(m *jsonrpc.Message) error {
	return s.object(func(key []byte) error {
		var err error
		switch {
		case agentKey(key, "jsonrpc"):
			return s.stringField(&m.JSONRPC)
		case agentKey(key, "id"):
			m.ID, err = s.raw()
		case agentKey(key, "method"):
			return s.stringField(&m.Method)
		case agentKey(key, "params"):
			m.Params, err = s.raw()
		case agentKey(key, "result"):
			m.Result, err = s.raw()
		case agentKey(key, "error"):
			return s.rpcError(&m.Error)
		default:
			return s.skip()
		}
		return err
	})
}

// rpcError decodes an error member (a response's; the Agent drops those,
// but a malformed one makes the message malformed, as it does for
// encoding/json).
func (s *agentScan) rpcError(e **jsonrpc.Error) error {
	switch s.next() {
	case 'n':
		_, err := s.literal()
		*e = nil
		return err
	case '{':
	default:
		return s.typeError("an object")
	}
	if *e == nil {
		*e = new(jsonrpc.Error)
	}
	re := *e
	return s.object(func(key []byte) error {
		var err error
		switch {
		case agentKey(key, "code"):
			n := int64(re.Code)
			err = s.int64(&n)
			re.Code = int(n)
		case agentKey(key, "message"):
			err = s.stringField(&re.Message)
		case agentKey(key, "data"):
			re.Data, err = s.raw()
		default:
			err = s.skip()
		}
		return err
	})
}

// agentDecodeParams decodes params into p the way json.Unmarshal does; on
// any error it lets json.Unmarshal decode them, so that errors (which reach
// the caller) read exactly as before.
func agentDecodeParams(params []byte, p *agentParams) error {
	if err := agentDecodeParamsFast(params, p); err != nil {
		*p = agentParams{}
		return json.Unmarshal(params, p)
	}
	return nil
}

func agentDecodeParamsFast(params []byte, p *agentParams) error {
	s := agentScan{b: params}
	switch s.next() {
	case 'n':
		if _, err := s.literal(); err != nil {
			return err
		}
		return s.end()
	case '{':
	default:
		return errAgentJSON
	}
	err := s.object(func(key []byte) error {
		var err error
		switch {
		case agentKey(key, "name"):
			err = s.stringField(&p.Name)
		case agentKey(key, "arguments"):
			p.Arguments, err = s.raw()
		case agentKey(key, "protocolVersion"):
			err = s.stringField(&p.ProtocolVersion)
		case agentKey(key, "_meta"):
			switch s.next() {
			case 'n':
				_, err = s.literal()
			case '{':
				err = s.object(func(key []byte) error {
					if agentKey(key, "progressToken") {
						var err error
						p.Meta.ProgressToken, err = s.raw()
						return err
					}
					return s.skip()
				})
			default:
				err = s.typeError("an object")
			}
		default:
			err = s.skip()
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.end()
}

// agentAppendString appends s as a JSON string, byte for byte as
// json.Marshal writes it (HTML-escaped).
func agentAppendString(dst []byte, s string) []byte { return jsonenc.AppendString(dst, s, true) }

// agentAppendRaw appends a raw value the Agent decoded (valid JSON) as
// json.Marshal would write it: compact and HTML-escaped. Values with
// nothing to change (the usual id: a number or a plain string) are copied
// as they are; anything else goes through encoding/json.
func agentAppendRaw(dst []byte, raw json.RawMessage) []byte {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2: // 0xE2 starts U+2028 and U+2029
			b, err := json.Marshal(raw)
			if err != nil { // not valid JSON: cannot come from the decoder
				return append(dst, "null"...)
			}
			return append(dst, b...)
		}
	}
	return append(dst, raw...)
}

// agentEnvelopePrefix starts every envelope the Agent sends; Deadline,
// Caller and Agent are never set on replies (omitted, as json.Marshal
// omits them).
const agentEnvelopePrefix = `{"v":1,"correlationId":`

// agentAppendEnvelope appends the envelope of msg, which must be compact
// JSON as json.Marshal writes it (then the result is json.Marshal's
// encoding of the Envelope, byte for byte).
func agentAppendEnvelope(dst []byte, corrID string, msg []byte) []byte {
	dst = agentAppendString(append(dst, agentEnvelopePrefix...), corrID)
	dst = append(append(dst, `,"message":`...), msg...)
	return append(dst, '}')
}

// agentEnvelope returns the envelope of msg (see agentAppendEnvelope).
func agentEnvelope(corrID string, msg []byte) []byte {
	return agentAppendEnvelope(make([]byte, 0, len(agentEnvelopePrefix)+len(corrID)+len(msg)+16), corrID, msg)
}

// agentResponseEnvelope returns the envelope of the JSON-RPC response to
// request id: result (compact JSON as json.Marshal writes it; nil means
// {}) or rpcErr. It is what agentEnvelope(corrID, agentResponse(id, result,
// rpcErr)) returns, in one buffer.
func agentResponseEnvelope(corrID string, id, result json.RawMessage, rpcErr *jsonrpc.Error) []byte {
	if rpcErr != nil { // rare: errors carry raw data that needs checking
		return agentEnvelope(corrID, agentResponse(id, result, rpcErr))
	}
	if result == nil {
		result = json.RawMessage("{}")
	}
	const fixed = len(agentEnvelopePrefix) + len(`,"message":{"jsonrpc":"2.0","id":,"result":}}`) + 2
	b := make([]byte, 0, fixed+len(corrID)+len(id)+len(result)+8)
	b = agentAppendString(append(b, agentEnvelopePrefix...), corrID)
	b = append(b, `,"message":{"jsonrpc":"2.0"`...)
	if len(id) > 0 { // omitempty, as in jsonrpc.Message
		b = agentAppendRaw(append(b, `,"id":`...), id)
	}
	b = append(append(b, `,"result":`...), result...)
	return append(b, "}}"...)
}

package expertagent

import (
	"bytes"
	"encoding/json"
	"errors"

	segjson "github.com/segmentio/encoding/json"

	"github.com/toolbus/toolbus/internal/jsonenc"
	"github.com/toolbus/toolbus/jsonrpc"
)

// The Agent decodes one request envelope per call (contract.Decode) and
// encodes one reply, writing the bytes json.Marshal would.

// agentDecodeParams decodes params into p as json.Unmarshal would, with
// segmentio's decoder (the gateway's too): arguments stay raw and point
// into params, and a long argument is stepped over, not decoded. params
// is one JSON value: a raw member of a message contract.Decode checked.
func agentDecodeParams(params []byte, p *agentParams) error {
	rest, err := segjson.Parse(params, p, segjson.ZeroCopy)
	if err == nil && len(bytes.TrimLeft(rest, " \t\r\n")) > 0 {
		err = errors.New("data after the params value")
	}
	return err
}

// appendJSONString appends s as a JSON string, byte for byte as
// json.Marshal writes it.
func appendJSONString(dst []byte, s string) []byte { return jsonenc.AppendString(dst, s, true) }

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
// omits them). Its version is contract.EnvelopeVersion (a constant cannot
// format it; TestAgentEncodeMatchesEncodingJSON compares them).
const agentEnvelopePrefix = `{"v":2,"correlationId":`

// agentAppendEnvelope appends the envelope of msg, which must be compact
// JSON as json.Marshal writes it (then the result is json.Marshal's
// encoding of the Envelope, byte for byte).
func agentAppendEnvelope(dst []byte, corrID string, msg []byte) []byte {
	dst = appendJSONString(append(dst, agentEnvelopePrefix...), corrID)
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
	b = appendJSONString(append(b, agentEnvelopePrefix...), corrID)
	b = append(b, `,"message":{"jsonrpc":"2.0"`...)
	if len(id) > 0 { // omitempty, as in jsonrpc.Message
		b = agentAppendRaw(append(b, `,"id":`...), id)
	}
	b = append(append(b, `,"result":`...), result...)
	return append(b, "}}"...)
}

package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// EnvelopeVersion is the "v" of every envelope of contract v2.
const EnvelopeVersion = 2

// MaxEnvelopeSize bounds an envelope the decoder accepts. The broker's
// maximum packet size is the real limit; this is the decoder's own guard.
const MaxEnvelopeSize = 16 << 20

var (
	// ErrBadEnvelope is returned for a payload that is not a well-formed
	// envelope: not JSON, no correlationId, or no message object.
	ErrBadEnvelope = errors.New("malformed envelope")
	// ErrEnvelopeVersion is returned for an envelope of a version this
	// build does not speak.
	ErrEnvelopeVersion = errors.New("unsupported envelope version")
	// ErrEnvelopeTooLarge is returned for a payload over MaxEnvelopeSize.
	ErrEnvelopeTooLarge = errors.New("envelope too large")
)

// Caller is who a request is made for, as the gateway authenticated them.
// Agents may use it to narrow what they do; they must not widen it.
type Caller struct {
	UserID   string   `json:"userId"`
	Scopes   []string `json:"scopes,omitempty"`
	ReadOnly bool     `json:"readOnly"`
}

// ClaimMethod is the notification an agent instance sends on its reply
// topic to claim a call that runs for a while: when that instance goes
// offline (its Last Will) before its answer, the gateway fails the call at
// once, even though other instances of the pool are online, instead of
// letting it wait for its deadline. Any reply-topic message claims the call
// for the instance its topic names the same way.
const ClaimMethod = "notifications/toolbus/claimed"

// Envelope is the payload of every message on a request or response topic:
// one JSON-RPC 2.0 message with the correlation ID of the call it belongs to.
type Envelope struct {
	V             int    `json:"v"`
	CorrelationID string `json:"correlationId"`
	// Deadline is when the gateway stops waiting, in Unix milliseconds; 0 if none.
	Deadline int64 `json:"deadline,omitempty"`
	// Caller is set on requests from the gateway.
	Caller *Caller `json:"caller,omitempty"`
	// Agent is the client ID of the instance that sends a reply-topic
	// message, as contract v1 said it. Unused in v2, where the reply topic
	// names the instance (and the broker checks it).
	Agent   string          `json:"agent,omitempty"`
	Message json.RawMessage `json:"message"`
}

// Encode returns the envelope as JSON, with V set to EnvelopeVersion. The
// members are those json.Marshal writes; Message is validated and compacted
// but, unlike json.Marshal, not HTML-escaped (the same JSON value).
func (e *Envelope) Encode() ([]byte, error) {
	e.V = EnvelopeVersion
	dst := make([]byte, 0, 128+len(e.Message))
	dst = appendEnvelopeHead(dst, e.CorrelationID, e.Deadline, e.Caller, e.Agent)
	if e.Message == nil {
		dst = append(dst, "null"...) // what json.Marshal writes for a nil RawMessage
	} else {
		var err error
		if dst, err = appendCompactJSON(dst, e.Message); err != nil {
			return nil, fmt.Errorf("encode envelope message: %w", err)
		}
	}
	return append(dst, '}'), nil
}

// DecodeEnvelope parses and checks one payload. Every error wraps
// ErrBadEnvelope, ErrEnvelopeVersion or ErrEnvelopeTooLarge.
func DecodeEnvelope(payload []byte) (Envelope, error) {
	var e Envelope
	if len(payload) > MaxEnvelopeSize {
		return e, fmt.Errorf("%w: %d bytes", ErrEnvelopeTooLarge, len(payload))
	}
	if decodeEnvelopeFast(payload, &e, nil) {
		e.Message = bytes.Clone(e.Message) // json.Unmarshal copies it too: the payload stays the caller's
	} else {
		e = Envelope{}
		if err := json.Unmarshal(payload, &e); err != nil {
			return Envelope{}, fmt.Errorf("%w: %v", ErrBadEnvelope, err)
		}
	}
	if err := e.check(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// check checks a decoded envelope: its version, correlation ID and message.
func (e *Envelope) check() error {
	switch {
	case e.V != EnvelopeVersion:
		return fmt.Errorf("%w: %d", ErrEnvelopeVersion, e.V)
	case e.CorrelationID == "":
		return fmt.Errorf("%w: no correlationId", ErrBadEnvelope)
	case len(e.Message) == 0 || e.Message[0] != '{':
		return fmt.Errorf("%w: message is not a JSON object", ErrBadEnvelope)
	}
	return nil
}

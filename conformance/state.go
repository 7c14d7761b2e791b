package conformance

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// maxStateLen bounds the requestState the fixture reads: its own states
// are a few hundred bytes.
const maxStateLen = 4096

// stateDomain separates this MAC from any other use of the key.
const stateDomain = "toolbus/conformance/requestState/v1\x00"

// Why a requestState was refused. All of them wrap errBadState.
var (
	errBadState     = errors.New("invalid requestState")
	errStateExpired = fmt.Errorf("%w: expired", errBadState)
)

// statePayload is what a requestState carries, readable by the client but
// sealed by an HMAC: which request it belongs to, how far it got, and the
// answers earlier rounds collected.
type statePayload struct {
	// Target is the method and the tool or prompt name, e.g.
	// "tools/call test_input_required_result_multi_round".
	Target string `json:"t"`
	// Args is the SHA-256 of the request's canonical arguments: a state
	// cannot carry answers over to a call with other arguments.
	Args string `json:"a"`
	// User is the caller the gateway authenticated ("" if none).
	User string `json:"u,omitempty"`
	// Round is the round whose input requests the client is answering,
	// from 1.
	Round int `json:"r"`
	// Expires is Unix milliseconds.
	Expires int64 `json:"e"`
	// Data holds what earlier rounds learnt.
	Data map[string]string `json:"d,omitempty"`
}

// binding is what a state must match to be accepted: the request it
// comes back with.
type binding struct {
	target, args, user string
}

// seal returns p as a requestState: base64url(JSON) "." base64url(HMAC).
func (f *fixture) seal(p statePayload) string {
	body, _ := json.Marshal(p) // only strings, ints and a string map
	enc := base64.RawURLEncoding.EncodeToString(body)
	return enc + "." + base64.RawURLEncoding.EncodeToString(f.mac(enc))
}

func (f *fixture) mac(encodedBody string) []byte {
	m := hmac.New(sha256.New, f.opts.StateKey)
	m.Write([]byte(stateDomain))
	m.Write([]byte(encodedBody))
	return m.Sum(nil)
}

// open checks a requestState and returns its payload. The MAC is checked
// before anything in the body is read; then the state must belong to b and
// not have expired.
func (f *fixture) open(state string, b binding) (*statePayload, error) {
	if len(state) > maxStateLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", errBadState, maxStateLen)
	}
	enc, sig, ok := strings.Cut(state, ".")
	if !ok {
		return nil, fmt.Errorf("%w: malformed", errBadState)
	}
	// Compared as text, not decoded: base64 decoding ignores newlines and
	// unused bits, and a state must be exactly the one sealed.
	want := base64.RawURLEncoding.EncodeToString(f.mac(enc))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return nil, fmt.Errorf("%w: integrity check failed", errBadState)
	}
	body, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed", errBadState)
	}
	var p statePayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("%w: malformed", errBadState)
	}
	switch {
	case p.Target != b.target:
		return nil, fmt.Errorf("%w: issued for %q, not %q", errBadState, p.Target, b.target)
	case p.Args != b.args:
		return nil, fmt.Errorf("%w: issued for other arguments", errBadState)
	case p.User != b.user:
		return nil, fmt.Errorf("%w: issued for another caller", errBadState)
	case f.now().UnixMilli() > p.Expires:
		return nil, errStateExpired
	case p.Round < 1:
		return nil, fmt.Errorf("%w: round %d", errBadState, p.Round)
	}
	return &p, nil
}

// argsDigest is the SHA-256 (base64url) of args in a canonical form:
// absent, null and {} are the same, and object members are sorted, so that
// a client re-encoding the same arguments keeps the state valid. Numbers
// keep their literal text.
func argsDigest(args json.RawMessage) string {
	canon := []byte("{}")
	if t := bytes.TrimSpace(args); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil {
			if b, err := json.Marshal(v); err == nil {
				canon = b
			}
		} else {
			canon = t // not JSON: the caller refuses it anyway
		}
	}
	sum := sha256.Sum256(canon)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// expiry is when a state sealed now stops being valid.
func (f *fixture) expiry() int64 {
	return f.now().Add(f.opts.StateTTL).UnixMilli()
}

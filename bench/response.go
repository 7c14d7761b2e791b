package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors a call can end with; every failed call is counted under one of them
// (see Result.ErrorKinds), none is a silent pass.
var (
	// ErrHTTPStatus: the server answered with an unexpected HTTP status.
	ErrHTTPStatus = errors.New("unexpected HTTP status")
	// ErrNoResponse: the body held no JSON-RPC response to the request (an
	// empty body, or an SSE stream that ended before the response).
	ErrNoResponse = errors.New("no JSON-RPC response in body")
	// ErrBadResponse: the body could not be parsed, or the response id did
	// not match the request's.
	ErrBadResponse = errors.New("malformed response")
	// ErrRPC: the server answered with a JSON-RPC error.
	ErrRPC = errors.New("JSON-RPC error")
	// ErrToolError: the tool result had isError set.
	ErrToolError = errors.New("tool result isError")
	// ErrWrongResult: the tool result was not the expected echo.
	ErrWrongResult = errors.New("unexpected tool result")
)

// rpcResponse is the part of a JSON-RPC message the harness checks. Method is
// set on the notifications and requests an SSE stream may carry before the
// response.
type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
}

// findResponse returns the JSON-RPC response with the given id from body,
// which is application/json (one message) or text/event-stream (events whose
// data lines are messages; events named other than "message" are skipped,
// as the go-sdk client does).
func findResponse(contentType string, body []byte, id []byte) (*rpcResponse, error) {
	if !isEventStream(contentType) {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, ErrNoResponse
		}
		var r rpcResponse
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadResponse, err)
		}
		if !bytes.Equal(bytes.TrimSpace(r.ID), id) {
			return nil, fmt.Errorf("%w: id %s, want %s", ErrBadResponse, r.ID, id)
		}
		return &r, nil
	}
	var (
		data    []byte
		event   []byte
		hasData bool
	)
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			if r, err := sseMessage(event, data, hasData, id); r != nil || err != nil {
				return r, err
			}
			data, event, hasData = data[:0], nil, false
			continue
		}
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			event = value
		}
	}
	// A stream may end without the blank line after its last event.
	if r, err := sseMessage(event, data, hasData, id); r != nil || err != nil {
		return r, err
	}
	return nil, ErrNoResponse
}

// isEventStream reports whether a Content-Type is text/event-stream, without
// mime.ParseMediaType's allocations (this runs once per call).
func isEventStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// sseMessage decodes one dispatched SSE event; (nil, nil) means "not the
// response, keep reading".
func sseMessage(event, data []byte, hasData bool, id []byte) (*rpcResponse, error) {
	if !hasData || (len(event) > 0 && string(event) != "message") || len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var r rpcResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: SSE data: %v", ErrBadResponse, err)
	}
	if r.Method != "" || len(r.ID) == 0 {
		return nil, nil // a notification or a server request before the response
	}
	if !bytes.Equal(bytes.TrimSpace(r.ID), id) {
		return nil, fmt.Errorf("%w: id %s, want %s", ErrBadResponse, r.ID, id)
	}
	return &r, nil
}

// checkCall checks the response of a tools/call: a result, not isError, and,
// when expect is non-nil, exactly one text content equal to *expect.
func checkCall(r *rpcResponse, expect *string) error {
	if r.Error != nil {
		return fmt.Errorf("%w %d: %s", ErrRPC, r.Error.Code, r.Error.Message)
	}
	if len(r.Result) == 0 {
		return fmt.Errorf("%w: neither result nor error", ErrBadResponse)
	}
	var res toolResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return fmt.Errorf("%w: result: %v", ErrBadResponse, err)
	}
	if res.IsError {
		msg := ""
		if len(res.Content) > 0 {
			msg = res.Content[0].Text
		}
		return fmt.Errorf("%w: %.200s", ErrToolError, msg)
	}
	if expect == nil {
		return nil
	}
	if len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != *expect {
		return fmt.Errorf("%w: %.200s", ErrWrongResult, r.Result)
	}
	return nil
}

// appendID appends a request id as JSON; ids are integers so that the echo in
// the response can be compared byte for byte.
func appendID(b []byte, id int64) []byte { return strconv.AppendInt(b, id, 10) }

// respTemplate is a response body that passed the full check, split around
// its JSON-RPC id. A later body that equals it byte for byte with only the id
// changed is the same response to another request and passes without being
// decoded; any other body is decoded and checked in full. Decoding every
// response would otherwise be a third of the load generator's CPU.
type respTemplate struct {
	ok             bool
	sse            bool
	prefix, suffix []byte
}

func (t *respTemplate) matches(sse bool, body, id []byte) bool {
	return t.ok && t.sse == sse &&
		len(body) == len(t.prefix)+len(id)+len(t.suffix) &&
		bytes.HasPrefix(body, t.prefix) &&
		bytes.Equal(body[len(t.prefix):len(t.prefix)+len(id)], id) &&
		bytes.HasSuffix(body, t.suffix)
}

// learn makes body the template, if its id appears in it exactly once as
// `"id":<id>` (compact JSON): otherwise the splice point would be ambiguous
// and every response keeps being decoded.
func (t *respTemplate) learn(sse bool, body, id []byte) {
	key := append([]byte(`"id":`), id...)
	i := bytes.Index(body, key)
	if i < 0 || bytes.Contains(body[i+1:], key) {
		return
	}
	end := i + len(key)
	if end < len(body) && body[end] >= '0' && body[end] <= '9' {
		return
	}
	t.prefix = bytes.Clone(body[:i+len(`"id":`)])
	t.suffix = bytes.Clone(body[end:])
	t.sse, t.ok = sse, true
}

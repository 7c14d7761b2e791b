package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/toolbus/toolbus/jsonrpc"
)

// rpcWriter answers one JSON-RPC request over Streamable HTTP. It starts as
// a plain JSON response and turns into an SSE stream only when a
// notification has to reach the client before the final response, so the
// common case (one result) costs no stream, and an error found before
// anything was sent can still choose its HTTP status.
type rpcWriter struct {
	w      http.ResponseWriter
	id     json.RawMessage // the request's id, raw
	canSSE bool            // the client accepts text/event-stream
	sse    bool            // the stream has started
	done   bool            // the final response was written
	// modern adds "resultType":"complete" to results that lack it.
	modern bool
}

var (
	sseEventPrefix = []byte("event: message\ndata: ")
	sseEventSuffix = []byte("\n\n")
)

var _ stream = (*rpcWriter)(nil)

// open implements stream: the client accepts text/event-stream.
func (rw *rpcWriter) open() bool { return rw.canSSE }

// send implements stream: it sends a notification (or an agent-to-client
// request) ahead of the final response, as an SSE event.
func (rw *rpcWriter) send(msg []byte) bool {
	if rw.done || !rw.canSSE {
		return false
	}
	if !rw.sse {
		h := rw.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		rw.w.WriteHeader(http.StatusOK)
		rw.sse = true
	}
	rw.writeEvent(msg)
	return true
}

// keepAlive writes an SSE comment on a started stream, so that proxies
// and clients do not take a quiet one for dead; false if it could not.
func (rw *rpcWriter) keepAlive() bool {
	if !rw.sse || rw.done {
		return false
	}
	if _, err := rw.w.Write([]byte(": keep-alive\n\n")); err != nil {
		return false
	}
	if f, ok := rw.w.(http.Flusher); ok {
		f.Flush()
	}
	return true
}

func (rw *rpcWriter) writeEvent(msg []byte) {
	if bytes.IndexByte(msg, '\n') >= 0 {
		// An SSE data line ends at a newline: send the JSON on one line.
		var b bytes.Buffer
		if json.Compact(&b, msg) == nil {
			msg = b.Bytes()
		}
	}
	_, _ = rw.w.Write(sseEventPrefix)
	_, _ = rw.w.Write(msg)
	_, _ = rw.w.Write(sseEventSuffix)
	if f, ok := rw.w.(http.Flusher); ok {
		f.Flush()
	}
}

// result sends the final response with a result that is already JSON.
func (rw *rpcWriter) result(result []byte) {
	if rw.modern {
		result = withResultType(result)
	}
	rw.final(http.StatusOK, []byte(`{"jsonrpc":"2.0","id":`), rw.idOrNull(), []byte(`,"result":`), result, []byte(`}`))
}

// error sends the final response as a JSON-RPC error. status is the HTTP
// status used when no stream has started yet.
func (rw *rpcWriter) error(status int, e *jsonrpc.Error) {
	b, err := json.Marshal(e)
	if err != nil {
		b = []byte(`{"code":-32603,"message":"internal error"}`)
	}
	if len(rw.id) == 0 {
		// No usable id (parse errors): the member is left out, not null.
		rw.final(status, []byte(`{"jsonrpc":"2.0","error":`), b, []byte(`}`))
		return
	}
	rw.final(status, []byte(`{"jsonrpc":"2.0","id":`), rw.id, []byte(`,"error":`), b, []byte(`}`))
}

func (rw *rpcWriter) idOrNull() []byte {
	if len(rw.id) == 0 {
		return []byte("null")
	}
	return rw.id
}

// final writes parts as one message: a JSON body with its length, or the
// last event of the stream. Writing the parts one by one avoids copying a
// large result into a new buffer.
func (rw *rpcWriter) final(status int, parts ...[]byte) {
	if rw.done {
		return
	}
	rw.done = true
	if rw.sse {
		n := 0
		for _, p := range parts {
			n += len(p)
		}
		msg := make([]byte, 0, n)
		for _, p := range parts {
			msg = append(msg, p...)
		}
		rw.writeEvent(msg)
		return
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h := rw.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(n))
	rw.w.WriteHeader(status)
	for _, p := range parts {
		_, _ = rw.w.Write(p)
	}
}

// withResultType adds "resultType":"complete" to a result object that has
// none. The check is a byte search, so a result that merely mentions the
// word somewhere keeps its shape; clients read a missing resultType as
// complete anyway.
func withResultType(result []byte) []byte {
	if len(result) < 2 || result[0] != '{' || bytes.Contains(result, []byte(`"resultType"`)) {
		return result
	}
	rest := bytes.TrimSpace(result[1:])
	out := make([]byte, 0, len(result)+28)
	out = append(out, `{"resultType":"complete"`...)
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// writeError writes the JSON error shape used where no JSON-RPC response
// applies: {"error": "code", "message": "..."}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

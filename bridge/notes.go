package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sync"
)

// The go-sdk client hands the upstream's notifications to their handlers
// on a goroutine of their own, and a call's response to its caller at
// once: a call's progress could reach the bridge after the call returned,
// when the caller's stream is closed. So the bridge reads the upstream's
// progress and log notifications off the wire as they arrive, before the
// client decodes what follows, and ties them to their call there; the call
// relays them before its answer.

// maxNotes bounds the notifications a call keeps for relaying; beyond it,
// the oldest go.
const maxNotes = 256

// note is one notification of the upstream for a call's caller.
type note struct {
	method string
	params json.RawMessage
}

// The notifications the tap looks for.
var (
	tapProgress = []byte(`"notifications/progress"`)
	tapMessage  = []byte(`"notifications/message"`)
)

// tap looks at one JSON-RPC message from the upstream, as it arrives.
func (l *lifetime) tap(msg []byte) {
	progress := bytes.Contains(msg, tapProgress)
	if !progress && !bytes.Contains(msg, tapMessage) {
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.ID != nil {
		return
	}
	var c *call
	switch m.Method {
	case "notifications/progress":
		var p struct {
			Token any `json:"progressToken"`
		}
		_ = json.Unmarshal(m.Params, &p)
		tok, _ := p.Token.(string)
		l.mu.Lock()
		c = l.tokens[tok]
		l.mu.Unlock()
	case "notifications/message":
		// Log messages name no request: only the call running alone can
		// be theirs.
		if c = l.runningAlone(); c == nil {
			l.log.WithField("params", string(m.Params)).Debug("upstream log message outside a call")
		}
	}
	if c == nil {
		return
	}
	l.mu.Lock()
	if len(c.notes) == maxNotes {
		c.notes = c.notes[1:]
	}
	c.notes = append(c.notes, note{method: m.Method, params: m.Params})
	l.mu.Unlock()
	select {
	case c.noted <- struct{}{}:
	default:
	}
}

// relayNotes sends the call's notifications so far to the caller of req.
func (l *lifetime) relayNotes(ctx context.Context, req relayer, c *call) {
	l.mu.Lock()
	notes := c.notes
	c.notes = nil
	l.mu.Unlock()
	for _, n := range notes {
		var err error
		switch n.method {
		case "notifications/progress":
			var p struct {
				Progress float64 `json:"progress"`
				Total    float64 `json:"total"`
				Message  string  `json:"message"`
			}
			if err = json.Unmarshal(n.params, &p); err == nil {
				err = req.Progress(ctx, p.Progress, p.Total, p.Message)
			}
		case "notifications/message":
			var p struct {
				Level string          `json:"level"`
				Data  json.RawMessage `json:"data"`
			}
			if err = json.Unmarshal(n.params, &p); err == nil {
				err = req.Log(ctx, p.Level, p.Data)
			}
		}
		if err != nil {
			l.log.WithError(err).WithField("method", n.method).Debug("notification not relayed")
		}
	}
}

// relayer is what relayNotes needs of a bus request.
type relayer interface {
	Progress(ctx context.Context, progress, total float64, message string) error
	Log(ctx context.Context, level string, data any) error
}

// tapReader passes a stream of the upstream's messages through, handing
// each line to tap as soon as it is read: newline-delimited JSON (stdio),
// or an event stream whose "data:" lines hold the messages (HTTP).
type tapReader struct {
	r    io.ReadCloser
	tap  func([]byte)
	sse  bool
	mu   sync.Mutex
	line []byte
	skip bool // the line is too long: dropped up to its newline
}

func (t *tapReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.mu.Lock()
		t.feed(p[:n])
		t.mu.Unlock()
	}
	return n, err
}

func (t *tapReader) Close() error { return t.r.Close() }

func (t *tapReader) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !t.skip && len(t.line)+len(b) <= maxTapLine {
				t.line = append(t.line, b...)
			} else {
				// Too long to be a notification worth relaying: passed
				// through, untapped, up to its end.
				t.line, t.skip = t.line[:0], true
			}
			return
		}
		line := b[:i]
		if len(t.line)+len(line) > maxTapLine {
			t.skip = true
		} else if len(t.line) > 0 {
			t.line = append(t.line, line...)
			line = t.line
		}
		if !t.skip {
			t.emit(bytes.TrimRight(line, "\r"))
		}
		t.line, t.skip = t.line[:0], false
		b = b[i+1:]
	}
}

// maxTapLine bounds the line a tapReader gathers; longer lines pass
// through untapped.
const maxTapLine = 1 << 20

func (t *tapReader) emit(line []byte) {
	if t.sse {
		rest, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			return
		}
		line = bytes.TrimPrefix(rest, []byte(" "))
	}
	if len(line) > 0 {
		t.tap(line)
	}
}

// tapTransport taps the event streams of an HTTP upstream's responses,
// and reads every response through a frameReader (max, over).
type tapTransport struct {
	base http.RoundTripper
	tap  func([]byte)
	max  int
	over func(int, json.RawMessage)
}

func (t tapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if v := req.Header.Get("Mcp-Protocol-Version"); v >= modernProtocol && req.Method == http.MethodPost && req.Body != nil {
		var err error
		if req, err = withNotificationMeta(req, v); err != nil {
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp.Body != nil {
		mode := frameBody
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
			mode = frameEvents
		}
		resp.Body = &tapReader{r: newFrameReader(resp.Body, mode, t.max, t.over), tap: t.tap, sse: true}
		resp.ContentLength = -1 // a body over max is replaced
	}
	return resp, err
}

// modernProtocol is the first MCP version whose messages each carry their
// protocol version in _meta.
const modernProtocol = "2026-07-28"

// withNotificationMeta gives a notification the bridge's go-sdk client
// posts on a 2026 session the _meta protocol version it lacks (the go-sdk
// leaves it out of notifications/cancelled), which strict servers answer
// with HTTP 400, and the go-sdk then ends the session.
func withNotificationMeta(req *http.Request, version string) (*http.Request, error) {
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	if bytes.Contains(body, []byte(`"notifications/`)) {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) == nil && m["id"] == nil && m["method"] != nil {
			var params map[string]json.RawMessage
			_ = json.Unmarshal(m["params"], &params)
			if params == nil {
				params = map[string]json.RawMessage{}
			}
			var meta map[string]json.RawMessage
			_ = json.Unmarshal(params["_meta"], &meta)
			if meta == nil {
				meta = map[string]json.RawMessage{}
			}
			if meta[protocolMetaPrefix+"protocolVersion"] == nil {
				meta[protocolMetaPrefix+"protocolVersion"], _ = json.Marshal(version)
				params["_meta"], _ = json.Marshal(meta)
				m["params"], _ = json.Marshal(params)
				body, _ = json.Marshal(m)
			}
		}
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return req, nil
}

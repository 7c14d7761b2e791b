package platformtools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// injector is what Call.Inject needs from the Registry.
type injector struct {
	api     http.Handler
	maxResp int64
	host    string
}

// injectRemoteAddr is the RemoteAddr of injected requests. It is not a
// loopback address on purpose: middleware that trusts local clients must
// not trust injected requests more than the caller who made them.
const injectRemoteAddr = "inject.invalid:0"

// InjectedResponse is the response of an injected request.
type InjectedResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// OK reports whether Status is 2xx.
func (r *InjectedResponse) OK() bool { return r.Status >= 200 && r.Status < 300 }

// DecodeJSON decodes the body into v.
func (r *InjectedResponse) DecodeJSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("injected response (HTTP %d): %w", r.Status, err)
	}
	return nil
}

// APIError is the platform's JSON error body: {"error": code, "message": text}.
type APIError struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

// APIError returns the body's {"error","message"} if it has one, else an
// APIError made from the status.
func (r *InjectedResponse) APIError() APIError {
	var e APIError
	if json.Unmarshal(r.Body, &e) != nil || e.Code == "" {
		e = APIError{Code: strings.ToLower(strings.ReplaceAll(http.StatusText(r.Status), " ", "_")), Message: string(bytes.TrimSpace(r.Body))}
	}
	return e
}

// Inject serves one HTTP request through the platform's own REST handler
// in-process (no network) and returns the response. The caller's bearer
// token is forwarded as "Authorization: Bearer <Secret>", so the handler's
// auth middleware authenticates and authorizes it as it would the caller's
// own request.
//
// path is the request target, starting with '/' (it may hold a query).
// body is nil (no body), []byte, json.RawMessage, string, an io.Reader
// (sent as is), or any other value (encoded as JSON); a body is sent with
// Content-Type: application/json unless it is an io.Reader.
//
// The request's context carries ctx's deadline and cancellation but none of
// its values: the handler learns who calls only from the forwarded token,
// exactly as for a request from the network (the caller's own request
// context holds its authenticated token; letting the handler see it would
// let a handler without the auth middleware in front skip the checks). The
// response body is bounded by Options.MaxInjectResponse.
func (c *Call) Inject(ctx context.Context, method, path string, body any) (*InjectedResponse, error) {
	if c.inj == nil {
		return nil, ErrNoInjector
	}
	return c.inj.do(ctx, c.Secret, method, path, body)
}

func (in *injector) do(ctx context.Context, secret, method, path string, body any) (resp *InjectedResponse, err error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("inject %s %q: path must start with /", method, path)
	}
	var rd io.Reader
	isJSON := true
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case json.RawMessage:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd, isJSON = b, false
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("inject %s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(noValues{ctx}, method, "http://"+in.host+path, rd)
	if err != nil {
		return nil, fmt.Errorf("inject %s %q: %w", method, path, err)
	}
	if req.Body == nil {
		req.Body = http.NoBody // as a server request: handlers may read r.Body unconditionally
	}
	req.RequestURI = path
	req.RemoteAddr = injectRemoteAddr
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if rd != nil && isJSON {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")

	w := &responseRecorder{header: make(http.Header), max: in.maxResp}
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("inject %s %s: %w: %v", method, path, ErrHandlerPanic, p)
		}
	}()
	in.api.ServeHTTP(w, req)
	if w.tooLarge {
		return nil, fmt.Errorf("inject %s %s: %w (limit %d bytes)", method, path, ErrResponseTooLarge, in.maxResp)
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &InjectedResponse{Status: w.status, Header: w.header, Body: w.body.Bytes()}, nil
}

// responseRecorder is the in-memory http.ResponseWriter of an injected
// request.
type responseRecorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	max      int64
	tooLarge bool
}

func (w *responseRecorder) Header() http.Header { return w.header }

func (w *responseRecorder) WriteHeader(code int) {
	// As net/http: informational statuses may precede the real one; after
	// that the first status wins.
	if w.status != 0 || (code >= 100 && code < 200 && code != http.StatusSwitchingProtocols) {
		return
	}
	w.status = code
}

func (w *responseRecorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.tooLarge || int64(w.body.Len())+int64(len(p)) > w.max {
		w.tooLarge = true
		return 0, ErrResponseTooLarge
	}
	return w.body.Write(p)
}

// Flush is a no-op: the whole body is returned at once. It lets handlers
// that flush (through http.ResponseController) run unchanged.
func (w *responseRecorder) Flush() {}

// noValues is a context with the deadline and cancellation of its parent
// but none of its values: only the mark that the request is injected.
type noValues struct{ parent context.Context }

func (c noValues) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c noValues) Done() <-chan struct{}       { return c.parent.Done() }
func (c noValues) Err() error                  { return c.parent.Err() }
func (c noValues) Value(k any) any {
	if k == (injectedKey{}) {
		return true
	}
	return nil
}

type injectedKey struct{}

// Injected reports whether ctx is that of a request a platform tool
// injected: part of a tools/call already admitted (and rate-limited) as a
// whole, not a request of its own.
func Injected(ctx context.Context) bool {
	v, _ := ctx.Value(injectedKey{}).(bool)
	return v
}

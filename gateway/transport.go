package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gorilla/mux"
	segjson "github.com/segmentio/encoding/json"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/store"
)

// rpcRequest is one JSON-RPC message from the client, decoded once.
type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// serveMCP is the MCP endpoint's transport, Streamable HTTP: it checks a
// POST's framing, decodes its JSON-RPC message once, finds its session (the
// 2025 versions) or checks its headers (2026-07-28), places it in its
// context on the bus, and hands it to the methods (methods.go); it writes
// their answer as JSON, or as an SSE stream once a message had to go out
// ahead of it (respond.go).
func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		g.post(w, r)
	case http.MethodDelete:
		g.deleteSession(w, r)
	case http.MethodGet:
		g.listen(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not served on the MCP endpoint; use POST")
	}
}

func (g *Gateway) post(w http.ResponseWriter, r *http.Request) {
	tok, secret, _ := store.TokenFrom(r.Context())
	entityType, entityID, ok := g.entity(w, r, tok)
	if !ok {
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json")
		return
	}
	canJSON, canSSE := accepts(r.Header.Get("Accept"))
	if !canJSON {
		writeError(w, http.StatusNotAcceptable, "not_acceptable", "Accept must include application/json (and text/event-stream for streamed responses)")
		return
	}
	body, err := g.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			g.refuse(w, r, http.StatusRequestEntityTooLarge, "body_too_large", "request body over the limit") // counted and audited
		case errors.As(err, &netErr) && netErr.Timeout():
			writeError(w, http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
		default:
			writeError(w, http.StatusBadRequest, "bad_body", "cannot read the request body")
		}
		return
	}

	rw := &rpcWriter{w: w, canSSE: canSSE}
	if tooDeep(body, maxJSONDepth) {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "parse error: JSON nested deeper than %d levels", maxJSONDepth))
		return
	}
	if !utf8.Valid(body) {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "parse error: the body is not valid UTF-8"))
		return
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "JSON-RPC batches are not supported; send one message per request"))
		return
	}
	var msg rpcRequest
	if err := decodeJSON(body, &msg); err != nil {
		if json.Valid(body) { // JSON, but not a request object
			rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "invalid request: %v", err))
			return
		}
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "parse error: %v", err))
		return
	}
	if name, dup := duplicateMember(body); dup {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "member %q appears twice (names are compared without case)", clip(name)))
		return
	}
	if !validID(msg.ID) {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "id must be a string or a number"))
		return
	}
	rw.id = msg.ID
	if msg.JSONRPC != jsonrpc.Version {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, `"jsonrpc" must be "2.0"`))
		return
	}
	req := &request{ctx: r.Context(), id: msg.ID, method: msg.Method, params: msg.Params, tok: tok, secret: secret, out: rw}
	if len(msg.Params) > 0 && !bytes.Equal(msg.Params, []byte("null")) {
		if err := decodeJSON(msg.Params, &req.p); err != nil {
			rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %v", err))
			return
		}
		// Params are forwarded as they came: a repeated member could be
		// read here as one tool and by the agent as another.
		if name, dup := duplicateMember(msg.Params); dup {
			rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params member %q appears twice (names are compared without case)", clip(name)))
			return
		}
	}

	header := r.Header.Get(headerProtocolVersion)
	req.modern = modernHeader(header) || (req.p.Meta != nil && req.p.Meta.ProtocolVersion != "")
	rw.modern = req.modern
	if req.modern {
		if !g.acceptModern(rw, r, req, header) {
			return
		}
		req.bus = contract.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID,
			SessionID: "tok-" + tok.ID, EntityType: entityType, EntityID: entityID}
		req.minLog = -1
		if req.p.Meta != nil && req.p.Meta.LogLevel != "" {
			req.minLog = logLevelIndex(req.p.Meta.LogLevel)
		}
	} else if req.method != "initialize" {
		if !g.acceptLegacy(rw, r, req, header) {
			return
		}
		req.bus = contract.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID,
			SessionID: req.sess.key, EntityType: entityType, EntityID: entityID}
		req.sess.mu.Lock()
		if req.sess.logLevel >= 0 {
			req.minLog = req.sess.logLevel
		}
		req.sess.mu.Unlock()
	}

	if msg.Method == "" {
		// A response from the client (to an agent's request) or junk.
		if len(msg.ID) > 0 && (msg.Result != nil || msg.Error != nil) {
			g.clientResponse(r.Context(), req.sess, &msg)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "no method"))
		return
	}
	if len(msg.ID) == 0 {
		notification(req.sess, &msg)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	g.respond(rw, r, req, g.handle(req))
}

// respond writes a method's answer, mapping its refusal onto HTTP.
func (g *Gateway) respond(rw *rpcWriter, r *http.Request, req *request, a answer) {
	switch {
	case a.err != nil:
		status := http.StatusOK
		switch a.refusal {
		case refusedForbidden:
			status = http.StatusForbidden
			g.noteRefusal(r, status, "forbidden")
			if a.needScope != "" && !rw.sse {
				rw.w.Header().Set("WWW-Authenticate", g.insufficientScope(r, req.tok, a.needScope))
			}
		case refusedRateLimited, refusedTooManySessions:
			status = http.StatusTooManyRequests
			reason := "rate_limited"
			if a.refusal == refusedTooManySessions {
				reason = "too_many_sessions"
			}
			g.noteRefusal(r, status, reason)
			if !rw.sse {
				rw.w.Header().Set("Retry-After", strconv.Itoa(a.retryAfter))
			}
		case refusedUnknownMethod:
			if req.modern {
				status = http.StatusNotFound
			}
		case refusedMissingCapability:
			if req.modern {
				status = http.StatusBadRequest
			}
		}
		rw.error(status, a.err)
	case a.result != nil:
		if req.sessionID != "" {
			rw.w.Header().Set(headerSessionID, req.sessionID)
		}
		rw.result(a.result)
	}
}

// decodeJSON decodes one JSON value that must fill b. Raw members
// (params, arguments, ids) keep pointing into b instead of being copied:
// the body lives as long as the request, and forwarded params pass through
// untouched. segmentio's decoder does this (encoding/json copies raw
// members); it matches encoding/json's semantics (case-insensitive member
// names, last duplicate wins).
func decodeJSON(b []byte, v any) error {
	rest, err := segjson.Parse(b, v, segjson.ZeroCopy)
	if err != nil {
		return err
	}
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return errors.New("data after the JSON value")
	}
	return nil
}

// entity reads and checks the entity of the path (/api/v1/mcp/{type}/{id}).
// A value that cannot be a topic level is refused (400), never mapped; a
// token narrowed to other entities is refused (403).
func (g *Gateway) entity(w http.ResponseWriter, r *http.Request, tok store.Token) (string, string, bool) {
	vars := mux.Vars(r)
	et, eid := vars["entityType"], vars["entityId"]
	if et == "" && eid == "" {
		et, eid = contract.NoEntity, contract.NoEntity
	} else {
		for _, v := range []string{et, eid} {
			if err := contract.ValidateLevel(v); err != nil || v == contract.NoEntity {
				g.refuse(w, r, http.StatusBadRequest, "invalid_entity", "entity type and id must match ^[A-Za-z0-9_-]{1,128}$ (and not be \"_\")")
				return "", "", false
			}
		}
	}
	if !tok.AllowsEntity(store.Entity{Type: et, ID: eid}) {
		g.refuse(w, r, http.StatusForbidden, "forbidden_entity", "this token is narrowed to other entities")
		return "", "", false
	}
	return et, eid, true
}

func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	max := g.opts.MaxBodyBytes
	if r.ContentLength > max {
		return nil, &http.MaxBytesError{Limit: max}
	}
	body := http.MaxBytesReader(w, r.Body, max)
	if r.ContentLength > 0 {
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(body)
}

// accepts reads an Accept header: may the answer be JSON, may it be SSE.
// A missing Accept is taken as "anything".
func accepts(h string) (canJSON, canSSE bool) {
	if strings.TrimSpace(h) == "" {
		return true, true
	}
	for _, part := range strings.Split(h, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case "application/json", "application/*":
			canJSON = true
		case "text/event-stream", "text/*":
			canSSE = true
		case "*/*":
			canJSON, canSSE = true, true
		}
	}
	return canJSON, canSSE
}

// validID: absent, a string or a number. Null, objects, arrays and booleans are not ids.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	switch id[0] {
	case '"':
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// acceptModern applies the checks of the stateless era, in the order the
// specification gives, answering the first failure.
func (g *Gateway) acceptModern(rw *rpcWriter, r *http.Request, req *request, header string) bool {
	if header == "" {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(codeHeaderMismatch, "missing MCP-Protocol-Version header"))
		return false
	}
	m := req.p.Meta
	if m == nil || m.ProtocolVersion == "" || len(m.ClientCapabilities) == 0 {
		if len(req.id) == 0 {
			return true // a notification: nothing to answer
		}
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidParams,
			"params._meta must carry %s and %s", metaProtocolVersion, metaClientCapabilities))
		return false
	}
	if m.ProtocolVersion != header {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(codeHeaderMismatch,
			"MCP-Protocol-Version header %q differs from _meta %q", clip(header), clip(m.ProtocolVersion)))
		return false
	}
	if m.ProtocolVersion != version20260728 {
		e := jsonrpc.NewError(codeUnsupportedVersion, "unsupported protocol version %q", clip(m.ProtocolVersion))
		e.Data, _ = json.Marshal(map[string]any{"supported": supportedVersions, "requested": clip(m.ProtocolVersion)})
		rw.error(http.StatusBadRequest, e)
		return false
	}
	if len(req.id) > 0 {
		if msg := checkStandardHeaders(r.Header, req.method, req.p.Name); msg != "" {
			rw.error(http.StatusBadRequest, jsonrpc.NewError(codeHeaderMismatch, "%s", msg))
			return false
		}
	}
	return true
}

// checkStandardHeaders compares the Mcp-Method and Mcp-Name headers of the
// stateless era with the body.
func checkStandardHeaders(h http.Header, method, name string) string {
	hm, ok := headerValue(h, "Mcp-Method")
	if !ok {
		return "missing or malformed Mcp-Method header"
	}
	if hm != method {
		return "Mcp-Method header " + clip(hm) + " differs from the method " + clip(method)
	}
	switch method {
	case "tools/call", "prompts/get", "resources/read":
		hn, ok := headerValue(h, "Mcp-Name")
		if !ok {
			return "missing or malformed Mcp-Name header"
		}
		if method == "tools/call" && hn != name {
			return "Mcp-Name header differs from params.name"
		}
	}
	return ""
}

// headerValue reads a header that may carry a =?base64?...?= encoded value.
func headerValue(h http.Header, key string) (string, bool) {
	vs := h.Values(key)
	if len(vs) != 1 {
		return "", false
	}
	v := strings.TrimSpace(vs[0])
	if inner, ok := strings.CutPrefix(v, "=?base64?"); ok {
		inner, ok = strings.CutSuffix(inner, "?=")
		if !ok {
			return v, true
		}
		b, err := base64.StdEncoding.DecodeString(inner)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	return v, true
}

// acceptLegacy finds the session of a legacy-era request.
func (g *Gateway) acceptLegacy(rw *rpcWriter, r *http.Request, req *request, header string) bool {
	id := r.Header.Get(headerSessionID)
	if id == "" {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "missing %s header: initialize first", headerSessionID))
		return false
	}
	s, err := g.sessions.lookup(id, req.tok.UserID, req.tok.Holder())
	if err == nil {
		err = g.sessions.checkShared(r.Context(), s) // ended on another replica?
	}
	if err != nil {
		g.noteRefusal(r, http.StatusNotFound, "unknown_session") // counted and audited
		rw.error(http.StatusNotFound, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%v: initialize a new session", err))
		return false
	}
	if header != "" && header != s.version {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"MCP-Protocol-Version %q differs from the session's %q", header, s.version))
		return false
	}
	req.sess = s
	return true
}

// sessionOf finds the session a GET or DELETE names (Mcp-Session-Id), for
// the caller's token; it answers 400 without the header, and 404 for a
// session that is unknown, ended or another token's.
func (g *Gateway) sessionOf(w http.ResponseWriter, r *http.Request) (*session, bool) {
	tok, _, _ := store.TokenFrom(r.Context())
	id := r.Header.Get(headerSessionID)
	if id == "" {
		writeError(w, http.StatusBadRequest, "missing_session", "missing "+headerSessionID+" header")
		return nil, false
	}
	s, err := g.sessions.lookup(id, tok.UserID, tok.Holder())
	if err == nil {
		err = g.sessions.checkShared(r.Context(), s)
	}
	if errors.Is(err, errTooManySessions) {
		// A session of another replica, resumed here, at the user's bound.
		w.Header().Set("Retry-After", strconv.Itoa(sessionsFullRetry))
		g.refuse(w, r, http.StatusTooManyRequests, "too_many_sessions", tooManySessionsMessage)
		return nil, false
	}
	if err != nil {
		g.refuse(w, r, http.StatusNotFound, "unknown_session", err.Error())
		return nil, false
	}
	return s, true
}

func (g *Gateway) deleteSession(w http.ResponseWriter, r *http.Request) {
	if modernHeader(r.Header.Get(headerProtocolVersion)) {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the stateless protocol has no sessions to delete")
		return
	}
	s, ok := g.sessionOf(w, r)
	if !ok {
		return
	}
	if err := g.sessions.endShared(r.Context(), s); err != nil {
		g.log.WithError(err).Error("could not record an ended session in the store")
		writeError(w, http.StatusServiceUnavailable, "store_unavailable",
			"the session could not be ended (the store is unavailable): retry the DELETE")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// notification handles a client notification (answered 202 by the caller).
func notification(sess *session, msg *rpcRequest) {
	switch msg.Method {
	case "notifications/cancelled":
		// On a legacy session the client cancels a request it sent on
		// another POST; the gateway ends that request's agent call, which
		// sends notifications/cancelled on to the agent. (On the 2026
		// wire, closing the request's stream is the cancellation.)
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if sess != nil && json.Unmarshal(msg.Params, &p) == nil && len(p.RequestID) > 0 {
			sess.cancel(string(p.RequestID))
		}
	}
}

// clientResponse routes a client's answer to a server-to-client request
// (an agent's need for input) to the request waiting for it.
func (g *Gateway) clientResponse(ctx context.Context, sess *session, msg *rpcRequest) {
	if sess == nil {
		return
	}
	var id string
	if json.Unmarshal(msg.ID, &id) != nil {
		return // ids the gateway sends are strings
	}
	r := clientResponse{Result: msg.Result}
	if len(msg.Error) > 0 {
		r.Error = &jsonrpc.Error{}
		if json.Unmarshal(msg.Error, r.Error) != nil {
			r.Error = jsonrpc.NewError(jsonrpc.CodeInternalError, "malformed error from the client")
		}
	}
	if !sess.deliver(id, r) {
		g.logger(ctx).WithField("id", id).Debug("client response for no waiting request")
	}
}

package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"
	segjson "github.com/segmentio/encoding/json"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
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

// rpcParams holds the members of params that the gateway itself reads, for
// every method it serves. Everything else is forwarded untouched.
type rpcParams struct {
	Meta *struct {
		ProtocolVersion    string          `json:"io.modelcontextprotocol/protocolVersion"`
		ClientCapabilities json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
		LogLevel           string          `json:"io.modelcontextprotocol/logLevel"`
	} `json:"_meta"`
	Cursor          string          `json:"cursor"`          // tools/list
	Name            string          `json:"name"`            // tools/call
	Arguments       json.RawMessage `json:"arguments"`       // tools/call
	ProtocolVersion string          `json:"protocolVersion"` // initialize
	Capabilities    json.RawMessage `json:"capabilities"`    // initialize
	Level           string          `json:"level"`           // logging/setLevel
}

// call is everything known about one MCP request once it is accepted.
type call struct {
	req     rpcRequest
	params  rpcParams
	tok     acl.Token
	secret  string
	modern  bool
	sess    *session // legacy era only
	ctx     expertagent.Context
	minLog  int // lowest log level relayed; -1: relay none (modern without logLevel)
	rw      *rpcWriter
	httpReq *http.Request
	outcome callOutcome // how a tools/call ended, for the Observer
}

func (g *Gateway) serveMCP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		g.post(w, r)
	case http.MethodDelete:
		g.deleteSession(w, r)
	default:
		// No standalone GET stream: both eras allow 405, and clients take
		// it as "no stream". Notifications travel on each request's stream.
		w.Header().Set("Allow", "POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not served on the MCP endpoint; use POST")
	}
}

func (g *Gateway) post(w http.ResponseWriter, r *http.Request) {
	tok, secret, _ := acl.TokenFrom(r.Context())
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

	c := &call{tok: tok, secret: secret, httpReq: r, minLog: 0}
	c.rw = &rpcWriter{w: w, canSSE: canSSE}
	if tooDeep(body, maxJSONDepth) {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "parse error: JSON nested deeper than %d levels", maxJSONDepth))
		return
	}
	if !utf8.Valid(body) {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "parse error: the body is not valid UTF-8"))
		return
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "JSON-RPC batches are not supported; send one message per request"))
		return
	}
	if err := decodeJSON(body, &c.req); err != nil {
		if json.Valid(body) { // JSON, but not a request object
			c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "invalid request: %v", err))
			return
		}
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeParseError, "parse error: %v", err))
		return
	}
	if name, dup := duplicateMember(body); dup {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "member %q appears twice (names are compared without case)", clip(name)))
		return
	}
	if !validID(c.req.ID) {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "id must be a string or a number"))
		return
	}
	c.rw.id = c.req.ID
	if c.req.JSONRPC != jsonrpc.Version {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, `"jsonrpc" must be "2.0"`))
		return
	}
	if len(c.req.Params) > 0 && !bytes.Equal(c.req.Params, []byte("null")) {
		if err := decodeJSON(c.req.Params, &c.params); err != nil {
			c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params: %v", err))
			return
		}
		// Params are forwarded as they came: a repeated member could be
		// read here as one tool and by the agent as another.
		if name, dup := duplicateMember(c.req.Params); dup {
			c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params member %q appears twice (names are compared without case)", clip(name)))
			return
		}
	}

	header := r.Header.Get(headerProtocolVersion)
	c.modern = modernHeader(header) || (c.params.Meta != nil && c.params.Meta.ProtocolVersion != "")
	c.rw.modern = c.modern
	if c.modern {
		if !g.acceptModern(c, header) {
			return
		}
		c.ctx = expertagent.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID,
			SessionID: "tok-" + tok.ID, EntityType: entityType, EntityID: entityID}
		c.minLog = -1
		if c.params.Meta != nil && c.params.Meta.LogLevel != "" {
			c.minLog = logLevelIndex(c.params.Meta.LogLevel)
		}
	} else {
		if c.req.Method != "initialize" {
			if !g.acceptLegacy(c, header) {
				return
			}
			c.ctx = expertagent.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID,
				SessionID: c.sess.key, EntityType: entityType, EntityID: entityID}
			c.sess.mu.Lock()
			if c.sess.logLevel >= 0 {
				c.minLog = c.sess.logLevel
			}
			c.sess.mu.Unlock()
		}
	}

	if c.req.Method == "" {
		// A response from the client (to an agent's request) or junk.
		if len(c.req.ID) > 0 && (c.req.Result != nil || c.req.Error != nil) {
			g.clientResponse(c)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "no method"))
		return
	}
	if len(c.req.ID) == 0 {
		g.notification(c)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	g.dispatch(c)
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
func (g *Gateway) entity(w http.ResponseWriter, r *http.Request, tok acl.Token) (string, string, bool) {
	vars := mux.Vars(r)
	et, eid := vars["entityType"], vars["entityId"]
	if et == "" && eid == "" {
		et, eid = expertagent.NoEntity, expertagent.NoEntity
	} else {
		for _, v := range []string{et, eid} {
			if err := acl.ValidateLevel(v); err != nil || v == expertagent.NoEntity {
				g.refuse(w, r, http.StatusBadRequest, "invalid_entity", "entity type and id must match ^[A-Za-z0-9_-]{1,128}$ (and not be \"_\")")
				return "", "", false
			}
		}
	}
	if !tok.AllowsEntity(acl.Entity{Type: et, ID: eid}) {
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
func (g *Gateway) acceptModern(c *call, header string) bool {
	rw := c.rw
	if header == "" {
		rw.error(http.StatusBadRequest, jsonrpc.NewError(codeHeaderMismatch, "missing MCP-Protocol-Version header"))
		return false
	}
	m := c.params.Meta
	if m == nil || m.ProtocolVersion == "" || len(m.ClientCapabilities) == 0 {
		if len(c.req.ID) == 0 {
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
	if len(c.req.ID) > 0 {
		if msg := checkStandardHeaders(c.httpReq.Header, c.req.Method, c.params.Name); msg != "" {
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
func (g *Gateway) acceptLegacy(c *call, header string) bool {
	id := c.httpReq.Header.Get(headerSessionID)
	if id == "" {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "missing %s header: initialize first", headerSessionID))
		return false
	}
	s, err := g.sessions.lookup(id, c.tok.UserID, c.tok.ID)
	if err == nil {
		err = g.sessions.checkShared(c.httpReq.Context(), s) // ended on another replica?
	}
	if err != nil {
		g.noteRefusal(c.httpReq, http.StatusNotFound, "unknown_session") // counted and audited
		c.rw.error(http.StatusNotFound, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "%v: initialize a new session", err))
		return false
	}
	if header != "" && header != s.version {
		c.rw.error(http.StatusBadRequest, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"MCP-Protocol-Version %q differs from the session's %q", header, s.version))
		return false
	}
	c.sess = s
	return true
}

func (g *Gateway) deleteSession(w http.ResponseWriter, r *http.Request) {
	if modernHeader(r.Header.Get(headerProtocolVersion)) {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the stateless protocol has no sessions to delete")
		return
	}
	tok, _, _ := acl.TokenFrom(r.Context())
	id := r.Header.Get(headerSessionID)
	if id == "" {
		writeError(w, http.StatusBadRequest, "missing_session", "missing "+headerSessionID+" header")
		return
	}
	s, err := g.sessions.lookup(id, tok.UserID, tok.ID)
	if err == nil {
		err = g.sessions.checkShared(r.Context(), s)
	}
	if err != nil {
		g.refuse(w, r, http.StatusNotFound, "unknown_session", err.Error())
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
func (g *Gateway) notification(c *call) {
	switch c.req.Method {
	case "notifications/cancelled":
		// On a legacy session the client cancels a request it sent on
		// another POST; the gateway ends that request's agent call, which
		// sends notifications/cancelled on to the agent. (On the 2026
		// wire, closing the request's stream is the cancellation.)
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if c.sess != nil && json.Unmarshal(c.req.Params, &p) == nil && len(p.RequestID) > 0 {
			c.sess.cancel(string(p.RequestID))
		}
	}
}

// clientResponse routes a client's answer to a server-to-client request
// (an agent's need for input) to the request waiting for it.
func (g *Gateway) clientResponse(c *call) {
	if c.sess == nil {
		return
	}
	var id string
	if json.Unmarshal(c.req.ID, &id) != nil {
		return // ids the gateway sends are strings
	}
	r := clientResponse{Result: c.req.Result}
	if len(c.req.Error) > 0 {
		r.Error = &jsonrpc.Error{}
		if json.Unmarshal(c.req.Error, r.Error) != nil {
			r.Error = jsonrpc.NewError(jsonrpc.CodeInternalError, "malformed error from the client")
		}
	}
	if !c.sess.deliver(id, r) {
		g.requestLogger(c.httpReq).WithField("id", id).Debug("client response for no waiting request")
	}
}

// dispatch serves one request by method.
func (g *Gateway) dispatch(c *call) {
	if g.opts.Observer != nil {
		start := time.Now()
		defer func() { g.opts.Observer.Request(observedMethod(c.req.Method), time.Since(start)) }()
	}
	switch c.req.Method {
	case "initialize":
		if c.modern {
			g.methodNotFound(c)
			return
		}
		g.initialize(c)
	case "server/discover":
		if !c.modern {
			g.methodNotFound(c)
			return
		}
		g.discover(c)
	case "ping":
		if c.modern {
			g.methodNotFound(c)
			return
		}
		c.rw.result([]byte(`{}`))
	case "logging/setLevel":
		if c.modern {
			g.methodNotFound(c)
			return
		}
		lv := logLevelIndex(c.params.Level)
		if lv < 0 {
			c.rw.error(http.StatusOK, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown log level %q", c.params.Level))
			return
		}
		c.sess.mu.Lock()
		c.sess.logLevel = lv
		c.sess.mu.Unlock()
		c.rw.result([]byte(`{}`))
	case "tools/list":
		g.toolsList(c)
	case "tools/call":
		if n := c.params.Name; n != "" && !mcp.ValidName(n) && c.tok.HasScope(acl.ScopeToolsCall) {
			// No tool has such a name: answered without asking the agents
			// for their list, and without echoing a name of any size.
			c.rw.error(http.StatusOK, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool %q", clip(n)))
			return
		}
		g.toolsCall(c)
	default:
		if m, ok := agentMethods[c.req.Method]; ok {
			g.passThrough(c, m)
			return
		}
		g.methodNotFound(c)
	}
}

func (g *Gateway) methodNotFound(c *call) {
	status := http.StatusOK
	if c.modern {
		status = http.StatusNotFound
	}
	c.rw.error(status, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method %q not found", clip(c.req.Method)))
}

// Capabilities the endpoint declares. Resources, prompts and completion
// come from the expert agents. The 2026 wire has resource subscriptions only
// through subscriptions/listen, which the gateway does not serve yet.
var (
	capabilitiesJSON       = []byte(`{"tools":{},"resources":{"subscribe":true},"prompts":{},"completions":{},"logging":{}}`)
	modernCapabilitiesJSON = []byte(`{"tools":{},"resources":{},"prompts":{},"completions":{}}`)
)

func (g *Gateway) initialize(c *call) {
	version := c.params.ProtocolVersion
	if !legacyVersion(version) {
		version = version20251125
	}
	caps := c.params.Capabilities
	if !declaresAny(caps) {
		caps = nil // nothing to tell the agents: spares re-encoding params per call
	}
	_, id := g.sessions.create(c.tok.UserID, c.tok.ID, version, caps)
	c.rw.w.Header().Set(headerSessionID, id)
	res := map[string]any{
		"protocolVersion": version,
		"capabilities":    json.RawMessage(capabilitiesJSON),
		"serverInfo":      g.serverInfo,
	}
	if g.opts.Instructions != "" {
		res["instructions"] = g.opts.Instructions
	}
	b, _ := json.Marshal(res)
	c.rw.result(b)
}

// declaresAny reports whether a capabilities object has any member.
func declaresAny(caps json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(caps, &m) == nil && len(m) > 0
}

func (g *Gateway) discover(c *call) {
	b, _ := json.Marshal(map[string]any{
		"supportedVersions": supportedVersions,
		"capabilities":      json.RawMessage(modernCapabilitiesJSON),
		"resultType":        resultTypeComplete,
		"ttlMs":             0,
		"cacheScope":        "private",
		"serverInfo":        g.serverInfo,
		"_meta":             map[string]any{metaServerInfo: g.serverInfo},
	})
	c.rw.result(b)
}

// forbidden answers a request the token may not make: HTTP 403 with a
// JSON-RPC error, so MCP clients see an ordinary error response.
func (g *Gateway) forbidden(c *call, msg string) {
	g.noteRefusal(c.httpReq, http.StatusForbidden, "forbidden")
	c.setOutcome(OutcomeRefused, "forbidden")
	g.requestLogger(c.httpReq).WithField("method", c.req.Method).Info("forbidden: " + msg)
	c.rw.error(http.StatusForbidden, &jsonrpc.Error{Code: codeForbidden, Message: "forbidden: " + msg})
}

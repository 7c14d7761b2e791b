package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/internal/buildinfo"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/store"
)

// Tools over REST, for curl and scripts: POST ToolsPath/{name} calls a
// tool with the body as its arguments, GET ToolsPath lists the tools the
// token sees with the build identity. Both build the request a stateless
// (2026-07-28) MCP request makes and hand it to the same methods
// (handle), so scopes, read-only tokens, agent grants, the agent-tools
// limit, the observers (metrics, audit) and the agent round trip are the
// MCP endpoint's own; this file only maps the answer onto HTTP.

// ToolsPath lists the tools (GET); ToolsPath/{name} calls one (POST).
const ToolsPath = "/api/v1/tools"

// unknownToolMessage is the whole 404 body's message, the same for a tool
// that does not exist and one the token may not see: the answer must not
// tell them apart.
const unknownToolMessage = "no tool of that name is available to this token (GET " + ToolsPath + " lists them)"

// restMeta is the _meta of a stateless request from a client that declares
// no capabilities: a REST caller cannot answer an agent's request for
// input, so agents must not ask it any.
var restMeta = []byte(`"_meta":{"` + metaProtocolVersion + `":"` + version20260728 + `","` + metaClientCapabilities + `":{}}`)

// noStream is the stream of a REST request: nothing goes out ahead of the
// answer (progress and log messages of the agent are dropped).
type noStream struct{}

func (noStream) open() bool       { return false }
func (noStream) send([]byte) bool { return false }

// restRequest builds the request of a stateless tools/call or tools/list
// with params (which must hold restMeta), as post builds it from the wire:
// its context on the bus is the token's, on the plain endpoint.
func (g *Gateway) restRequest(r *http.Request, method string, params []byte) (*request, error) {
	tok, secret, _ := store.TokenFrom(r.Context())
	req := &request{ctx: r.Context(), id: json.RawMessage(strconv.Quote("rest-" + requestIDOf(r.Context()))),
		method: method, params: params, tok: tok, secret: secret, modern: true, minLog: -1, out: noStream{}}
	if err := decodeJSON(params, &req.p); err != nil {
		return nil, err
	}
	req.bus = contract.Context{PlatformID: g.opts.PlatformID, UserID: tok.UserID,
		SessionID: "tok-" + tok.ID, EntityType: contract.NoEntity, EntityID: contract.NoEntity}
	return req, nil
}

// serveTools answers GET ToolsPath: the build identity, and the tools
// tools/list gives the token, all pages, each as listed.
func (g *Gateway) serveTools(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not served on "+ToolsPath+"; use GET (POST "+ToolsPath+"/{name} calls a tool)")
		return
	}
	tok, _, _ := store.TokenFrom(r.Context())
	if _, _, ok := g.entity(w, r, tok); !ok {
		return
	}
	tools := []json.RawMessage{}
	var cursor string
	for {
		params := []byte(`{` + string(restMeta))
		if cursor != "" {
			params = append(params, `,"cursor":`...)
			quoted, _ := json.Marshal(cursor)
			params = append(params, quoted...)
		}
		params = append(params, '}')
		req, err := g.restRequest(r, "tools/list", params)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "cannot build the tools/list request")
			return
		}
		a := g.handle(req)
		if a.err != nil {
			g.writeRESTError(w, r, req, a)
			return
		}
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(a.result, &page); err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "cannot read the tool list")
			return
		}
		tools = append(tools, page.Tools...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": g.serverIdentity(), "tools": tools})
}

// ServerIdentity is the build identity GET ToolsPath gives: serverInfo's
// name and version, and the VCS revision and its commit time the Go
// toolchain recorded in the binary ("" when it recorded none, as in test
// binaries and -buildvcs=false builds).
type ServerIdentity struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Revision string `json:"revision"`
	// BuildTime is the commit time of Revision (vcs.time, RFC 3339): Go
	// records no build clock, so that builds are reproducible.
	BuildTime string `json:"buildTime"`
	// Modified: the work tree had uncommitted changes (vcs.modified).
	Modified bool `json:"modified,omitempty"`
}

func (g *Gateway) serverIdentity() ServerIdentity {
	v := buildinfo.CurrentVCS()
	return ServerIdentity{Name: g.opts.ServerName, Version: g.opts.ServerVersion, Revision: v.Revision, BuildTime: v.Time, Modified: v.Modified}
}

// serveToolCall answers POST ToolsPath/{name}: the body (a JSON object,
// empty meaning {}) is the arguments of a tools/call of name.
func (g *Gateway) serveToolCall(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not served on "+ToolsPath+"/{name}; use POST with the arguments as a JSON object")
		return
	}
	tok, _, _ := store.TokenFrom(r.Context())
	if _, _, ok := g.entity(w, r, tok); !ok {
		return
	}
	name := mux.Vars(r)["name"]
	// The Content-Type is not checked: curl -d sends a form type, and the
	// body is JSON or refused anyway. A browser page of another site cannot
	// send the bearer token, and checkOrigin refuses its Origin.
	body, err := g.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		var netErr net.Error
		switch {
		case errors.As(err, &tooBig):
			g.refuse(w, r, http.StatusRequestEntityTooLarge, "body_too_large", "request body over the limit")
		case errors.As(err, &netErr) && netErr.Timeout():
			writeError(w, http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
		default:
			writeError(w, http.StatusBadRequest, "bad_body", "cannot read the request body")
		}
		return
	}
	args := bytes.TrimSpace(body)
	switch {
	case len(args) == 0:
		args = []byte(`{}`)
	case tooDeep(args, maxJSONDepth-2): // the arguments sit two levels down in params
		writeError(w, http.StatusBadRequest, "invalid_arguments", "the arguments nest deeper than "+strconv.Itoa(maxJSONDepth-2)+" levels")
		return
	case !utf8.Valid(args) || !json.Valid(args) || args[0] != '{':
		writeError(w, http.StatusBadRequest, "invalid_arguments", "the body must be the tool's arguments as a JSON object (or empty for none)")
		return
	}
	// The params a stateless tools/call carries, with the body untouched.
	params := make([]byte, 0, len(args)+len(name)+len(restMeta)+32)
	params = append(params, `{"name":`...)
	quoted, _ := json.Marshal(name) // JSON's escapes, not Go's: a path may hold any text
	params = append(params, quoted...)
	params = append(params, `,"arguments":`...)
	params = append(params, args...)
	params = append(params, ',')
	params = append(params, restMeta...)
	params = append(params, '}')
	req, err := g.restRequest(r, "tools/call", params)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_arguments", "the arguments cannot be decoded: "+err.Error())
		return
	}
	a := g.handle(req)
	switch {
	case a.err != nil:
		g.writeRESTError(w, r, req, a)
	case a.result != nil:
		g.writeRESTResult(w, req, a.result)
	}
	// Neither: the client went away, and nobody is left to answer.
}

// writeRESTError maps a method's error answer onto HTTP, as respond does
// for the MCP endpoint (the same refusals are counted and audited), with
// the API's error body.
func (g *Gateway) writeRESTError(w http.ResponseWriter, r *http.Request, req *request, a answer) {
	e := a.err
	switch a.refusal {
	case refusedForbidden:
		g.noteRefusal(r, http.StatusForbidden, "forbidden")
		if a.needScope != "" {
			w.Header().Set("WWW-Authenticate", g.insufficientScope(r, req.tok, a.needScope))
		}
		writeError(w, http.StatusForbidden, "forbidden", e.Message)
		return
	case refusedRateLimited, refusedTooManySessions:
		g.noteRefusal(r, http.StatusTooManyRequests, "rate_limited")
		w.Header().Set("Retry-After", strconv.Itoa(a.retryAfter))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "rate_limited", "message": e.Message, "retryAfter": a.retryAfter})
		return
	case refusedMissingCapability:
		writeError(w, http.StatusBadRequest, "missing_capability", e.Message+" (a REST caller declares no client capabilities: call the tool over MCP)")
		return
	}
	switch {
	case e.Code == jsonrpc.CodeInvalidParams && req.method == "tools/call" &&
		(req.outcome.reason == "unknown_tool" || !mcp.ValidName(req.p.Name)):
		// Unknown, hidden (another agent's, a scope's) or a name no tool
		// can have: one answer for all.
		writeError(w, http.StatusNotFound, "unknown_tool", unknownToolMessage)
	case e.Code == jsonrpc.CodeInvalidParams:
		writeError(w, http.StatusBadRequest, "invalid_params", e.Message)
	case req.outcome.source == SourceAgent:
		writeError(w, http.StatusBadGateway, "agent_error", e.Message)
	default:
		writeError(w, http.StatusInternalServerError, "tool_failed", e.Message)
	}
}

// writeRESTResult writes a tools/call result: the structured content, or
// the content; a result the tool marked isError goes whole with 422; the
// expert agents' failures (which MCP reports as isError results) get the
// gateway statuses.
func (g *Gateway) writeRESTResult(w http.ResponseWriter, req *request, result []byte) {
	var res struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
		ResultType        string          `json:"resultType"`
	}
	if err := json.Unmarshal(result, &res); err != nil {
		writeError(w, http.StatusBadGateway, "agent_error", "the tool's result is not a JSON object")
		return
	}
	// agentFailure noted why the agents could not serve the call (before
	// the tool was known, when they could not list their tools).
	switch {
	case req.outcome.outcome == OutcomeTimeout:
		writeError(w, http.StatusGatewayTimeout, "agent_timeout", resultText(res.Content))
		return
	case req.outcome.reason == "no_agent":
		writeError(w, http.StatusServiceUnavailable, "no_agent", resultText(res.Content))
		return
	case req.outcome.reason == "agent_gone" || req.outcome.reason == "agent_unreachable":
		writeError(w, http.StatusBadGateway, req.outcome.reason, resultText(res.Content))
		return
	}
	switch {
	case res.ResultType == "input_required":
		writeError(w, http.StatusBadRequest, "input_required", "the tool asks the caller for input, which a REST caller cannot give: call it over MCP")
	case res.IsError:
		writeRaw(w, http.StatusUnprocessableEntity, result)
	case len(res.StructuredContent) > 0 && !bytes.Equal(res.StructuredContent, []byte("null")):
		writeRaw(w, http.StatusOK, res.StructuredContent)
	default:
		content := res.Content
		if len(content) == 0 || bytes.Equal(content, []byte("null")) {
			content = []byte("[]")
		}
		writeJSON(w, http.StatusOK, map[string]json.RawMessage{"content": content})
	}
}

// resultText is the text of a result's first text content block: the
// message of a failure result.
func resultText(content json.RawMessage) string {
	var blocks []struct {
		Type, Text string
	}
	_ = json.Unmarshal(content, &blocks)
	for _, b := range blocks {
		if b.Type == "text" {
			return b.Text
		}
	}
	return "the expert agent could not serve the call"
}

// writeRaw writes b, which is JSON already.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte{'\n'})
}

package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/toolbus/toolbus/jsonrpc"
)

// BareServer is the floor: the echo tool behind a hand-written net/http
// JSON-RPC handler that does only what Streamable HTTP needs (initialize with
// a session id, 202 for notifications, a JSON response for a request, session
// checks; the 2026-07-28 _meta check and server/discover). Nothing a real
// server could skip is skipped, and nothing more is done.
type BareServer struct {
	httpServer
	opts     ServerOptions
	sessions sync.Map // session id -> negotiated protocol version (string)
}

// NewBareServer returns the bare baseline, not started.
func NewBareServer(opts ServerOptions) *BareServer {
	opts = opts.withDefaults("bench-bare")
	b := &BareServer{opts: opts}
	b.httpServer = httpServer{log: opts.Logger, handler: b}
	return b
}

// Start listens on opts.Addr.
func (b *BareServer) Start(ctx context.Context) error { return b.start(ctx, b.opts.Addr) }

var bareServerInfo = map[string]string{"name": "bench-bare", "version": "1"}

var bareTools = json.RawMessage(`[{"name":"echo","description":"Returns its text argument.",` +
	`"inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},` +
	`"annotations":{"readOnlyHint":true}}]`)

type bareResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type callResult struct {
	ResultType string        `json:"resultType,omitempty"`
	Content    []textContent `json:"content"`
	IsError    bool          `json:"isError,omitempty"`
}

func (b *BareServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		b.post(w, r)
	case http.MethodDelete:
		sid := r.Header.Get(headerSessionID)
		if sid == "" {
			http.Error(w, "missing "+headerSessionID, http.StatusBadRequest)
			return
		}
		if _, ok := b.sessions.LoadAndDelete(sid); !ok {
			http.Error(w, "unknown session", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		// No standalone GET stream: clients treat 405 as "none".
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (b *BareServer) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	var msg jsonrpc.Message
	if err := json.Unmarshal(body, &msg); err != nil {
		writeRPC(w, http.StatusBadRequest, bareResponse{Error: jsonrpc.NewError(jsonrpc.CodeParseError, "parse error")})
		return
	}
	version := r.Header.Get(headerProtocolVersion)
	if isModern(version) {
		b.modern(w, &msg, version)
		return
	}
	if msg.Method == "initialize" {
		b.initialize(w, &msg)
		return
	}
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		http.Error(w, "missing "+headerSessionID, http.StatusBadRequest)
		return
	}
	if _, ok := b.sessions.Load(sid); !ok {
		http.Error(w, "unknown session", http.StatusNotFound)
		return
	}
	if !msg.IsRequest() {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch msg.Method {
	case "tools/call":
		b.call(w, &msg, "")
	case "tools/list":
		writeResult(w, msg.ID, map[string]json.RawMessage{"tools": bareTools})
	case "ping":
		writeResult(w, msg.ID, struct{}{})
	default:
		writeRPC(w, http.StatusOK, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %s", msg.Method)})
	}
}

func (b *BareServer) initialize(w http.ResponseWriter, msg *jsonrpc.Message) {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil {
		writeRPC(w, http.StatusOK, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid initialize params")})
		return
	}
	negotiated := ProtocolLegacy
	if slices.Contains(legacyVersions, p.ProtocolVersion) {
		negotiated = p.ProtocolVersion
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	sid := hex.EncodeToString(raw[:])
	b.sessions.Store(sid, negotiated)
	w.Header().Set(headerSessionID, sid)
	writeResult(w, msg.ID, map[string]any{
		"protocolVersion": negotiated,
		"capabilities":    map[string]any{"tools": map[string]any{}},
		"serverInfo":      bareServerInfo,
	})
}

// modern serves a 2026-07-28 request: no session, the _meta protocol version
// must match the header.
func (b *BareServer) modern(w http.ResponseWriter, msg *jsonrpc.Message, version string) {
	if !msg.IsRequest() {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	var p struct {
		Meta struct {
			ProtocolVersion    string          `json:"io.modelcontextprotocol/protocolVersion"`
			ClientCapabilities json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil || p.Meta.ProtocolVersion == "" || p.Meta.ClientCapabilities == nil {
		writeRPC(w, http.StatusBadRequest, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(jsonrpc.CodeInvalidParams, "params._meta with protocolVersion and clientCapabilities is required")})
		return
	}
	if p.Meta.ProtocolVersion != version {
		writeRPC(w, http.StatusBadRequest, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(-32020, "header and _meta protocol versions differ")})
		return
	}
	if version != ProtocolModern {
		writeRPC(w, http.StatusBadRequest, bareResponse{ID: msg.ID, Error: &jsonrpc.Error{Code: -32022, Message: "unsupported protocol version",
			Data: json.RawMessage(`{"supported":["2026-07-28","2025-11-25","2025-06-18"],"requested":` + string(mustJSON(version)) + `}`)}})
		return
	}
	switch msg.Method {
	case "tools/call":
		b.call(w, msg, "complete")
	case "tools/list":
		writeResult(w, msg.ID, map[string]any{"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "tools": bareTools})
	case "server/discover":
		writeResult(w, msg.ID, map[string]any{
			"resultType": "complete", "ttlMs": 0, "cacheScope": "public",
			"supportedVersions": []string{ProtocolModern, "2025-11-25", "2025-06-18"},
			"capabilities":      map[string]any{"tools": map[string]any{}},
			"_meta":             map[string]any{metaServerInfo: bareServerInfo},
		})
	default:
		writeRPC(w, http.StatusNotFound, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %s", msg.Method)})
	}
}

func (b *BareServer) call(w http.ResponseWriter, msg *jsonrpc.Message, resultType string) {
	var p struct {
		Name      string `json:"name"`
		Arguments struct {
			Text *string `json:"text"`
		} `json:"arguments"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil {
		writeRPC(w, http.StatusOK, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid params")})
		return
	}
	if p.Name != EchoTool {
		writeRPC(w, http.StatusOK, bareResponse{ID: msg.ID, Error: jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool: %s", p.Name)})
		return
	}
	if p.Arguments.Text == nil {
		writeResult(w, msg.ID, callResult{ResultType: resultType, IsError: true,
			Content: []textContent{{Type: "text", Text: "arguments.text: required string"}}})
		return
	}
	writeResult(w, msg.ID, callResult{ResultType: resultType, Content: []textContent{{Type: "text", Text: *p.Arguments.Text}}})
}

func writeResult(w http.ResponseWriter, id json.RawMessage, result any) {
	writeRPC(w, http.StatusOK, bareResponse{ID: id, Result: result})
}

func writeRPC(w http.ResponseWriter, status int, resp bareResponse) {
	resp.JSONRPC = jsonrpc.Version
	data, err := json.Marshal(resp)
	if err != nil {
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		return []byte("null")
	}
	return data
}

package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/jsonrpc"
)

// MCP names the fixture reads or answers with.
const (
	methodToolsCall  = "tools/call"
	methodPromptsGet = "prompts/get"

	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaLogLevel           = "io.modelcontextprotocol/logLevel"

	// CodeMissingClientCapability is MCP's MissingRequiredClientCapability
	// error (2026-07-28): the request needs a client capability the client
	// did not declare. data.requiredCapabilities names it.
	CodeMissingClientCapability = -32021
)

// requestParams are the params of tools/call and prompts/get, as far as
// the fixture reads them.
type requestParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// InputResponses and RequestState are the MRTR retry members
	// (SEP-2322); raw, because their shape is checked, not trusted.
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   json.RawMessage `json:"requestState"`
	Meta           json.RawMessage `json:"_meta"`
}

// decodeParams decodes raw params (absent = {}) into v; a failure is the
// JSON-RPC error -32602.
func decodeParams(method string, raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s: params must be a JSON object", method)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s: params: %v", method, err)
	}
	return nil
}

// requestMeta is what the fixture reads from params._meta.
type requestMeta struct {
	caps     capabilities
	logLevel string // "" = the client set none
}

// parseMeta reads params._meta. Members of the wrong type count as absent:
// the gateway validates _meta for 2026 clients, and a legacy client's
// capabilities come from its session.
func parseMeta(raw json.RawMessage) requestMeta {
	var m struct {
		Caps     json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
		LogLevel json.RawMessage `json:"io.modelcontextprotocol/logLevel"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return requestMeta{}
	}
	var out requestMeta
	_ = json.Unmarshal(m.Caps, &out.caps.declared)
	var lvl string
	if json.Unmarshal(m.LogLevel, &lvl) == nil && logSeverity(lvl) >= 0 {
		out.logLevel = lvl
	}
	return out
}

// capabilities are the client capabilities a request declares. Servers
// must not infer any from earlier requests: each request says what it can.
type capabilities struct {
	declared map[string]json.RawMessage
}

// object reports whether capability name is declared as a JSON object
// (the schema's only form; null or a scalar declares nothing).
func (c capabilities) object(name string) (map[string]json.RawMessage, bool) {
	raw := bytes.TrimSpace(c.declared[name])
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}

// sampling reports whether the client can answer sampling/createMessage.
func (c capabilities) sampling() bool { _, ok := c.object("sampling"); return ok }

// roots reports whether the client can answer roots/list.
func (c capabilities) roots() bool { _, ok := c.object("roots"); return ok }

// formElicitation reports whether the client can answer a form-mode
// elicitation/create: "elicitation": {} (form, for compatibility) or one
// that lists "form"; a client that lists only "url" cannot.
func (c capabilities) formElicitation() bool {
	e, ok := c.object("elicitation")
	if !ok {
		return false
	}
	_, form := e["form"]
	_, url := e["url"]
	return form || !url
}

// canAnswer reports whether the client declared what an input request of
// method needs.
func (c capabilities) canAnswer(method string) bool {
	switch method {
	case methodSampling:
		return c.sampling()
	case methodElicit:
		return c.formElicitation()
	case methodRoots:
		return c.roots()
	}
	return false
}

// capabilityOf is the client capability an input request of method needs.
func capabilityOf(method string) string {
	switch method {
	case methodSampling:
		return "sampling"
	case methodElicit:
		return "elicitation"
	case methodRoots:
		return "roots"
	}
	return method
}

// missingCapability is the JSON-RPC error -32021 naming the client
// capabilities a request needs and the client did not declare, as
// {"requiredCapabilities":{"sampling":{}}} (an object of capability
// objects, as the schema defines it).
func missingCapability(what string, names ...string) *jsonrpc.Error {
	req := make(map[string]struct{}, len(names))
	for _, n := range names {
		req[n] = struct{}{}
	}
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": req})
	return &jsonrpc.Error{
		Code:    CodeMissingClientCapability,
		Message: fmt.Sprintf("%s needs client capabilities the client did not declare: %v", what, names),
		Data:    data,
	}
}

// logLevels are MCP's logging levels in increasing severity.
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// logSeverity is the index of level in logLevels, -1 if it is none.
func logSeverity(level string) int {
	for i, l := range logLevels {
		if l == level {
			return i
		}
	}
	return -1
}

package platformtools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/toolbus/toolbus/mcp"
)

// Names of the built-in tools. Scripts and docs rely on platform_whoami.
const (
	ToolWhoami   = "platform_whoami"
	ToolAgents   = "platform_agents"
	ToolContexts = "platform_contexts"
	ToolEcho     = "platform_echo"
)

const echoInput = `{"type":"object","properties":{"text":{"type":"string","description":"what to send back"}},"required":["text"],"additionalProperties":false}`

// noArguments is the input schema of a tool that takes none.
const noArguments = `{"type":"object","properties":{},"additionalProperties":false}`

const whoamiOutput = `{
	"type": "object",
	"properties": {
		"user": {"type": "string"},
		"tokenId": {"type": "string"},
		"scopes": {"type": "array", "items": {"type": "string"}},
		"readOnly": {"type": "boolean"},
		"entities": {"type": "array", "items": {
			"type": "object",
			"properties": {"type": {"type": "string"}, "id": {"type": "string"}},
			"required": ["type", "id"]
		}},
		"expiresAt": {"type": ["string", "null"], "format": "date-time"}
	},
	"required": ["user", "tokenId", "scopes", "readOnly", "entities", "expiresAt"]
}`

const agentsOutput = `{
	"type": "object",
	"properties": {
		"agents": {"type": "array", "items": {
			"type": "object",
			"properties": {
				"agent": {"type": "string"},
				"clientId": {"type": "string"},
				"name": {"type": "string"},
				"version": {"type": "string"},
				"online": {"type": "boolean"},
				"since": {"type": "string", "format": "date-time"}
			},
			"required": ["clientId", "name", "version", "online", "since"]
		}},
		"tools": {"type": "array", "items": {
			"type": "object",
			"properties": {
				"name": {"type": "string"},
				"title": {"type": "string"},
				"description": {"type": "string"}
			},
			"required": ["name"]
		}},
		"toolsError": {"type": "string"}
	},
	"required": ["agents"]
}`

const contextsOutput = `{
	"type": "object",
	"properties": {
		"contexts": {"type": "array", "items": {
			"type": "object",
			"properties": {
				"platformId": {"type": "string"},
				"sessionId": {"type": "string"},
				"entityType": {"type": "string"},
				"entityId": {"type": "string"},
				"lastUsed": {"type": "string", "format": "date-time"}
			},
			"required": ["platformId", "sessionId", "entityType", "entityId", "lastUsed"]
		}}
	},
	"required": ["contexts"]
}`

// Builtins returns the built-in tools, each a GET of one endpoint of the
// platform REST API (API), injected with the caller's token.
func Builtins() []Tool {
	return []Tool{
		{
			Tool: mcp.Tool{
				Name:         ToolWhoami,
				Title:        "Who am I",
				Description:  "Shows the token you are calling with: its user, ID, scopes, read-only flag, entity narrowing and expiry. Takes no arguments.",
				InputSchema:  json.RawMessage(noArguments),
				OutputSchema: json.RawMessage(whoamiOutput),
				Annotations:  readOnlyTool("Who am I"),
			},
			Handler: getEndpoint(PathWhoami),
		},
		{
			Tool: mcp.Tool{
				Name:         ToolAgents,
				Title:        "Expert agents",
				Description:  "Lists the expert agent instances connected to the platform (online or not, since when) and the tools they serve: those of the agents your token may use. Takes no arguments.",
				InputSchema:  json.RawMessage(noArguments),
				OutputSchema: json.RawMessage(agentsOutput),
				Annotations:  readOnlyTool("Expert agents"),
			},
			Handler: getEndpoint(PathAgents),
		},
		{
			Tool: mcp.Tool{
				Name:         ToolContexts,
				Title:        "My contexts",
				Description:  "Lists your active contexts on this gateway (session and entity of each conversation with the expert agents), most recently used first. Takes no arguments.",
				InputSchema:  json.RawMessage(noArguments),
				OutputSchema: json.RawMessage(contextsOutput),
				Annotations:  readOnlyTool("My contexts"),
			},
			Handler: getEndpoint(PathContexts),
		},
		{
			Tool: mcp.Tool{
				Name:        ToolEcho,
				Title:       "Echo",
				Description: "Returns the text you give it: a quick check that the gateway answers, and the trivial tool its benchmarks call.",
				InputSchema: json.RawMessage(echoInput),
				Annotations: readOnlyTool("Echo"),
			},
			Handler: func(_ context.Context, call *Call) (*mcp.CallToolResult, error) {
				var a struct {
					Text string `json:"text"`
				}
				if err := call.Bind(&a); err != nil {
					return nil, err
				}
				return mcp.TextResult(a.Text), nil
			},
		},
	}
}

// ToolScopes are the scopes the built-in tools declare (Tool.Scope), sorted:
// a token may carry them beside store.BuiltinScopes.
func ToolScopes() []string {
	var out []string
	for _, t := range Builtins() {
		if t.Scope != "" && !slices.Contains(out, t.Scope) {
			out = append(out, t.Scope)
		}
	}
	slices.Sort(out)
	return out
}

// Register adds the built-in tools to r.
func Register(r *Registry) error {
	for _, t := range Builtins() {
		if err := r.Add(t); err != nil {
			return err
		}
	}
	return nil
}

func readOnlyTool(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: new(true), DestructiveHint: new(false), IdempotentHint: new(true), OpenWorldHint: new(false)}
}

// getEndpoint returns a handler that GETs path by injection and returns the
// endpoint's JSON as text plus structuredContent, or, on a non-2xx status,
// an isError result with the endpoint's error.
func getEndpoint(path string) Handler {
	return func(ctx context.Context, call *Call) (*mcp.CallToolResult, error) {
		resp, err := call.Inject(ctx, http.MethodGet, path, nil)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		if !resp.OK() {
			e := resp.APIError()
			return mcp.ErrorResult("%s: GET %s refused with HTTP %d: %s: %s", call.Name, path, resp.Status, e.Code, e.Message), nil
		}
		return mcp.JSONResult(json.RawMessage(resp.Body)), nil
	}
}

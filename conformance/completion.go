package conformance

import (
	"context"
	"strings"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
)

// maxCompletionValues is MCP's limit on completion.values.
const maxCompletionValues = 100

// completionCandidates are the values offered per prompt argument.
var completionCandidates = map[string]map[string][]string{
	"test_prompt_with_arguments": {
		"arg1": {"test", "test-value-1", "test-value-2", "example"},
		"arg2": {"test", "sample", "sample-value"},
	},
	"test_prompt_with_embedded_resource": {
		"resourceUri": {StaticTextURI, StaticBinaryURI, WatchedURI},
	},
}

// templateCandidates are the values offered per variable of TemplateURI.
var templateCandidates = map[string][]string{"id": {"1", "2", "3", "123"}}

type completeParams struct {
	Ref struct {
		Type string `json:"type"`
		Name string `json:"name"`
		URI  string `json:"uri"`
	} `json:"ref"`
	Argument struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"argument"`
}

type completeResult struct {
	Completion struct {
		Values  []string `json:"values"`
		Total   int      `json:"total"`
		HasMore bool     `json:"hasMore"`
	} `json:"completion"`
}

// complete serves completion/complete: the candidates of a prompt argument
// or template variable that start with the typed value (ignoring case). An
// unknown prompt or template, or a malformed request, is -32602; an
// argument with no candidates gets none.
func (f *fixture) complete(_ context.Context, req *expertagent.MethodRequest) (any, error) {
	var p completeParams
	if err := decodeParams(req.Method, req.Params, &p); err != nil {
		return nil, err
	}
	if p.Argument.Name == "" {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "completion/complete: argument.name is required")
	}
	var candidates []string
	switch p.Ref.Type {
	case "ref/prompt":
		if findPrompt(p.Ref.Name) == nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "completion/complete: unknown prompt %q", p.Ref.Name)
		}
		candidates = completionCandidates[p.Ref.Name][p.Argument.Name]
	case "ref/resource":
		if p.Ref.URI != TemplateURI {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "completion/complete: unknown resource template %q", p.Ref.URI)
		}
		candidates = templateCandidates[p.Argument.Name]
	default:
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "completion/complete: ref.type must be ref/prompt or ref/resource, got %q", p.Ref.Type)
	}
	var res completeResult
	res.Completion.Values = []string{}
	prefix := strings.ToLower(p.Argument.Value)
	for _, c := range candidates {
		if strings.HasPrefix(strings.ToLower(c), prefix) {
			res.Completion.Values = append(res.Completion.Values, c)
		}
	}
	res.Completion.Total = len(res.Completion.Values)
	if len(res.Completion.Values) > maxCompletionValues {
		res.Completion.Values, res.Completion.HasMore = res.Completion.Values[:maxCompletionValues], true
	}
	return res, nil
}

package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// promptArgument is one argument of a prompt, as prompts/list lists it.
type promptArgument struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
}

// promptWire is a prompt as prompts/list lists it.
type promptWire struct {
	Name        string           `json:"name"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description"`
	Arguments   []promptArgument `json:"arguments,omitempty"`
}

// promptMessage is one message of a GetPromptResult.
type promptMessage struct {
	Role    string      `json:"role"`
	Content mcp.Content `json:"content"`
}

// getPromptResult is a complete prompts/get result.
type getPromptResult struct {
	Description string          `json:"description,omitempty"`
	Messages    []promptMessage `json:"messages"`
}

// promptFunc renders a prompt from its arguments (the required ones are
// checked before). It returns a *getPromptResult or an *inputRequired.
type promptFunc func(args map[string]string, x *exchange) (any, error)

type fixturePrompt struct {
	promptWire
	render promptFunc
}

// prompts are the fixture's prompts, in the order prompts/list lists them.
var prompts = []fixturePrompt{
	{promptWire{Name: "test_simple_prompt", Title: "Simple Test Prompt", Description: "A prompt without arguments: one user message."},
		func(map[string]string, *exchange) (any, error) {
			return &getPromptResult{Description: "A simple test prompt", Messages: []promptMessage{
				{"user", mcp.TextContent("This is a simple prompt for testing.")}}}, nil
		}},
	{promptWire{Name: "test_prompt_with_arguments", Title: "Prompt With Arguments", Description: "A prompt with two required arguments, both quoted in its message.",
		Arguments: []promptArgument{
			{Name: "arg1", Description: "First test argument", Required: true},
			{Name: "arg2", Description: "Second test argument", Required: true},
		}},
		func(args map[string]string, _ *exchange) (any, error) {
			return &getPromptResult{Description: "A prompt with arguments", Messages: []promptMessage{
				{"user", mcp.TextContent(fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", args["arg1"], args["arg2"]))}}}, nil
		}},
	{promptWire{Name: "test_prompt_with_embedded_resource", Title: "Prompt With Embedded Resource", Description: "A prompt whose first message embeds the resource named by resourceUri.",
		Arguments: []promptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}}},
		func(args map[string]string, _ *exchange) (any, error) {
			return &getPromptResult{Description: "A prompt with an embedded resource", Messages: []promptMessage{
				{"user", mcp.Content{Type: mcp.ContentResource, Resource: &mcp.ResourceContents{
					URI: args["resourceUri"], MimeType: "text/plain", Text: "Embedded resource content for testing."}}},
				{"user", mcp.TextContent("Please process the embedded resource above.")},
			}}, nil
		}},
	{promptWire{Name: "test_prompt_with_image", Title: "Prompt With Image", Description: "A prompt with an image message (a 1x1 PNG) and a text message."},
		func(map[string]string, *exchange) (any, error) {
			return &getPromptResult{Description: "A prompt with an image", Messages: []promptMessage{
				{"user", image()},
				{"user", mcp.TextContent("Please analyze the image above.")},
			}}, nil
		}},
	{promptWire{Name: "test_input_required_result_prompt", Title: "Prompt That Asks For Context",
		Description: "Asks the user for context (input required: elicitation under user_context), then renders a message with it."},
		func(_ map[string]string, x *exchange) (any, error) {
			if a, ok := x.elicitation(KeyUserContext, contextSchema); ok {
				text := "No context given: the user chose to " + a.Action + "."
				if a.accepted() {
					text = "Context: " + a.str("context")
				}
				return &getPromptResult{Description: "A prompt with elicited context", Messages: []promptMessage{
					{"user", mcp.TextContent(text)}}}, nil
			}
			return x.ask(0, nil, map[string]inputRequest{
				KeyUserContext: elicit("What context should the prompt use?", contextSchema)})
		}},
}

func findPrompt(name string) *fixturePrompt {
	for i := range prompts {
		if prompts[i].Name == name {
			return &prompts[i]
		}
	}
	return nil
}

func (f *fixture) listPrompts(context.Context, *expertagent.MethodRequest) (any, error) {
	list := make([]promptWire, len(prompts))
	for i := range prompts {
		list[i] = prompts[i].promptWire
	}
	return struct {
		Prompts []promptWire `json:"prompts"`
	}{list}, nil
}

// getPrompt serves prompts/get: an unknown prompt, a missing required
// argument or a non-string one is -32602.
func (f *fixture) getPrompt(_ context.Context, req *expertagent.MethodRequest) (any, error) {
	var p requestParams
	if err := decodeParams(methodPromptsGet, req.Params, &p); err != nil {
		return nil, err
	}
	pr := findPrompt(p.Name)
	if pr == nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown prompt: %q", p.Name)
	}
	args := map[string]string{}
	if raw := bytes.TrimSpace(p.Arguments); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if raw[0] != '{' || json.Unmarshal(raw, &args) != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "prompts/get %s: arguments must be an object of strings", p.Name)
		}
	}
	for _, a := range pr.Arguments {
		if _, ok := args[a.Name]; a.Required && !ok {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "prompts/get %s: argument %q is required", p.Name, a.Name)
		}
	}
	x, err := f.newExchange(req, methodPromptsGet, p.Name, &p)
	if err != nil {
		return nil, err
	}
	return pr.render(args, x)
}

package conformance

import (
	"context"
	"strings"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// Input request keys. The 2026-07-28 scenarios check the keys of the
// test_input_required_result_* tools and prompt; the legacy tools' keys
// are the fixture's own (the gateway relays whatever keys it gets).
const (
	KeyUserName        = "user_name"        // elicitation: {name}
	KeyCapitalQuestion = "capital_question" // sampling: the capital of France
	KeyClientRoots     = "client_roots"     // roots/list
	KeyConfirm         = "confirm"          // elicitation: {ok}
	KeyGreeting        = "greeting"         // sampling: a greeting
	KeyStep1           = "step1"            // elicitation: {name}
	KeyStep2           = "step2"            // elicitation: {color}
	KeyUserContext     = "user_context"     // elicitation: {context}, the prompt's

	KeyLLMResponse  = "llm_response"  // test_sampling: sampling of the prompt argument
	KeyUserInfo     = "user_info"     // test_elicitation: {username, email}
	KeyDefaultsForm = "defaults_form" // test_elicitation_sep1034_defaults
	KeyEnumForm     = "enum_form"     // test_elicitation_sep1330_enums
)

func objectSchema(required []string, props map[string]*fieldSchema) *elicitSchema {
	return &elicitSchema{Type: "object", Properties: props, Required: required}
}

func intPtr(n int) *int { return &n }

var (
	nameSchema    = objectSchema([]string{"name"}, map[string]*fieldSchema{"name": {Type: "string"}})
	colorSchema   = objectSchema([]string{"color"}, map[string]*fieldSchema{"color": {Type: "string"}})
	confirmSchema = objectSchema([]string{"ok"}, map[string]*fieldSchema{"ok": {Type: "boolean"}})
	contextSchema = objectSchema([]string{"context"}, map[string]*fieldSchema{"context": {Type: "string"}})

	userInfoSchema = objectSchema([]string{"username", "email"}, map[string]*fieldSchema{
		"username": {Type: "string", Description: "User's response"},
		"email":    {Type: "string", Description: "User's email address"},
	})

	// defaultsSchema has a default for every primitive type (SEP-1034).
	defaultsSchema = objectSchema(nil, map[string]*fieldSchema{
		"name":     {Type: "string", Description: "User name", Default: "John Doe"},
		"age":      {Type: "integer", Description: "User age", Default: 30},
		"score":    {Type: "number", Description: "User score", Default: 95.5},
		"status":   {Type: "string", Description: "User status", Enum: []string{"active", "inactive", "pending"}, Default: "active"},
		"verified": {Type: "boolean", Description: "Verification status", Default: true},
	})

	// enumSchema has every enum form of SEP-1330.
	enumSchema = objectSchema(nil, map[string]*fieldSchema{
		"untitledSingle": {Type: "string", Enum: []string{"option1", "option2", "option3"}},
		"titledSingle": {Type: "string", OneOf: []titledValue{
			{"value1", "First Option"}, {"value2", "Second Option"}, {"value3", "Third Option"}}},
		"legacyEnum": {Type: "string", Enum: []string{"opt1", "opt2", "opt3"},
			EnumNames: []string{"Option One", "Option Two", "Option Three"}},
		"untitledMulti": {Type: "array", MinItems: intPtr(1), MaxItems: intPtr(3),
			Items: &fieldSchema{Type: "string", Enum: []string{"option1", "option2", "option3"}}},
		"titledMulti": {Type: "array", MinItems: intPtr(1), MaxItems: intPtr(3),
			Items: &fieldSchema{AnyOf: []titledValue{
				{"value1", "First Option"}, {"value2", "Second Option"}, {"value3", "Third Option"}}}},
	})
)

// mrtrTools are the tools that ask the client for input. The
// test_input_required_result_* ones follow the 2026-07-28 scenarios; the
// legacy ones (test_sampling, test_elicitation, ...) follow the 2025-11-25
// scenarios, which the gateway serves with real server-to-client requests.
func (f *fixture) mrtrTools() []*fixtureTool {
	return []*fixtureTool{
		f.newTool("test_sampling", "Asks the client's model to answer the prompt argument (sampling/createMessage) and returns its answer.",
			`{"type":"object","properties":{"prompt":{"type":"string","description":"The prompt to send to the model"}},"required":["prompt"]}`, f.sampling),
		f.newTool("test_elicitation", "Asks the user for a username and an email address (elicitation/create, with the message argument) and returns the answer.",
			`{"type":"object","properties":{"message":{"type":"string","description":"The message to show the user"}},"required":["message"]}`, f.elicitation),
		f.newTool("test_elicitation_sep1034_defaults", "Asks the user to fill a form whose string, integer, number, enum and boolean fields have defaults (SEP-1034).", "",
			f.formTool(KeyDefaultsForm, "Test defaults for primitives", defaultsSchema)),
		f.newTool("test_elicitation_sep1330_enums", "Asks the user to fill a form with every enum form: untitled, titled (oneOf), legacy (enumNames), multi-select (SEP-1330).", "",
			f.formTool(KeyEnumForm, "Test enum schemas", enumSchema)),

		f.newTool("test_input_required_result_elicitation", "Asks for the caller's name (input required: elicitation under user_name), then greets them.", "", f.irElicitation),
		f.newTool("test_input_required_result_sampling", "Asks the client's model for the capital of France (input required: sampling under capital_question).", "", f.irSampling),
		f.newTool("test_input_required_result_list_roots", "Asks for the client's roots (input required: roots/list under client_roots) and lists them.", "", f.irListRoots),
		f.newTool("test_input_required_result_request_state", "Asks for a confirmation with a sealed requestState, and answers state-ok once the state comes back intact.", "", f.irConfirm),
		f.newTool("test_input_required_result_multiple_inputs", "Asks for a name, a model-written greeting and the client's roots in one round, with a requestState.", "", f.irMultipleInputs),
		f.newTool("test_input_required_result_multi_round", "Asks for a name, then a favourite colour, in two rounds with a different requestState each.", "", f.irMultiRound),
		f.newTool("test_input_required_result_tampered_state", "Asks for a confirmation with an HMAC-sealed requestState; a modified state is refused with -32602.", "", f.irConfirm),
		f.newTool("test_input_required_result_capabilities", "Asks only for the kinds of input the request's declared client capabilities allow.", "", f.irCapabilities),
	}
}

// sampling is test_sampling: one sampling round, its state bound to the
// prompt argument.
func (f *fixture) sampling(_ context.Context, req *expertagent.CallRequest, x *exchange) (any, error) {
	var in struct {
		Prompt *string `json:"prompt"`
	}
	if err := req.Bind(&in); err != nil {
		return nil, err
	}
	if in.Prompt == nil {
		return mcp.ErrorResult("invalid arguments: field %q is required", "prompt"), nil
	}
	if x.round() == 1 {
		if text, ok := x.sampled(KeyLLMResponse); ok {
			return textResult("LLM response: %s", text), nil
		}
	}
	return x.ask(1, nil, map[string]inputRequest{KeyLLMResponse: sample(*in.Prompt, 100)})
}

// elicitation is test_elicitation: one elicitation round with the message
// argument.
func (f *fixture) elicitation(_ context.Context, req *expertagent.CallRequest, x *exchange) (any, error) {
	var in struct {
		Message *string `json:"message"`
	}
	if err := req.Bind(&in); err != nil {
		return nil, err
	}
	if in.Message == nil {
		return mcp.ErrorResult("invalid arguments: field %q is required", "message"), nil
	}
	if x.round() == 1 {
		if a, ok := x.elicitation(KeyUserInfo, userInfoSchema); ok {
			return textResult("User response: %s", a.summary()), nil
		}
	}
	return x.ask(1, nil, map[string]inputRequest{KeyUserInfo: elicit(*in.Message, userInfoSchema)})
}

// formTool asks the user to fill schema under key in one round.
func (f *fixture) formTool(key, message string, schema *elicitSchema) toolFunc {
	return func(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
		if x.round() == 1 {
			if a, ok := x.elicitation(key, schema); ok {
				return textResult("Elicitation completed: %s", a.summary()), nil
			}
		}
		return x.ask(1, nil, map[string]inputRequest{key: elicit(message, schema)})
	}
}

// irElicitation needs no state: the answer is the whole input. Any call
// without a usable user_name answer (none, another key, a malformed one)
// is asked again.
func (f *fixture) irElicitation(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	if a, ok := x.elicitation(KeyUserName, nameSchema); ok {
		if !a.accepted() {
			return textResult("No name given: the user chose to %s.", a.Action), nil
		}
		return textResult("Hello, %s!", a.str("name")), nil
	}
	return x.ask(0, nil, map[string]inputRequest{KeyUserName: elicit("What is your name?", nameSchema)})
}

func (f *fixture) irSampling(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	if text, ok := x.sampled(KeyCapitalQuestion); ok {
		return textResult("The model answered: %s", text), nil
	}
	return x.ask(0, nil, map[string]inputRequest{KeyCapitalQuestion: sample("What is the capital of France?", 100)})
}

func (f *fixture) irListRoots(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	if uris, ok := x.rootsAnswer(KeyClientRoots); ok {
		return textResult("The client exposes %d root(s): %s", len(uris), strings.Join(uris, ", ")), nil
	}
	return x.ask(0, nil, map[string]inputRequest{KeyClientRoots: listRoots()})
}

// irConfirm serves test_input_required_result_request_state and
// _tampered_state: the confirmation counts only with the state of round 1
// (a forged one never gets here: newExchange refuses it).
func (f *fixture) irConfirm(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	if x.round() == 1 {
		if a, ok := x.elicitation(KeyConfirm, confirmSchema); ok {
			return textResult("state-ok: the requestState was verified; confirmation %s", a.summary()), nil
		}
	}
	return x.ask(1, nil, map[string]inputRequest{KeyConfirm: elicit("Please confirm", confirmSchema)})
}

// irMultipleInputs asks for three inputs at once. Answers already given
// travel in the state, so a later round asks only for what is still
// missing.
func (f *fixture) irMultipleInputs(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	got := x.data()
	if x.round() > 0 {
		if _, done := got[KeyUserName]; !done {
			if a, ok := x.elicitation(KeyUserName, nameSchema); ok {
				got[KeyUserName] = a.str("name") // "" when declined
			}
		}
		if _, done := got[KeyGreeting]; !done {
			if text, ok := x.sampled(KeyGreeting); ok {
				got[KeyGreeting] = text
			}
		}
		if _, done := got[KeyClientRoots]; !done {
			if uris, ok := x.rootsAnswer(KeyClientRoots); ok {
				got[KeyClientRoots] = strings.Join(uris, ", ")
			}
		}
	}
	ask := map[string]inputRequest{}
	if _, done := got[KeyUserName]; !done {
		ask[KeyUserName] = elicit("What is your name?", nameSchema)
	}
	if _, done := got[KeyGreeting]; !done {
		ask[KeyGreeting] = sample("Generate a greeting", 50)
	}
	if _, done := got[KeyClientRoots]; !done {
		ask[KeyClientRoots] = listRoots()
	}
	if len(ask) == 0 {
		return textResult("%s %s (client roots: %s)", got[KeyGreeting], got[KeyUserName], got[KeyClientRoots]), nil
	}
	return x.ask(x.round()+1, got, ask)
}

// irMultiRound asks for a name, then a colour: the state of round 2 is a
// new one, carrying the name.
func (f *fixture) irMultiRound(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	askName := map[string]inputRequest{KeyStep1: elicit("Step 1: What is your name?", nameSchema)}
	askColor := map[string]inputRequest{KeyStep2: elicit("Step 2: What is your favorite color?", colorSchema)}
	switch x.round() {
	case 0:
		return x.ask(1, nil, askName)
	case 1:
		a, ok := x.elicitation(KeyStep1, nameSchema)
		if !ok {
			return x.ask(1, nil, askName)
		}
		if !a.accepted() {
			return textResult("Stopped at step 1: the user chose to %s.", a.Action), nil
		}
		return x.ask(2, map[string]string{"name": a.str("name")}, askColor)
	case 2:
		d := x.data()
		a, ok := x.elicitation(KeyStep2, colorSchema)
		if !ok {
			return x.ask(2, d, askColor)
		}
		if !a.accepted() {
			return textResult("Stopped at step 2: the user chose to %s.", a.Action), nil
		}
		return textResult("Multi-round complete: %s likes %s", d["name"], a.str("color")), nil
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "requestState of round %d: this tool has 2 rounds", x.round())
}

// irCapabilities asks for each kind of input the request's capabilities
// allow, and for nothing else. It keeps no state: every call declares its
// capabilities again, so the retry asks the same.
func (f *fixture) irCapabilities(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	caps := x.meta.caps
	ask := map[string]inputRequest{}
	var got []string
	if caps.formElicitation() {
		if a, ok := x.elicitation(KeyUserName, nameSchema); ok {
			got = append(got, "name: "+a.summary())
		} else {
			ask[KeyUserName] = elicit("What is your name?", nameSchema)
		}
	}
	if caps.sampling() {
		if text, ok := x.sampled(KeyGreeting); ok {
			got = append(got, "greeting: "+text)
		} else {
			ask[KeyGreeting] = sample("Generate a short greeting", 50)
		}
	}
	if caps.roots() {
		if uris, ok := x.rootsAnswer(KeyClientRoots); ok {
			got = append(got, "roots: "+strings.Join(uris, ", "))
		} else {
			ask[KeyClientRoots] = listRoots()
		}
	}
	switch {
	case len(ask) > 0:
		return x.ask(0, nil, ask)
	case len(got) == 0:
		return mcp.TextResult("No declared client capability allows an input request; nothing was asked."), nil
	}
	return textResult("Every input the client's capabilities allow was given: %s", strings.Join(got, "; ")), nil
}

package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// elicitSchema is an elicitation's requestedSchema: a flat object of
// primitive fields, as MCP restricts it.
type elicitSchema struct {
	Type       string                  `json:"type"` // always "object"
	Properties map[string]*fieldSchema `json:"properties"`
	Required   []string                `json:"required,omitempty"`
}

// fieldSchema is one field of an elicitation form: a string, number,
// integer or boolean, a single-select enum (enum, oneOf, or the legacy
// enum + enumNames), or a multi-select array of enum values.
type fieldSchema struct {
	Type        string        `json:"type,omitempty"`
	Title       string        `json:"title,omitempty"`
	Description string        `json:"description,omitempty"`
	Default     any           `json:"default,omitempty"`
	Enum        []string      `json:"enum,omitempty"`
	EnumNames   []string      `json:"enumNames,omitempty"`
	OneOf       []titledValue `json:"oneOf,omitempty"`
	AnyOf       []titledValue `json:"anyOf,omitempty"`
	MinItems    *int          `json:"minItems,omitempty"`
	MaxItems    *int          `json:"maxItems,omitempty"`
	Items       *fieldSchema  `json:"items,omitempty"`
}

// titledValue is one choice of a titled enum.
type titledValue struct {
	Const string `json:"const"`
	Title string `json:"title"`
}

// choices are the values a single-select field (or an array's items)
// allows; nil = any string.
func (s *fieldSchema) choices() []string {
	out := slices.Clone(s.Enum)
	for _, v := range s.OneOf {
		out = append(out, v.Const)
	}
	for _, v := range s.AnyOf {
		out = append(out, v.Const)
	}
	return out
}

// check reports why content does not fill the form s; fields s does not
// know are ignored.
func (s *elicitSchema) check(content map[string]json.RawMessage) error {
	for _, name := range s.Required {
		if v, ok := content[name]; !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return fmt.Errorf("required field %q is missing", name)
		}
	}
	for name, raw := range content {
		f := s.Properties[name]
		if f == nil {
			continue
		}
		if err := f.check(raw); err != nil {
			return fmt.Errorf("field %q: %w", name, err)
		}
	}
	return nil
}

// check reports why raw is not a value of field f.
func (f *fieldSchema) check(raw json.RawMessage) error {
	switch f.Type {
	case "string":
		var s string
		if err := strictDecode(raw, &s); err != nil {
			return errors.New("want a string")
		}
		if c := f.choices(); len(c) > 0 && !slices.Contains(c, s) {
			return fmt.Errorf("%q is not one of %q", s, c)
		}
	case "boolean":
		var b bool
		if err := strictDecode(raw, &b); err != nil {
			return errors.New("want a boolean")
		}
	case "number", "integer":
		var n json.Number
		// encoding/json also decodes a quoted number into a json.Number.
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '"' {
			return fmt.Errorf("want a %s, got a string", f.Type)
		}
		if err := strictDecode(raw, &n); err != nil {
			return fmt.Errorf("want a %s", f.Type)
		}
		v, err := n.Float64()
		if err != nil || math.IsInf(v, 0) {
			return fmt.Errorf("want a %s", f.Type)
		}
		if f.Type == "integer" && v != math.Trunc(v) {
			return fmt.Errorf("want an integer, got %s", n)
		}
	case "array":
		var items []string
		if err := strictDecode(raw, &items); err != nil {
			return errors.New("want an array of strings")
		}
		if f.MinItems != nil && len(items) < *f.MinItems || f.MaxItems != nil && len(items) > *f.MaxItems {
			return fmt.Errorf("%d items is out of bounds", len(items))
		}
		if f.Items != nil {
			if c := f.Items.choices(); len(c) > 0 {
				for _, it := range items {
					if !slices.Contains(c, it) {
						return fmt.Errorf("%q is not one of %q", it, c)
					}
				}
			}
		}
	}
	return nil
}

// strictDecode decodes raw into v; null is refused (encoding/json would
// leave v untouched and report no error).
func strictDecode(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return errors.New("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// elicitParams are the params of a form-mode elicitation/create.
type elicitParams struct {
	Message         string        `json:"message"`
	RequestedSchema *elicitSchema `json:"requestedSchema"`
}

// elicit asks the user to fill schema.
func elicit(message string, schema *elicitSchema) inputRequest {
	return inputRequest{Method: methodElicit, Params: elicitParams{Message: message, RequestedSchema: schema}}
}

// elicitAnswer is a checked ElicitResult.
type elicitAnswer struct {
	Action  string                     // accept, decline or cancel
	Content map[string]json.RawMessage // the form, when accepted
}

func (a elicitAnswer) accepted() bool { return a.Action == "accept" }

// str is the string field name of an accepted form ("" if absent).
func (a elicitAnswer) str(name string) string {
	var s string
	_ = json.Unmarshal(a.Content[name], &s)
	return s
}

// summary is "action=<action>" plus, when accepted, ", content=<form>".
func (a elicitAnswer) summary() string {
	if !a.accepted() {
		return "action=" + a.Action
	}
	b, _ := json.Marshal(a.Content) // members sorted: a stable text
	return "action=accept, content=" + string(b)
}

// parseElicitAnswer checks an ElicitResult: an action MCP defines and, for
// accept, content that fills schema.
func parseElicitAnswer(raw json.RawMessage, schema *elicitSchema) (elicitAnswer, error) {
	var r struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if err := strictDecode(raw, &r); err != nil {
		return elicitAnswer{}, fmt.Errorf("not an ElicitResult object: %w", err)
	}
	switch r.Action {
	case "decline", "cancel":
		return elicitAnswer{Action: r.Action}, nil
	case "accept":
	default:
		return elicitAnswer{}, fmt.Errorf("action %q is not accept, decline or cancel", r.Action)
	}
	content := map[string]json.RawMessage{}
	if c := bytes.TrimSpace(r.Content); len(c) > 0 {
		if c[0] != '{' || json.Unmarshal(c, &content) != nil {
			return elicitAnswer{}, errors.New("content is not an object")
		}
	}
	if err := schema.check(content); err != nil {
		return elicitAnswer{}, err
	}
	return elicitAnswer{Action: "accept", Content: content}, nil
}

// samplingParams are the params of sampling/createMessage.
type samplingParams struct {
	Messages  []samplingMessage `json:"messages"`
	MaxTokens int               `json:"maxTokens"`
}

type samplingMessage struct {
	Role    string      `json:"role"`
	Content textContent `json:"content"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// sample asks the client's model to answer prompt.
func sample(prompt string, maxTokens int) inputRequest {
	return inputRequest{Method: methodSampling, Params: samplingParams{
		Messages:  []samplingMessage{{Role: "user", Content: textContent{Type: "text", Text: prompt}}},
		MaxTokens: maxTokens,
	}}
}

// parseSamplingAnswer checks a CreateMessageResult (role, model, and
// content as one block or, since 2025-11-25, an array of blocks) and
// returns its first text.
func parseSamplingAnswer(raw json.RawMessage) (string, error) {
	var r struct {
		Role    string          `json:"role"`
		Model   *string         `json:"model"`
		Content json.RawMessage `json:"content"`
	}
	if err := strictDecode(raw, &r); err != nil {
		return "", fmt.Errorf("not a CreateMessageResult object: %w", err)
	}
	if r.Role != "assistant" && r.Role != "user" {
		return "", fmt.Errorf("role %q is not assistant or user", r.Role)
	}
	if r.Model == nil {
		return "", errors.New("model is missing")
	}
	var blocks []struct {
		Type *string `json:"type"`
		Text *string `json:"text"`
	}
	c := bytes.TrimSpace(r.Content)
	switch {
	case len(c) > 0 && c[0] == '{':
		c = append(append([]byte{'['}, c...), ']')
		fallthrough
	case len(c) > 0 && c[0] == '[':
		if err := json.Unmarshal(c, &blocks); err != nil {
			return "", fmt.Errorf("content: %w", err)
		}
	default:
		return "", errors.New("content is missing")
	}
	if len(blocks) == 0 {
		return "", errors.New("content is empty")
	}
	for _, b := range blocks {
		if b.Type == nil {
			return "", errors.New("a content block has no type")
		}
		if *b.Type == "text" && b.Text == nil {
			return "", errors.New("a text block has no text")
		}
	}
	for _, b := range blocks {
		if *b.Type == "text" {
			return *b.Text, nil
		}
	}
	return "(non-text response)", nil
}

// listRoots asks for the client's roots.
func listRoots() inputRequest { return inputRequest{Method: methodRoots, Params: struct{}{}} }

// parseRootsAnswer checks a ListRootsResult and returns the root URIs.
func parseRootsAnswer(raw json.RawMessage) ([]string, error) {
	var r struct {
		Roots *[]struct {
			URI  string  `json:"uri"`
			Name *string `json:"name"`
		} `json:"roots"`
	}
	if err := strictDecode(raw, &r); err != nil {
		return nil, fmt.Errorf("not a ListRootsResult object: %w", err)
	}
	if r.Roots == nil {
		return nil, errors.New("roots is missing")
	}
	uris := make([]string, 0, len(*r.Roots))
	for _, root := range *r.Roots {
		if root.URI == "" {
			return nil, errors.New("a root has no uri")
		}
		uris = append(uris, root.URI)
	}
	return uris, nil
}

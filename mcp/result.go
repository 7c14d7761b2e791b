package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/internal/jsonenc"
)

// Content types of MCP content objects.
const (
	ContentText         = "text"
	ContentImage        = "image"
	ContentAudio        = "audio"
	ContentResourceLink = "resource_link"
	ContentResource     = "resource" // an embedded resource
)

// Content is one MCP content object of a tool result (or a prompt
// message). Which fields apply depends on Type:
//
//   - "text": Text (always encoded, even when empty, as MCP requires);
//   - "image", "audio": Data (base64) and MimeType;
//   - "resource_link": URI, Name, and optionally Title, Description, MimeType;
//   - "resource": Resource.
//
// Fields that do not apply are left empty and not encoded.
type Content struct {
	Type        string            `json:"type"`
	Text        string            `json:"text,omitempty"`
	Data        string            `json:"data,omitempty"`
	MimeType    string            `json:"mimeType,omitempty"`
	URI         string            `json:"uri,omitempty"`
	Name        string            `json:"name,omitempty"`
	Title       string            `json:"title,omitempty"`
	Description string            `json:"description,omitempty"`
	Resource    *ResourceContents `json:"resource,omitempty"`
}

// ResourceContents is the resource of an embedded-resource content: Text
// for a text resource, Blob (base64) for a binary one.
type ResourceContents struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

// TextContent returns a text content.
func TextContent(s string) Content { return Content{Type: ContentText, Text: s} }

// ImageContent returns an image content holding data, base64-encoded.
func ImageContent(data []byte, mimeType string) Content {
	return Content{Type: ContentImage, Data: base64.StdEncoding.EncodeToString(data), MimeType: mimeType}
}

// MarshalJSON encodes c as an MCP content object.
func (c Content) MarshalJSON() ([]byte, error) { return c.AppendJSON(nil) }

// AppendJSON appends c, encoded as an MCP content object, to b.
func (c Content) AppendJSON(b []byte) ([]byte, error) {
	if c.Type == "" {
		return b, errors.New("content without a type")
	}
	b = append(b, `{"type":`...)
	b = appendString(b, c.Type)
	if c.Type == ContentText || c.Text != "" {
		b = append(b, `,"text":`...)
		b = appendString(b, c.Text)
	}
	for _, f := range [...]struct{ k, v string }{
		{`,"data":`, c.Data}, {`,"mimeType":`, c.MimeType}, {`,"uri":`, c.URI},
		{`,"name":`, c.Name}, {`,"title":`, c.Title}, {`,"description":`, c.Description},
	} {
		if f.v != "" {
			b = append(b, f.k...)
			b = appendString(b, f.v)
		}
	}
	if c.Resource != nil {
		r, err := json.Marshal(c.Resource)
		if err != nil {
			return b, fmt.Errorf("content resource: %w", err)
		}
		b = append(b, `,"resource":`...)
		b = append(b, r...)
	}
	return append(b, '}'), nil
}

func appendString(b []byte, s string) []byte { return jsonenc.AppendString(b, s, false) }

// CallToolResult is the result of a tools/call.
type CallToolResult struct {
	// Content is what the model reads. It is encoded as [] when empty.
	Content []Content
	// StructuredContent, if not nil, must encode as a JSON object; it
	// should conform to the tool's OutputSchema. A json.RawMessage is
	// passed through as is (after a validity check); anything else goes
	// through encoding/json.
	StructuredContent any
	// IsError marks a tool failure the model should see and may recover
	// from (bad input, a failed operation); protocol problems are JSON-RPC
	// errors instead.
	IsError bool
}

// TextResult returns a successful result with one text content.
func TextResult(s string) *CallToolResult {
	return &CallToolResult{Content: []Content{TextContent(s)}}
}

// ErrorResult returns a failed result (IsError) with one text content,
// formatted with fmt.Sprintf. Say what happened and what to do.
func ErrorResult(format string, args ...any) *CallToolResult {
	return &CallToolResult{Content: []Content{TextContent(fmt.Sprintf(format, args...))}, IsError: true}
}

// JSONResult returns a result whose text content is v as JSON and whose
// structuredContent is the same JSON when it is an object (MCP advises both,
// for clients that read only content). v is encoded once; a json.RawMessage
// is used as is (compacted). If v cannot be encoded, the result is an
// isError result saying so.
func JSONResult(v any) *CallToolResult {
	var raw []byte
	if m, ok := v.(json.RawMessage); ok {
		var buf bytes.Buffer
		if err := json.Compact(&buf, m); err != nil {
			return ErrorResult("tool produced invalid JSON: %v", err)
		}
		raw = buf.Bytes()
	} else {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return ErrorResult("tool produced a result that cannot be encoded as JSON: %v", err)
		}
	}
	r := &CallToolResult{Content: []Content{TextContent(string(raw))}}
	if len(raw) > 0 && raw[0] == '{' {
		r.StructuredContent = json.RawMessage(raw)
	}
	return r
}

// MarshalJSON encodes r as an MCP CallToolResult.
func (r *CallToolResult) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil) }

// AppendJSON appends r, encoded as an MCP CallToolResult
// ({"content":[...],"structuredContent":{...},"isError":true}), to b.
// isError is left out when false and structuredContent when nil.
func (r *CallToolResult) AppendJSON(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, `{"content":[`...)
	for i, c := range r.Content {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = c.AppendJSON(b); err != nil {
			return b[:start], fmt.Errorf("content %d: %w", i, err)
		}
	}
	b = append(b, ']')
	if r.StructuredContent != nil {
		sc, err := StructuredJSON(r.StructuredContent)
		if err != nil {
			return b[:start], err
		}
		b = append(b, `,"structuredContent":`...)
		b = append(b, sc...)
	}
	if r.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, '}'), nil
}

// StructuredJSON returns v as compact-enough JSON for structuredContent,
// which must be an object.
func StructuredJSON(v any) ([]byte, error) {
	var raw []byte
	switch s := v.(type) {
	case json.RawMessage:
		if !json.Valid(s) {
			return nil, errors.New("structuredContent is not valid JSON")
		}
		raw = bytes.TrimSpace(s)
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("structuredContent: %w", err)
		}
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("structuredContent must be a JSON object")
	}
	return raw, nil
}

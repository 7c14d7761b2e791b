package expertagent

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// Content types of MCP content objects.
const (
	ContentText         = "text"
	ContentImage        = "image"
	ContentAudio        = "audio"
	ContentResourceLink = "resource_link"
	ContentResource     = "resource" // an embedded resource
)

// Content is one MCP content object of a tool result. Which fields apply
// depends on Type:
//
//   - "text": Text;
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

// MarshalJSON encodes c; a text content always carries its "text" member,
// even when empty, because MCP requires it.
func (c Content) MarshalJSON() ([]byte, error) {
	if c.Type == ContentText {
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{c.Type, c.Text})
	}
	type plain Content // no MarshalJSON: no recursion
	return json.Marshal(plain(c))
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

// CallResult is the result of a tools/call, as MCP defines it.
type CallResult struct {
	// Content is what the model reads. When it is empty and
	// StructuredContent is set, the Agent adds one text content holding
	// StructuredContent as JSON, as MCP advises for clients that only read
	// content.
	Content []Content
	// StructuredContent is the structured result; it must conform to the
	// tool's OutputSchema when the tool declares one. It is encoded with
	// encoding/json.
	StructuredContent any
	// IsError marks a tool failure the model should see (bad input, a
	// failed operation); protocol problems are JSON-RPC errors instead.
	IsError bool
}

// Text returns a successful result with one text content.
func Text(s string) *CallResult { return &CallResult{Content: []Content{TextContent(s)}} }

// Errorf returns a failed result (IsError) with one text content.
func Errorf(format string, args ...any) *CallResult {
	return &CallResult{Content: []Content{TextContent(fmt.Sprintf(format, args...))}, IsError: true}
}

// agentCallResultWire is a tools/call result on the wire: content is always
// an array, never null.
type agentCallResultWire struct {
	Content           []Content       `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
}

// encode returns r as a tools/call result.
func (r *CallResult) encode() (json.RawMessage, error) {
	if b, ok := r.appendText(nil); ok {
		return b, nil
	}
	w := agentCallResultWire{Content: r.Content, IsError: r.IsError}
	if r.StructuredContent != nil {
		sc, err := json.Marshal(r.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("encode structuredContent: %w", err)
		}
		w.StructuredContent = sc
		if len(w.Content) == 0 {
			w.Content = []Content{TextContent(string(sc))}
		}
	}
	if w.Content == nil {
		w.Content = []Content{}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode tool result: %w", err)
	}
	return b, nil
}

// appendText appends r's encoding when r is the common case: text contents
// only, no structured content. It writes what json.Marshal writes for
// agentCallResultWire, byte for byte, without reflection. ok is false for
// anything else (encode then uses encoding/json).
func (r *CallResult) appendText(dst []byte) (_ []byte, ok bool) {
	if r.StructuredContent != nil {
		return dst, false
	}
	n := len(`{"content":[],"isError":true}`)
	for i := range r.Content {
		c := &r.Content[i]
		if c.Type != ContentText {
			return dst, false
		}
		n += len(`{"type":"text","text":""},`) + len(c.Text) + 8
	}
	if dst == nil {
		dst = make([]byte, 0, n)
	}
	dst = append(dst, `{"content":[`...)
	for i := range r.Content {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"text","text":`...)
		dst = appendJSONString(dst, r.Content[i].Text)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if r.IsError {
		dst = append(dst, `,"isError":true`...)
	}
	return append(dst, '}'), true
}

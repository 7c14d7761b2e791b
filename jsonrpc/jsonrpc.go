// Package jsonrpc holds the JSON-RPC 2.0 message shape that MCP uses, shared
// by the HTTP endpoint and the MQTT contract. Params, results and ids stay raw
// JSON: toolbus is a proxy and passes what it forwards through untouched.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Version is the value of the "jsonrpc" member of every message.
const Version = "2.0"

// Standard JSON-RPC error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Message is any JSON-RPC 2.0 message: a request (ID and Method), a
// notification (Method, no ID), or a response (ID and Result or Error).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// IsRequest reports whether m expects a response.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) > 0 && !isNull(m.ID) }

// IsNotification reports whether m is a request that expects no response.
func (m *Message) IsNotification() bool { return m.Method != "" && (len(m.ID) == 0 || isNull(m.ID)) }

// IsResponse reports whether m answers a request.
func (m *Message) IsResponse() bool { return m.Method == "" && (m.Result != nil || m.Error != nil) }

func isNull(b json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// Error is the error member of a JSON-RPC response. It implements error so a
// handler can return it and keep its code.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message) }

// NewError returns an Error with a formatted message.
func NewError(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

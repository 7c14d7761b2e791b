// Package mcp holds the MCP types that the agent SDK (package expertagent),
// the gateway and the platform tools share: a tool's definition and
// annotations as tools/list shows them, and the content and result of a
// tools/call. It defines what goes on the wire, not how a tool runs: each
// side pairs a Tool with a handler of its own.
//
// Encoding writes what encoding/json would, without reflection for the
// common shapes, except that <, > and & are not escaped (the output is
// never embedded in HTML; the JSON value is the same).
package mcp

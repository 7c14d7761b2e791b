// Package platformtools holds the tools the gateway defines in Go, beside the
// expert agents' tools that come over MQTT.
//
// A Registry keeps the platform tools with their JSON Schemas (compiled once,
// when a tool is added) and runs them: Registry.Call validates the arguments,
// runs the handler, and returns the MCP CallToolResult as raw JSON for the
// gateway to place under "result".
//
// Platform tools do their work by in-process injection, the Go analog of
// fastify's app.inject(): Call.Inject builds an *http.Request for the
// platform's own REST API, forwards the caller's bearer token, and serves it
// through the same handler (router and auth middleware) that serves curl, so
// the same authentication and permission checks apply, with no network hop.
//
// The package also ships that REST API (API: /api/v1/whoami, /api/v1/agents,
// /api/v1/contexts) and the built-in tools over it (Register).
package platformtools

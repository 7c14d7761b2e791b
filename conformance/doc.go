// Package conformance is the fixture of the official MCP conformance suite
// (@modelcontextprotocol/conformance) served by an expert agent over MQTT:
// the tools, resources, resource templates, prompts and completions its
// server scenarios call by name, for the requirement sets 2025-11-25 and
// 2026-07-28. Register adds them all to an expertagent.Agent; the command
// cmd/conformance-agent runs that agent. The point is to prove the gateway
// faithful: every scenario passes through the MQTT hop, not through a
// fixture built into the gateway.
//
// Whatever the fixture needs from the client (sampling, elicitation, roots)
// it asks for the 2026-07-28 way, in both eras: an "input required" result
// (SEP-2322, MRTR) that the client answers by calling again with
// inputResponses and the echoed requestState. For clients of the older
// protocol versions the gateway turns those results into real
// server-to-client requests and calls the agent again, so the agent never
// sends requests of its own. requestState is sealed with HMAC-SHA256 and
// bound to the method, tool or prompt, round, caller and arguments; a state
// that fails the check is a JSON-RPC error (-32602). The fixture only asks
// for what the client declared in
// params._meta["io.modelcontextprotocol/clientCapabilities"], and answers
// -32021 (missing required client capability) otherwise.
package conformance

// Package expertagent implements both sides of toolbus's MQTT contract (v1):
//
//   - the gateway side, a Requester that sends MCP requests to expert agents
//     on per-context topics and waits for their answers, with a subscription
//     LRU, a pending-call table, deadlines and agent presence;
//   - the agent side, a small SDK (Agent) to write an expert agent in Go: an
//     MCP server whose transport is MQTT.
//
// Topics, one level each:
//
//	ff/v1/mcp/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/req   gateway -> agents
//	ff/v1/mcp/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/res   agents -> gateway
//	ff/v1/mcp/agents/<clientId>/status                                        agent presence (retained)
//
// Payloads are Envelopes around JSON-RPC 2.0 messages; see docs/protocol.md.
package expertagent

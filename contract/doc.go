// Package contract is toolbus's MQTT contract (v1), the part the gateway's
// requester (package requester) and the expert-agent SDK (package
// expertagent) share: the topics of a context, the envelope around every
// JSON-RPC message, and agent presence.
//
// Topics, one level each:
//
//	ff/v1/mcp/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/req   gateway -> agents
//	ff/v1/mcp/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/res   agents -> gateway
//	ff/v1/mcp/agents/<clientId>/status                                        agent presence (retained)
//
// docs/protocol.md is the contract's full text.
package contract

// Package contract is toolbus's MQTT contract (v2), the part the gateway's
// requester (package requester) and the expert-agent SDK (package
// expertagent) share: the topics of a context, the envelope around every
// JSON-RPC message, and agent presence.
//
// Topics, one level each; <agent> is the agent's MQTT username, <instance>
// one running copy's client ID ("_" in a request: any instance of the pool):
//
//	ff/v2/mcp/<agent>/<instance>/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/req   gateway -> agent
//	ff/v2/mcp/<agent>/<instance>/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/res   agent -> gateway
//	ff/v2/mcp/<agent>/<instance>/status                                                         presence (retained)
//
// docs/protocol.md is the contract's full text.
package contract

// Package contract is toolbus's MQTT contract (v2), the part the gateway's
// requester (package requester) and the expert-agent SDK (package
// expertagent) share: the topics of a context, the envelope around every
// JSON-RPC message, agent presence, and the validation of topic levels
// (ValidateLevel) that every part of toolbus applies to a value before it
// puts it in a topic.
//
// Topics, one level each; <agent> is the agent's MQTT username, <instance>
// one running copy's client ID ("_" in a request: any instance of the pool):
//
//	ff/v2/mcp/<agent>/<instance>/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/req   gateway -> agent
//	ff/v2/mcp/<agent>/<instance>/<platformId>/<userId>/<sessionId>/<entityType>/<entityId>/res   agent -> gateway
//	ff/v2/mcp/<agent>/<instance>/status                                                         presence (retained)
//
// docs/protocol.md is the contract's full text. The package imports nothing
// of the gateway's (no store, no broker): an agent built on it stays small,
// and expertagent's TestNoGatewayDeps keeps it so.
package contract

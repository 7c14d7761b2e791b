// Package expertagent is the SDK for writing an expert agent in Go: an MCP
// server whose transport is MQTT. An Agent connects to the broker (paho),
// announces its presence, serves the tools added with AddTool and any
// method given to Handle, and replies on its own reply topics as package
// contract (v2) defines them. Tools, contents and results are package
// mcp's types.
//
// The agent's name on the bus is its MQTT username (AgentOptions.Username),
// and each running instance is named by its client ID. Every instance
// logged in with one username is one pool: it shares the requests the
// gateway addresses to any instance ("_"), each served by one instance
// through the shared subscription $share/<username>/..., and each instance
// also gets the requests addressed to its client ID alone:
//
//	ff/v2/mcp/<username>/_/<context>/req            any instance of the pool
//	ff/v2/mcp/<username>/<clientID>/<context>/req   this instance
//	ff/v2/mcp/<username>/<clientID>/<context>/res   every reply of this instance
//	ff/v2/mcp/<username>/<clientID>/status          its presence (retained; the Last Will says offline)
//
// <context> is the five levels of a contract.Context. A reply names the
// instance that sent it whichever way its request came: the broker lets an
// agent publish replies and presence under its own username and client ID
// only.
package expertagent

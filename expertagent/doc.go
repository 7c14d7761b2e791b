// Package expertagent is the SDK for writing an expert agent in Go: an MCP
// server whose transport is MQTT. An Agent connects to the broker (paho),
// announces its presence, serves the tools added with AddTool and any
// method given to Handle, and replies on the caller's context topics as
// package contract defines them. Tools, contents and results are package
// mcp's types.
package expertagent

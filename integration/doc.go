// Package integration holds end-to-end tests over real sockets: the toolbus
// process, its embedded broker, the reference expert agent as a separate
// process, and (from the MCP endpoint on) the official go-sdk MCP client.
package integration

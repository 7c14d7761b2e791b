// Package bench measures what an MCP tools/call costs through toolbus compared
// with what a user would run instead. It holds the baseline servers (the same
// trivial echo tool on a bare net/http JSON-RPC handler, on mark3labs/mcp-go
// and on the official go-sdk, stateful and stateless), a load generator that
// drives any MCP Streamable HTTP endpoint with many sessions, and the report
// (table with ratios, JSON) that puts them side by side. cmd/toolbus-bench is
// its command line.
//
// Numbers are only comparable within one run on one machine: the harness
// measures every scenario one after another in the same invocation, and by
// default runs each baseline server in a child process so that the CPU time
// and peak RSS of the server and of the load generator are reported apart.
package bench

// Package bridge makes an existing MCP server an expert agent. A Bridge
// runs beside the server (the upstream), speaks MCP to it with the
// official go-sdk client, over stdio (a process the bridge starts) or
// Streamable HTTP, and serves its tools, resources, resource templates,
// prompts and completions on the bus with package expertagent. It connects
// outbound only, so a server on a laptop or behind NAT joins with nothing
// opened inbound.
//
// While a call is open the bridge relays the upstream's progress (by
// progress token) and, when that call is the only one open, its log
// messages; the caller's cancellation becomes notifications/cancelled
// upstream; the upstream's list_changed notifications reach the gateways
// (expertagent.Agent.Changed).
//
// An upstream of the 2026 protocol asks its client for input with "input
// required" results (SEP-2322), which pass through as they are. An older
// upstream sends sampling/createMessage, elicitation/create or roots/list
// requests during a call instead: the bridge holds the upstream's call
// open, answers the bus request with an input required result whose
// requestState names this instance (contract.HoldState), and answers the
// upstream with what the next round brings. Such a request is tied to the
// bus call that is running alone; with several running, the bridge cannot
// tell whose it is and refuses it (the upstream sees one client, the
// bridge); a list, a completion or a held call in flight counts too.
//
// The upstream's lifetime is the agent's: when the process exits or the
// HTTP session ends, calls in flight fail at once, the agent goes offline,
// and the bridge starts the upstream again with a bounded backoff,
// announcing itself once the upstream answers initialize. Upstream
// credentials (HTTP headers, the process's environment) stay in the
// bridge; the caller reaches the upstream only as _meta[CallerMetaKey].
package bridge

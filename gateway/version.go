package gateway

// Protocol versions the endpoint speaks. 2025-06-18 and 2025-11-25 are the
// "legacy" era (initialize, sessions); 2026-07-28 is the stateless era
// (server/discover, per-request _meta, no sessions).
const (
	version20250618 = "2025-06-18"
	version20251125 = "2025-11-25"
	version20260728 = "2026-07-28"
)

// supportedVersions, newest first, as server/discover and the -32022 error list them.
var supportedVersions = []string{version20260728, version20251125, version20250618}

// legacyVersion reports whether v is a legacy version this endpoint speaks.
func legacyVersion(v string) bool { return v == version20250618 || v == version20251125 }

// modernHeader reports whether an MCP-Protocol-Version header value puts a
// request on the stateless (2026) wire: that version or later, or a value
// that is no legacy version at all (it then gets the -32022 answer, which
// lists the versions spoken here).
func modernHeader(v string) bool {
	return v != "" && !legacyVersion(v) && v != "2025-03-26" && v != "2024-11-05"
}

// JSON-RPC error codes of the stateless era (MCP reserves -32020..-32099).
const (
	codeHeaderMismatch     = -32020
	codeMissingCapability  = -32021
	codeUnsupportedVersion = -32022
	codeForbidden          = -32001 // toolbus: the token may not do this (HTTP 403)
	headerSessionID        = "Mcp-Session-Id"
	headerProtocolVersion  = "Mcp-Protocol-Version"
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaLogLevel           = "io.modelcontextprotocol/logLevel"
	metaServerInfo         = "io.modelcontextprotocol/serverInfo"
	resultTypeComplete     = "complete"
)

package bench

// MCP protocol versions and the Streamable HTTP header and _meta names the
// harness speaks.
const (
	// ProtocolLegacy is the newest session-based version (initialize,
	// Mcp-Session-Id).
	ProtocolLegacy = "2025-11-25"
	// ProtocolModern is the stateless version: no initialize, every request
	// carries _meta and the MCP-Protocol-Version, Mcp-Method (and for
	// tools/call Mcp-Name) headers.
	ProtocolModern = "2026-07-28"

	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerMethod          = "Mcp-Method"
	headerName            = "Mcp-Name"

	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	metaServerInfo         = "io.modelcontextprotocol/serverInfo"
)

// isModern reports whether version belongs to the stateless era. Versions
// are dates, so they compare as strings.
func isModern(version string) bool { return version >= ProtocolModern }

// legacyVersions are the session-based versions the bare baseline accepts.
var legacyVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

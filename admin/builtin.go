package admin

import (
	"strings"

	"github.com/toolbus/toolbus/acl"
)

// builtinPrefix starts the IDs of the built-in rules, so that they can
// never be taken for an operator rule's number.
const builtinPrefix = "builtin-"

// builtinRules describe what acl.Policy grants by role in the ff/v2/ tree
// (see the Policy doc in acl/policy.go, which is what enforces them; this
// list only shows them). "L" below is one level matching
// ^[A-Za-z0-9_-]{1,128}$; the filters use "+" where the Policy wants such
// a level, and <own username>, <own client ID> for the identity's own.
var builtinRules = []Rule{
	{ID: builtinPrefix + "platform-req", Role: string(acl.RolePlatform), Access: "write",
		Filter: "ff/v2/mcp/+/+/+/+/+/+/+/req", Description: "gateways publish requests: agent, instance (_ = any of the pool), five context levels, each a plain L"},
	{ID: builtinPrefix + "platform-res", Role: string(acl.RolePlatform), Access: "read",
		Filter: "ff/v2/mcp/+/+/+/+/+/+/+/res", Description: "gateways subscribe to a context's replies only: ff/v2/mcp/+/+/<five plain levels>/res (no other wildcard, no $share)"},
	{ID: builtinPrefix + "platform-presence", Role: string(acl.RolePlatform), Access: "read",
		Filter: "ff/v2/mcp/+/+/status", Description: "gateways watch agent presence"},
	{ID: builtinPrefix + "agent-req", Role: string(acl.RoleExpertAgent), Access: "read",
		Filter: "ff/v2/mcp/<own username>/+/+/+/+/+/+/req", Description: "agents subscribe to their own requests: for the pool (_, plain or as $share/<own username>/...) or for their own client ID"},
	{ID: builtinPrefix + "agent-res", Role: string(acl.RoleExpertAgent), Access: "write",
		Filter: "ff/v2/mcp/<own username>/<own client ID>/+/+/+/+/+/res", Description: "agents publish replies as themselves (each level a plain L)"},
	{ID: builtinPrefix + "agent-presence", Role: string(acl.RoleExpertAgent), Access: "write",
		Filter: "ff/v2/mcp/<own username>/<own client ID>/status", Description: "agents publish their own presence (and its Will)"},
	{ID: builtinPrefix + "probe", Role: "*", Access: "readwrite",
		Filter: "ff/v2/probe/<own username>/+", Description: "every identity's own round-trip probe topics (exact, no wildcard)"},
	{ID: builtinPrefix + "deny-reserved", Role: "*", Access: "none",
		Filter: "ff/v2/# and ff/v1/mcp/#", Description: "nothing else may touch ff/v2/ or the retired ff/v1/mcp/, nor any $ topic; operator rules cannot reach them; a disabled identity may do nothing"},
}

// builtinList returns a copy of the built-in rules, marked as such.
func builtinList() []Rule {
	out := make([]Rule, len(builtinRules))
	for i, r := range builtinRules {
		r.Builtin = true
		out[i] = r
	}
	return out
}

func isBuiltinID(id string) bool { return strings.HasPrefix(id, builtinPrefix) }

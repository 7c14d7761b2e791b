package admin

import (
	"strings"

	"github.com/toolbus/toolbus/acl"
)

// builtinPrefix starts the IDs of the built-in rules, so that they can
// never be taken for an operator rule's number.
const builtinPrefix = "builtin-"

// builtinRules describe what acl.Policy grants by role in the ff/v1/mcp/
// tree (see the Policy doc in acl/policy.go, which is what enforces them;
// this list only shows them). "L" below is one level matching
// ^[A-Za-z0-9_-]{1,128}$; the filters use "+" where the Policy wants such
// a level.
var builtinRules = []Rule{
	{ID: builtinPrefix + "platform-req", Role: string(acl.RolePlatform), Access: "write",
		Filter: acl.ReservedPrefix + "+/+/+/+/+/req", Description: "gateways publish requests (each level a plain L, no wildcard)"},
	{ID: builtinPrefix + "platform-res", Role: string(acl.RolePlatform), Access: "read",
		Filter: acl.ReservedPrefix + "+/+/+/+/+/res", Description: "gateways subscribe to exact response topics only (no wildcard, no $share)"},
	{ID: builtinPrefix + "platform-presence", Role: string(acl.RolePlatform), Access: "read",
		Filter: acl.ReservedPrefix + "agents/+/status", Description: "gateways watch agent presence"},
	{ID: builtinPrefix + "agent-req", Role: string(acl.RoleExpertAgent), Access: "read",
		Filter: acl.ReservedPrefix + "+/+/+/+/+/req", Description: "agents subscribe to requests, plain or as $share/<group>/..."},
	{ID: builtinPrefix + "agent-res", Role: string(acl.RoleExpertAgent), Access: "write",
		Filter: acl.ReservedPrefix + "+/+/+/+/+/res", Description: "agents publish responses (each level a plain L)"},
	{ID: builtinPrefix + "agent-presence", Role: string(acl.RoleExpertAgent), Access: "write",
		Filter: acl.ReservedPrefix + "agents/<own client ID>/status", Description: "agents publish their own presence (and its Will)"},
	{ID: builtinPrefix + "deny-reserved", Role: "*", Access: "none",
		Filter: acl.ReservedPrefix + "#", Description: "nothing else may touch ff/v1/mcp/, nor any $ topic; operator rules cannot reach them; a disabled identity may do nothing"},
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

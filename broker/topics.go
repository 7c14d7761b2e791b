package broker

import "strings"

// mcpPrefix starts the topics of the MQTT contract (v2; package contract,
// which this package does not import, spells them out).
const mcpPrefix = "ff/v2/mcp/"

// isContextTopic reports whether topic is a request or reply topic of the
// MQTT contract, ff/v2/mcp/<agent>/<instance>/<5 context levels>/req or
// .../res, whatever its levels hold.
func isContextTopic(topic string) bool {
	rest, ok := strings.CutPrefix(topic, mcpPrefix)
	if !ok || strings.Count(rest, "/") != 7 {
		return false
	}
	last := rest[strings.LastIndexByte(rest, '/')+1:]
	return last == "req" || last == "res"
}

// replyKey is what a reply topic or reply filter has in common with every
// other reply of its context: the five context levels and "res", after the
// agent and instance levels. ok is false for anything else.
func replyKey(topic string) (key string, ok bool) {
	if !isContextTopic(topic) || !strings.HasSuffix(topic, "/res") {
		return "", false
	}
	rest := topic[len(mcpPrefix):]
	_, rest, _ = strings.Cut(rest, "/") // agent
	_, rest, _ = strings.Cut(rest, "/") // instance
	return rest, true
}

// isReplyFilter reports whether filter is a context's reply filter,
// ff/v2/mcp/+/+/<5 context levels>/res with no other wildcard.
func isReplyFilter(filter string) bool {
	rest, ok := strings.CutPrefix(filter, mcpPrefix+"+/+/")
	return ok && isContextTopic(filter) && strings.HasSuffix(filter, "/res") && !strings.ContainsAny(rest, "+#")
}

// presenceTopic is the presence topic of the agent instance logged in as
// username with this client ID (the same string as contract.PresenceTopic).
func presenceTopic(username, clientID string) string {
	return mcpPrefix + username + "/" + clientID + "/status"
}

// isPresenceTopic reports whether topic has the shape of a presence topic,
// ff/v2/mcp/<agent>/<instance>/status, whatever its levels hold.
func isPresenceTopic(topic string) bool {
	rest, ok := strings.CutPrefix(topic, mcpPrefix)
	return ok && strings.Count(rest, "/") == 2 && strings.HasSuffix(rest, "/status")
}

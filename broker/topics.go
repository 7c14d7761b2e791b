package broker

import (
	"strings"

	"github.com/toolbus/toolbus/acl"
)

// isContextTopic reports whether topic is a request or response topic of the
// MQTT contract, ff/v1/mcp/*/*/*/*/*/req or .../res, whatever its five
// context levels hold.
func isContextTopic(topic string) bool {
	rest, ok := strings.CutPrefix(topic, acl.ReservedPrefix)
	if !ok || strings.Count(rest, "/") != 5 {
		return false
	}
	last := rest[strings.LastIndexByte(rest, '/')+1:]
	return last == "req" || last == "res"
}

// presenceTopic is the presence topic of the agent with this client ID (the
// same string as contract.PresenceTopic, which this package does not
// import).
func presenceTopic(clientID string) string {
	return acl.ReservedPrefix + "agents/" + clientID + "/status"
}

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

// isResponseTopic reports whether topic is a response topic of the MQTT
// contract, ff/v1/mcp/*/*/*/*/*/res.
func isResponseTopic(topic string) bool {
	return strings.HasSuffix(topic, "/res") && isContextTopic(topic)
}

// responseFilterLevels are the levels of a response topic; "" stands for a
// context level, which may hold anything.
var responseFilterLevels = [...]string{"ff", "v1", "mcp", "", "", "", "", "", "res"}

// mayMatchResponse reports whether the subscription filter, plain or shared
// ("$share/<group>/<filter>"), matches some response topic. It errs on the
// side of yes for filters it cannot tell apart.
func mayMatchResponse(filter string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, filter, ok = strings.Cut(rest, "/")
		if !ok {
			return false
		}
	}
	n := 0
	for level := range strings.SplitSeq(filter, "/") {
		switch {
		case level == "#":
			return true
		case n >= len(responseFilterLevels):
			return false
		case level != "+" && responseFilterLevels[n] != "" && level != responseFilterLevels[n]:
			return false
		}
		n++
	}
	return n == len(responseFilterLevels)
}

// presenceTopic is the presence topic of the agent with this client ID (the
// same string as expertagent.PresenceTopic, which this package does not
// import).
func presenceTopic(clientID string) string {
	return acl.ReservedPrefix + "agents/" + clientID + "/status"
}

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

// isRequestTopic reports whether topic is a request topic of the MQTT
// contract, ff/v1/mcp/*/*/*/*/*/req.
func isRequestTopic(topic string) bool {
	return strings.HasSuffix(topic, "/req") && isContextTopic(topic)
}

// responseFilterLevels and requestFilterLevels are the levels of a response
// and a request topic; "" stands for a context level, which may hold
// anything.
var (
	responseFilterLevels = []string{"ff", "v1", "mcp", "", "", "", "", "", "res"}
	requestFilterLevels  = []string{"ff", "v1", "mcp", "", "", "", "", "", "req"}
)

// filterMatch tells how a subscription filter relates to the topics of a
// kind (levels as in requestFilterLevels).
type filterMatch int

const (
	matchesNone filterMatch = iota // no topic of the kind
	matchesSome                    // some of them: it names a context level
	matchesAll                     // every one: only wildcards at context levels
)

// matchKind tells which topics of a kind the filter, plain or shared
// ("$share/<group>/<filter>"), matches. It errs toward matchesSome for
// filters it cannot tell apart.
func matchKind(filter string, levels []string) filterMatch {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, filter, ok = strings.Cut(rest, "/")
		if !ok {
			return matchesNone
		}
	}
	m, n := matchesAll, 0
	for level := range strings.SplitSeq(filter, "/") {
		switch {
		case level == "#":
			return m
		case n >= len(levels):
			return matchesNone
		case level == "+":
		case levels[n] == "":
			m = matchesSome
		case level != levels[n]:
			return matchesNone
		}
		n++
	}
	if n != len(levels) {
		return matchesNone
	}
	return m
}

// mayMatchResponse reports whether the subscription filter, plain or shared
// ("$share/<group>/<filter>"), matches some response topic. It errs on the
// side of yes for filters it cannot tell apart.
func mayMatchResponse(filter string) bool {
	return matchKind(filter, responseFilterLevels) != matchesNone
}

// presenceTopic is the presence topic of the agent with this client ID (the
// same string as expertagent.PresenceTopic, which this package does not
// import).
func presenceTopic(clientID string) string {
	return acl.ReservedPrefix + "agents/" + clientID + "/status"
}

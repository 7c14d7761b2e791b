package acl

import (
	"slices"
	"strings"
	"sync/atomic"
)

// Policy answers "may this client do this?" for the broker. It denies
// whatever no rule allows. The built-in rules of the ff/v1/mcp/ tree are
// granted by role and cannot be changed; operator rules (from the store)
// only ever add access outside that tree.
//
// Built-in rules (L is a level that passes ValidLevel):
//
//   - RolePlatform publishes ff/v1/mcp/L/L/L/L/L/req, subscribes to exactly
//     ff/v1/mcp/L/L/L/L/L/res (no wildcards, no $share) and to
//     ff/v1/mcp/agents/+/status or ff/v1/mcp/agents/L/status.
//   - RoleExpertAgent subscribes to ff/v1/mcp/X/X/X/X/X/req (X is "+" or L),
//     plain or as $share/L/ff/v1/mcp/X/X/X/X/X/req, publishes
//     ff/v1/mcp/L/L/L/L/L/res, and publishes its presence on
//     ff/v1/mcp/agents/<its own client ID>/status (the client ID must be L).
//   - Every role publishes and subscribes to exactly
//     ff/v1/mcp/probe/<its own username>/L (no wildcards): a gateway
//     measures its round trip over an external broker there, between two
//     of its own connections (requester.ProbeBroker).
//   - Nothing else may touch the ff/v1/mcp/ tree: no publish there, no
//     subscribe filter that could match a topic there ("#", "+/v1/#",
//     "ff/+/mcp/..."). Nothing may touch a topic starting with '$' other than
//     the agents' $share form above. A disabled identity may do nothing.
//
// A Policy is safe for concurrent use; SetRules swaps the operator rules
// atomically while Allow runs.
type Policy struct {
	rules atomic.Pointer[compiledRules]
}

type compiledRules struct {
	all    []Rule                    // the rules in effect, as given
	global []compiledRule            // Username "" (every identity)
	byUser map[string][]compiledRule // keyed by Username
}

type compiledRule struct {
	access Access
	filter string
}

// NewPolicy returns a Policy with the given operator rules. Rules that fail
// Rule.Validate are left out (a hand-edited store must not widen access).
func NewPolicy(rules []Rule) *Policy {
	p := &Policy{}
	p.SetRules(rules)
	return p
}

// SetRules replaces the operator rules. Allow calls that run concurrently see
// either the old set or the new one, never a mix. Invalid rules are left out
// as in NewPolicy.
func (p *Policy) SetRules(rules []Rule) {
	c := &compiledRules{byUser: make(map[string][]compiledRule)}
	for _, r := range rules {
		if r.Validate() != nil {
			continue
		}
		c.all = append(c.all, r)
		cr := compiledRule{access: r.Access, filter: r.Filter}
		if r.Username == "" {
			c.global = append(c.global, cr)
		} else {
			c.byUser[r.Username] = append(c.byUser[r.Username], cr)
		}
	}
	p.rules.Store(c)
}

// Rules returns a copy of the operator rules in effect (the built-in rules
// are not listed).
func (p *Policy) Rules() []Rule {
	return slices.Clone(p.load().all)
}

func (p *Policy) load() *compiledRules {
	if c := p.rules.Load(); c != nil {
		return c
	}
	return &noRules // the zero Policy grants only the built-in rules
}

var noRules compiledRules

// Allow reports whether the client clientID, logged in as id, may perform
// action on topic: a topic name for Publish, a topic filter for Subscribe
// (which may be "$share/<group>/<filter>"). It allocates nothing and takes
// no lock: it runs on every publish the broker routes.
func (p *Policy) Allow(id Identity, clientID string, action Action, topic string) bool {
	if id.Disabled || id.Username == "" {
		return false
	}
	switch action {
	case Publish:
		if !validTopicName(topic) || topic[0] == '$' {
			return false
		}
		if reachesReserved(topic) {
			return builtinPublish(id, clientID, topic)
		}
		return p.load().allows(id.Username, AccessWrite, topic, topicMatches)
	case Subscribe:
		if group, filter, ok := splitShare(topic); ok {
			// The only '$' access there is: agents sharing the request stream.
			return id.Role == RoleExpertAgent && ValidLevel(group) && agentRequestFilter(filter)
		}
		if !validTopicFilter(topic) || topic[0] == '$' {
			return false
		}
		if reachesReserved(topic) {
			return builtinSubscribe(id, topic)
		}
		return p.load().allows(id.Username, AccessRead, topic, filterCovers)
	}
	return false
}

func (c *compiledRules) allows(username string, need Access, topic string, match func(filter, topic string) bool) bool {
	for _, r := range c.global {
		if r.access&need != 0 && match(r.filter, topic) {
			return true
		}
	}
	for _, r := range c.byUser[username] {
		if r.access&need != 0 && match(r.filter, topic) {
			return true
		}
	}
	return false
}

func builtinPublish(id Identity, clientID, topic string) bool {
	rest, ok := strings.CutPrefix(topic, ReservedPrefix)
	if !ok {
		return false
	}
	if ownProbeTopic(rest, id.Username) {
		return true
	}
	switch id.Role {
	case RolePlatform:
		return contextTopic(rest, "req", false)
	case RoleExpertAgent:
		return contextTopic(rest, "res", false) || ownPresenceTopic(rest, clientID)
	}
	return false
}

func builtinSubscribe(id Identity, filter string) bool {
	rest, ok := strings.CutPrefix(filter, ReservedPrefix)
	if !ok {
		return false
	}
	if ownProbeTopic(rest, id.Username) {
		return true
	}
	switch id.Role {
	case RolePlatform:
		return contextTopic(rest, "res", false) || presenceFilter(rest)
	case RoleExpertAgent:
		return contextTopic(rest, "req", true)
	}
	return false
}

// agentRequestFilter reports whether f is ff/v1/mcp/X/X/X/X/X/req with X "+"
// or a valid level.
func agentRequestFilter(f string) bool {
	rest, ok := strings.CutPrefix(f, ReservedPrefix)
	return ok && contextTopic(rest, "req", true)
}

// contextTopic reports whether rest (what follows ff/v1/mcp/) is five valid
// levels and then exactly kind. With wild, a level may also be "+".
func contextTopic(rest, kind string, wild bool) bool {
	for range 5 {
		level, r, more := cutLevel(rest)
		if !more || !(ValidLevel(level) || wild && level == "+") {
			return false
		}
		rest = r
	}
	return rest == kind
}

// presenceFilter reports whether rest (what follows ff/v1/mcp/) is
// agents/+/status or agents/L/status.
func presenceFilter(rest string) bool {
	mid, ok := presenceLevel(rest)
	return ok && (mid == "+" || ValidLevel(mid))
}

// ownPresenceTopic reports whether rest (what follows ff/v1/mcp/) is
// agents/<clientID>/status for a clientID that is a valid level.
func ownPresenceTopic(rest, clientID string) bool {
	mid, ok := presenceLevel(rest)
	return ok && mid == clientID && ValidLevel(clientID)
}

// ownProbeTopic reports whether rest (what follows ff/v1/mcp/) is
// probe/<username>/L. Three levels, so it never is a context topic (seven).
func ownProbeTopic(rest, username string) bool {
	rest, ok := strings.CutPrefix(rest, "probe/")
	if !ok || !ValidLevel(username) {
		return false
	}
	rest, ok = strings.CutPrefix(rest, username+"/")
	return ok && ValidLevel(rest)
}

func presenceLevel(rest string) (string, bool) {
	rest, ok := strings.CutPrefix(rest, "agents/")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "/status")
}

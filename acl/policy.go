package acl

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/toolbus/toolbus/contract"
)

// Policy answers "may this client do this?" for the broker. It denies
// whatever no rule allows. The built-in rules of the ff/v2/ tree are
// granted by role and cannot be changed; operator rules (from the store)
// only ever add access outside that tree and outside ff/v1/mcp/.
//
// Built-in rules (L is a level that passes contract.ValidLevel; U is the client's
// own username and C its own client ID, both of which must be L):
//
//   - RolePlatform publishes requests on ff/v2/mcp/L/L/L/L/L/L/L/req (any
//     agent, any instance, five context levels), subscribes to the replies
//     of one context, ff/v2/mcp/A/I/L/L/L/L/L/res where A and I are "+"
//     or L (the reply filter ff/v2/mcp/+/+/... is what gateways use; the
//     broker checks each delivery against the topic name, with real
//     levels there), no other wildcard, no $share, and to presence:
//     ff/v2/mcp/+/+/status, ff/v2/mcp/L/+/status or ff/v2/mcp/L/L/status.
//   - RoleExpertAgent subscribes to the requests for its own name only:
//     ff/v2/mcp/U/X/Y/Y/Y/Y/Y/req, where X is "_" (its pool's requests) or
//     C (those for this instance) and Y is "+" or L, plain or as
//     $share/U/<that filter> (its pool shares under its username). It
//     publishes replies on ff/v2/mcp/U/C/L/L/L/L/L/res and its presence on
//     ff/v2/mcp/U/C/status: the broker vouches for the agent and instance
//     levels, so a gateway can trust who answered. It cannot read another
//     agent's or another instance's requests, nor replies or presence.
//   - Every role publishes and subscribes to exactly ff/v2/probe/U/L (no
//     wildcards): a gateway measures its round trip over an external
//     broker there, between two of its own connections
//     (requester.ProbeBroker).
//   - Nothing else may touch ff/v2/, nor the retired ff/v1/mcp/ tree (so
//     that a v1 agent or gateway fails at the broker): no publish there, no
//     subscribe filter that could match a topic there ("#", "ff/#",
//     "+/v2/#", "ff/+/mcp/#"). Nothing may touch a topic starting with '$'
//     other than the agents' $share form above. A disabled identity may do
//     nothing.
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
			// The only '$' access there is: an agent's pool sharing its
			// request stream. The group is the username, so that no other
			// identity can join the pool's group and take its requests.
			return id.Role == RoleExpertAgent && group == id.Username && agentRequestFilter(id.Username, clientID, filter)
		}
		if !validTopicFilter(topic) || topic[0] == '$' {
			return false
		}
		if reachesReserved(topic) {
			return builtinSubscribe(id, clientID, topic)
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

// builtinPublish decides a publish to a reserved topic. The rest of ff/v2/
// and all of ff/v1/mcp/ fail both prefixes and are refused.
func builtinPublish(id Identity, clientID, topic string) bool {
	if probe, ok := strings.CutPrefix(topic, probePrefix); ok {
		return ownProbeTopic(probe, id.Username)
	}
	rest, ok := strings.CutPrefix(topic, mcpPrefix)
	if !ok {
		return false
	}
	agent, instance, tail, ok := cutAddress(rest)
	if !ok {
		return false
	}
	switch id.Role {
	case RolePlatform:
		return contract.ValidLevel(agent) && contract.ValidLevel(instance) && contextTopic(tail, "req", false)
	case RoleExpertAgent:
		// Only under its own username and client ID: the topic names who
		// replied or announced itself. "_" names the pool, never one
		// instance.
		return agent == id.Username && contract.ValidLevel(agent) && instance == clientID && contract.ValidLevel(instance) && instance != "_" &&
			(tail == "status" || contextTopic(tail, "res", false))
	}
	return false
}

// builtinSubscribe decides a plain (not $share) subscription to a filter
// that reaches a reserved tree.
func builtinSubscribe(id Identity, clientID, filter string) bool {
	if probe, ok := strings.CutPrefix(filter, probePrefix); ok {
		return ownProbeTopic(probe, id.Username)
	}
	switch id.Role {
	case RolePlatform:
		rest, ok := strings.CutPrefix(filter, mcpPrefix)
		if !ok {
			return false
		}
		agent, instance, tail, ok := cutAddress(rest)
		if !ok {
			return false
		}
		if tail == "status" {
			return agent == "+" && instance == "+" ||
				contract.ValidLevel(agent) && (instance == "+" || contract.ValidLevel(instance))
		}
		// Replies of one context, from whichever agent answers it, or of
		// every context of one gateway (contract.GatewayReplyFilter),
		// which holds no topic that a context's filter would not. The
		// broker checks each delivery against the topic name too, where
		// the agent and instance levels are real ones.
		return (agent == "+" || contract.ValidLevel(agent)) && (instance == "+" || contract.ValidLevel(instance)) &&
			(contextTopic(tail, "res", false) || gatewayReplies(tail))
	case RoleExpertAgent:
		return agentRequestFilter(id.Username, clientID, filter)
	}
	return false
}

// agentRequestFilter reports whether f is ff/v2/mcp/<username>/X/Y/Y/Y/Y/Y/req
// with X "_" or clientID and each Y "+" or a valid level: the requests for
// this agent's pool, or for this one instance.
func agentRequestFilter(username, clientID, f string) bool {
	rest, ok := strings.CutPrefix(f, mcpPrefix)
	if !ok {
		return false
	}
	agent, instance, tail, ok := cutAddress(rest)
	return ok && agent == username && contract.ValidLevel(agent) &&
		(instance == "_" || instance == clientID && contract.ValidLevel(instance)) &&
		contextTopic(tail, "req", true)
}

// cutAddress splits rest (what follows ff/v2/mcp/) into its agent and
// instance levels and what follows them. ok is false when rest has fewer
// than three levels.
func cutAddress(rest string) (agent, instance, tail string, ok bool) {
	agent, rest, more := cutLevel(rest)
	if !more {
		return "", "", "", false
	}
	instance, tail, more = cutLevel(rest)
	if !more {
		return "", "", "", false
	}
	return agent, instance, tail, true
}

// contextTopic reports whether rest (what follows the agent and instance
// levels) is five valid context levels and then exactly kind. With wild, a
// level may also be "+".
func contextTopic(rest, kind string, wild bool) bool {
	for range 5 {
		level, r, more := cutLevel(rest)
		if !more || !(contract.ValidLevel(level) || wild && level == "+") {
			return false
		}
		rest = r
	}
	return rest == kind
}

// gatewayReplies reports whether rest (what follows the agent and instance
// levels) is one valid platform level, four "+" and then "res".
func gatewayReplies(rest string) bool {
	platform, rest, more := cutLevel(rest)
	return more && contract.ValidLevel(platform) && rest == "+/+/+/+/res"
}

// ownProbeTopic reports whether rest (what follows ff/v2/probe/) is
// <username>/L: exactly two levels, no wildcard.
func ownProbeTopic(rest, username string) bool {
	owner, level, more := cutLevel(rest)
	return more && owner == username && contract.ValidLevel(owner) && contract.ValidLevel(level)
}

package contract

import (
	"fmt"
	"strings"
)

// Topic tree of the MQTT contract v2.
const (
	// TopicPrefix starts every topic of the contract.
	TopicPrefix = "ff/v2/mcp/"
	// PresenceFilter matches every agent instance's presence topic.
	PresenceFilter = TopicPrefix + "+/+/status"
	// AnyInstance is the instance level of a request any instance of the
	// agent's pool may take (through the shared subscription).
	AnyInstance = "_"
	// NoEntity fills the entity levels of a context that is not bound to an
	// entity (the plain /api/v1/mcp endpoint).
	NoEntity = "_"
	// Request and Reply are the last level of request and reply topics.
	Request = "req"
	Reply   = "res"
)

// V1Prefix is the topic tree of contract v1: brokers refuse it, so that an
// agent or gateway of v1 fails loudly instead of talking past v2.
const V1Prefix = "ff/v1/mcp/"

// Context names one conversation between a caller and the expert agents:
// which gateway (PlatformID), whose token (UserID), which MCP session, and
// which entity. Each field becomes one topic level and must pass
// ValidateLevel.
type Context struct {
	PlatformID string
	UserID     string
	SessionID  string
	EntityType string
	EntityID   string
}

// Validate reports the first field that cannot be a topic level.
func (c Context) Validate() error {
	for _, f := range [...]struct{ name, v string }{
		{"platformId", c.PlatformID}, {"userId", c.UserID}, {"sessionId", c.SessionID},
		{"entityType", c.EntityType}, {"entityId", c.EntityID},
	} {
		if err := ValidateLevel(f.v); err != nil {
			return fmt.Errorf("context %s: %w", f.name, err)
		}
	}
	return nil
}

// Levels is the context's five topic levels joined by '/'.
func (c Context) Levels() string {
	return c.PlatformID + "/" + c.UserID + "/" + c.SessionID + "/" + c.EntityType + "/" + c.EntityID
}

// RequestTopic is where the gateway publishes a request of this context
// for agent (its MQTT username), to instance (a client ID) or AnyInstance.
// All must be valid levels.
func (c Context) RequestTopic(agent, instance string) string {
	return TopicPrefix + agent + "/" + instance + "/" + c.Levels() + "/" + Request
}

// ReplyTopic is where instance of agent publishes its messages of this
// context: the broker lets an agent publish only with its own username and
// client ID there, so the topic says who answered.
func (c Context) ReplyTopic(agent, instance string) string {
	return TopicPrefix + agent + "/" + instance + "/" + c.Levels() + "/" + Reply
}

// ReplyKey is what every reply topic of this context and its ReplyFilter
// share: the five context levels and "res", after the agent and instance.
func (c Context) ReplyKey() string { return c.Levels() + "/" + Reply }

// SplitReply splits a reply topic into its agent, its instance and its
// ReplyKey, without copying and without validating the levels (the broker
// has: it lets an agent publish replies only as itself).
func SplitReply(topic string) (agent, instance, key string, ok bool) {
	rest, ok := strings.CutPrefix(topic, TopicPrefix)
	if !ok {
		return "", "", "", false
	}
	agent, rest, ok1 := strings.Cut(rest, "/")
	instance, key, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || !strings.HasSuffix(key, "/"+Reply) {
		return "", "", "", false
	}
	return agent, instance, key, true
}

// ReplyFilterKey returns the ReplyKey of a context's ReplyFilter; false
// for any other filter.
func ReplyFilterKey(filter string) (string, bool) {
	rest, ok := strings.CutPrefix(filter, TopicPrefix+"+/+/")
	if !ok || strings.ContainsAny(rest, "+#") || !strings.HasSuffix(rest, "/"+Reply) {
		return "", false
	}
	return rest, true
}

// ReplyFilter matches the replies of every agent in this context: the one
// subscription a gateway holds per context.
func (c Context) ReplyFilter() string {
	return TopicPrefix + "+/+/" + c.Levels() + "/" + Reply
}

// Topic is a request or reply topic, parsed.
type Topic struct {
	Agent, Instance string
	Context         Context
	// Kind is Request or Reply.
	Kind string
}

// ParseTopic splits a request or reply topic. It fails on any other topic
// or on a level that does not validate (a reply filter's "+" included).
func ParseTopic(topic string) (Topic, error) {
	rest, ok := strings.CutPrefix(topic, TopicPrefix)
	if !ok {
		return Topic{}, fmt.Errorf("topic %q: not under %s", topic, TopicPrefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 8 || (parts[7] != Request && parts[7] != Reply) {
		return Topic{}, fmt.Errorf("topic %q: want %s<agent>/<instance>/<5 levels>/req|res", topic, TopicPrefix)
	}
	t := Topic{Agent: parts[0], Instance: parts[1], Context: Context{parts[2], parts[3], parts[4], parts[5], parts[6]}, Kind: parts[7]}
	if err := ValidateLevel(t.Agent); err != nil {
		return Topic{}, fmt.Errorf("topic %q: agent: %w", topic, err)
	}
	if err := ValidateLevel(t.Instance); err != nil {
		return Topic{}, fmt.Errorf("topic %q: instance: %w", topic, err)
	}
	if err := t.Context.Validate(); err != nil {
		return Topic{}, fmt.Errorf("topic %q: %w", topic, err)
	}
	return t, nil
}

// ParseReplyFilter returns the context of a ReplyFilter.
func ParseReplyFilter(filter string) (Context, error) {
	rest, ok := strings.CutPrefix(filter, TopicPrefix+"+/+/")
	if !ok {
		return Context{}, fmt.Errorf("filter %q: not a reply filter", filter)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 6 || parts[5] != Reply {
		return Context{}, fmt.Errorf("filter %q: not a reply filter", filter)
	}
	c := Context{parts[0], parts[1], parts[2], parts[3], parts[4]}
	if err := c.Validate(); err != nil {
		return Context{}, fmt.Errorf("filter %q: %w", filter, err)
	}
	return c, nil
}

// GatewayReplyFilter matches the replies of every agent in every context
// of the gateway platformID: what a gateway subscribes once, instead of a
// filter per context, on a broker where subscriptions are dear.
func GatewayReplyFilter(platformID string) string {
	return TopicPrefix + "+/+/" + platformID + "/+/+/+/+/" + Reply
}

// RequestFilter matches the requests for agent addressed to instance
// (a client ID, AnyInstance, or "+" for both).
func RequestFilter(agent, instance string) string {
	return TopicPrefix + agent + "/" + instance + "/+/+/+/+/+/" + Request
}

// SharedRequestFilter is the filter through which the instances of agent's
// pool share its AnyInstance requests: each goes to one of them.
func SharedRequestFilter(agent string) string {
	return "$share/" + agent + "/" + RequestFilter(agent, AnyInstance)
}

// PresenceTopic is the retained status topic of instance (its client ID)
// of agent.
func PresenceTopic(agent, instance string) string {
	return TopicPrefix + agent + "/" + instance + "/status"
}

// ParsePresenceTopic returns the agent and instance of a presence topic.
func ParsePresenceTopic(topic string) (agent, instance string, ok bool) {
	rest, ok := strings.CutPrefix(topic, TopicPrefix)
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, "/status")
	if !ok {
		return "", "", false
	}
	agent, instance, ok = strings.Cut(rest, "/")
	if !ok || !ValidLevel(agent) || !ValidLevel(instance) {
		return "", "", false
	}
	return agent, instance, true
}

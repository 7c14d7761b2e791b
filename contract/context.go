package contract

import (
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/acl"
)

// Topic tree of the MQTT contract v1.
const (
	// TopicPrefix starts every topic of the contract.
	TopicPrefix = "ff/v1/mcp/"
	// RequestFilter matches every request topic; agents subscribe to it,
	// usually through SharedRequestFilter.
	RequestFilter = TopicPrefix + "+/+/+/+/+/req"
	// PresenceFilter matches every agent's presence topic.
	PresenceFilter = TopicPrefix + "agents/+/status"
	// NoEntity fills the entity levels of a context that is not bound to an
	// entity (the plain /api/v1/mcp endpoint).
	NoEntity = "_"
)

// Context names one conversation between a caller and the expert agents:
// which gateway (PlatformID), whose token (UserID), which MCP session, and
// which entity. Each field becomes one topic level and must pass
// acl.ValidateLevel.
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
		if err := acl.ValidateLevel(f.v); err != nil {
			return fmt.Errorf("context %s: %w", f.name, err)
		}
	}
	return nil
}

// RequestTopic is where the gateway publishes requests of this context.
// The context must be valid.
func (c Context) RequestTopic() string { return c.topic("req") }

// ResponseTopic is where agents publish replies for this context.
// The context must be valid.
func (c Context) ResponseTopic() string { return c.topic("res") }

func (c Context) topic(kind string) string {
	var b strings.Builder
	b.Grow(len(TopicPrefix) + len(c.PlatformID) + len(c.UserID) + len(c.SessionID) + len(c.EntityType) + len(c.EntityID) + 8)
	b.WriteString(TopicPrefix)
	for _, l := range [...]string{c.PlatformID, c.UserID, c.SessionID, c.EntityType, c.EntityID} {
		b.WriteString(l)
		b.WriteByte('/')
	}
	b.WriteString(kind)
	return b.String()
}

// ParseTopic splits a request or response topic into its context and its
// last level ("req" or "res"). It fails on any other topic or on a level
// that does not validate.
func ParseTopic(topic string) (c Context, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, TopicPrefix)
	if !ok {
		return Context{}, "", fmt.Errorf("topic %q: not under %s", topic, TopicPrefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 6 || (parts[5] != "req" && parts[5] != "res") {
		return Context{}, "", fmt.Errorf("topic %q: want %s<5 levels>/req|res", topic, TopicPrefix)
	}
	c = Context{parts[0], parts[1], parts[2], parts[3], parts[4]}
	if err := c.Validate(); err != nil {
		return Context{}, "", fmt.Errorf("topic %q: %w", topic, err)
	}
	return c, parts[5], nil
}

// SharedRequestFilter is the request filter for agents that share the work
// of one group: each request goes to one member of the group.
func SharedRequestFilter(group string) string { return "$share/" + group + "/" + RequestFilter }

// PresenceTopic is the retained status topic of the agent with this MQTT client ID.
func PresenceTopic(clientID string) string { return TopicPrefix + "agents/" + clientID + "/status" }

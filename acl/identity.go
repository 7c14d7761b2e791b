package acl

import (
	"fmt"
	"time"
)

// Role is what an MQTT identity is for. The built-in topic rules of the
// ff/v2/ tree are granted by role (see Policy).
type Role string

const (
	// RolePlatform is a gateway: it publishes requests on .../req to any
	// agent, and subscribes to one context's replies at a time and to agent
	// presence.
	RolePlatform Role = "platform"
	// RoleExpertAgent is an expert agent: its username is the agent's name.
	// It subscribes to the requests for that name (its pool's, plain or
	// through $share, and its own instance's) and publishes replies and
	// presence under that name and its own client ID.
	RoleExpertAgent Role = "expert-agent"
	// RoleClient is any other MQTT client. It has no access to the contract
	// topics (its own probe topic aside) and only what operator rules grant
	// elsewhere.
	RoleClient Role = "client"
)

// ParseRole returns the Role named s.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RolePlatform, RoleExpertAgent, RoleClient:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want %s, %s or %s)", s, RolePlatform, RoleExpertAgent, RoleClient)
}

// Identity is an MQTT login as the Policy sees it: who, in what role, and
// whether it is disabled. Package store keeps identities (with their
// password hashes, which an Identity never carries) and returns them as
// this type.
type Identity struct {
	Username string
	Role     Role
	Disabled bool
	Created  time.Time
}

// Action is what a client wants to do with a topic.
type Action int

const (
	// Publish a message to a topic name.
	Publish Action = iota + 1
	// Subscribe to a topic filter (which may hold wildcards or a $share prefix).
	Subscribe
)

func (a Action) String() string {
	switch a {
	case Publish:
		return "publish"
	case Subscribe:
		return "subscribe"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

package acl

import (
	"fmt"
	"time"

	"github.com/toolbus/toolbus/contract"
)

// Access is what an operator rule grants on its filter.
type Access int

const (
	// AccessRead allows subscribing to filters the rule's filter covers.
	AccessRead Access = 1 << iota
	// AccessWrite allows publishing to topics the rule's filter matches.
	AccessWrite
	// AccessReadWrite allows both.
	AccessReadWrite = AccessRead | AccessWrite
)

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessReadWrite:
		return "readwrite"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// ParseAccess returns the Access named s: "read", "write" or "readwrite".
func ParseAccess(s string) (Access, error) {
	for _, a := range [...]Access{AccessRead, AccessWrite, AccessReadWrite} {
		if s == a.String() {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown access %q (want read, write or readwrite)", s)
}

// Rule is an operator rule: it allows (never denies) Username, or every
// identity when Username is "", to publish to topics that Filter matches
// (AccessWrite) and to subscribe to filters that Filter covers (AccessRead:
// every topic the requested filter matches, Filter matches too, so "sensors/#"
// covers "sensors/+/t"). Rules cannot reach the ff/v2/ or ff/v1/mcp/ trees
// or '$' topics.
type Rule struct {
	ID       int64
	Username string // "" = every identity
	Access   Access
	Filter   string // MQTT filter, may hold + and #
	Created  time.Time
}

// Validate reports why r cannot be stored or enforced; the error wraps
// ErrInvalidRule. ID and Created are not checked.
func (r Rule) Validate() error {
	switch r.Access {
	case AccessRead, AccessWrite, AccessReadWrite:
	default:
		return fmt.Errorf("%w: unknown access %d", ErrInvalidRule, int(r.Access))
	}
	if r.Username != "" && !contract.ValidLevel(r.Username) {
		return fmt.Errorf("%w: username %q is not a valid identity name", ErrInvalidRule, r.Username)
	}
	return ValidateRuleFilter(r.Filter)
}

// RuleWho names whom a rule of username applies to, for messages:
// "(everyone)" for a rule without one.
func RuleWho(username string) string {
	if username == "" {
		return "(everyone)"
	}
	return username
}

package acl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
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
	if r.Username != "" && !ValidLevel(r.Username) {
		return fmt.Errorf("%w: username %q is not a valid identity name", ErrInvalidRule, r.Username)
	}
	return ValidateRuleFilter(r.Filter)
}

// AddRule stores r and returns it with its ID and creation time (r.ID and
// r.Created are ignored). The rule must pass Validate; a rule for a
// username the store does not know gives ErrNotFound, and a rule equal to a
// stored one (same username, access and filter) gives ErrExists.
func (s *Store) AddRule(ctx context.Context, r Rule) (_ Rule, err error) {
	defer mapWriteErr(&err)
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Rule{}, fmt.Errorf("add rule: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if r.Username != "" {
		var one int
		err := tx.QueryRowContext(ctx, qIdentityExists, r.Username).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return Rule{}, fmt.Errorf("rule for identity %s: %w", r.Username, ErrNotFound)
		}
		if err != nil {
			return Rule{}, fmt.Errorf("add rule: %w", err)
		}
	}
	var ms int64
	r.Created, ms = now()
	err = tx.QueryRowContext(ctx, qInsertRule, r.Username, int64(r.Access), r.Filter, ms).Scan(&r.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return Rule{}, fmt.Errorf("rule %s %s %q: %w", RuleWho(r.Username), r.Access, r.Filter, ErrExists)
	}
	if err != nil {
		return Rule{}, fmt.Errorf("add rule: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Rule{}, fmt.Errorf("add rule: %w", err)
	}
	s.log.WithField("rule_id", r.ID).WithField("username", r.Username).WithField("access", r.Access.String()).
		WithField("filter", r.Filter).Info("added ACL rule")
	return r, nil
}

// RuleWho names whom a rule of username applies to, for messages:
// "(everyone)" for a rule without one.
func RuleWho(username string) string {
	if username == "" {
		return "(everyone)"
	}
	return username
}

// ListRules returns every stored rule, ordered by ID. A stored rule that
// fails Validate (a hand-edited database) is returned too but logged, and
// NewPolicy leaves it out.
func (s *Store) ListRules(ctx context.Context) ([]Rule, error) {
	rows, err := s.db.QueryContext(ctx, qListRules)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	defer rows.Close()
	var rules []Rule
	for rows.Next() {
		var (
			r      Rule
			access int64
			ms     int64
		)
		if err := rows.Scan(&r.ID, &r.Username, &access, &r.Filter, &ms); err != nil {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		r.Access, r.Created = Access(access), fromMillis(ms)
		if err := r.Validate(); err != nil {
			s.log.WithField("rule_id", r.ID).WithError(err).Warn("stored ACL rule is invalid and will not be enforced")
		}
		rules = append(rules, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	return rules, nil
}

// RemoveRule deletes the rule with the given ID, or gives ErrNotFound.
func (s *Store) RemoveRule(ctx context.Context, id int64) (err error) {
	defer mapWriteErr(&err)
	res, err := s.db.ExecContext(ctx, qDeleteRule, id)
	if err != nil {
		return fmt.Errorf("remove rule %d: %w", id, err)
	}
	if err := mustAffect(res); err != nil {
		return fmt.Errorf("rule %d: %w", id, err)
	}
	s.log.WithField("rule_id", id).Info("removed ACL rule")
	return nil
}

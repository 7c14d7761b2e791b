package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/acl"
)

// AddRule stores r and returns it with its ID and creation time (r.ID and
// r.Created are ignored). The rule must pass Validate; a rule for a
// username the store does not know gives ErrNotFound, and a rule equal to a
// stored one (same username, access and filter) gives ErrExists.
func (s *Store) AddRule(ctx context.Context, r acl.Rule) (_ acl.Rule, err error) {
	defer mapWriteErr(&err)
	if err := r.Validate(); err != nil {
		return acl.Rule{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return acl.Rule{}, fmt.Errorf("add rule: %w", err)
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
			return acl.Rule{}, fmt.Errorf("rule for identity %s: %w", r.Username, ErrNotFound)
		}
		if err != nil {
			return acl.Rule{}, fmt.Errorf("add rule: %w", err)
		}
	}
	var ms int64
	r.Created, ms = now()
	err = tx.QueryRowContext(ctx, qInsertRule, r.Username, int64(r.Access), r.Filter, ms).Scan(&r.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return acl.Rule{}, fmt.Errorf("rule %s %s %q: %w", acl.RuleWho(r.Username), r.Access, r.Filter, ErrExists)
	}
	if err != nil {
		return acl.Rule{}, fmt.Errorf("add rule: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return acl.Rule{}, fmt.Errorf("add rule: %w", err)
	}
	s.log.WithField("rule_id", r.ID).WithField("username", r.Username).WithField("access", r.Access.String()).
		WithField("filter", r.Filter).Info("added ACL rule")
	return r, nil
}

// ListRules returns every stored rule, ordered by ID. A stored rule that
// fails Validate (a hand-edited database) is returned too but logged, and
// acl.NewPolicy leaves it out.
func (s *Store) ListRules(ctx context.Context) ([]acl.Rule, error) {
	rows, err := s.db.QueryContext(ctx, qListRules)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	defer rows.Close()
	var rules []acl.Rule
	for rows.Next() {
		var (
			r      acl.Rule
			access int64
			ms     int64
		)
		if err := rows.Scan(&r.ID, &r.Username, &access, &r.Filter, &ms); err != nil {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		r.Access, r.Created = acl.Access(access), fromMillis(ms)
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

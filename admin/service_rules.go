package admin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/acl"
)

// ListRules lists the built-in rules (read-only) and then the operator
// rules, by ID.
func (s *Service) ListRules(ctx context.Context) ([]Rule, error) {
	rules, err := s.opts.Store.ListRules(ctx)
	if err != nil {
		return nil, err
	}
	out := builtinList()
	for _, r := range rules {
		out = append(out, NewRule(r))
	}
	return out, nil
}

// AddRule stores an operator rule and puts it in force on the running
// broker: the next publish or subscribe it covers is allowed.
func (s *Service) AddRule(ctx context.Context, req RuleRequest) (Rule, error) {
	var out Rule
	err := s.change(ctx, "rule.add", fmt.Sprintf("rule %s %s %q", acl.RuleWho(req.Username), req.Access, req.Filter), func() error {
		access, err := acl.ParseAccess(req.Access)
		if err != nil {
			return invalid("%v", err)
		}
		s.rulesMu.Lock()
		defer s.rulesMu.Unlock()
		r, err := s.opts.Store.AddRule(ctx, acl.Rule{Username: req.Username, Access: access, Filter: req.Filter})
		if err != nil {
			return err
		}
		out = NewRule(r)
		return s.reloadRules(ctx)
	})
	return out, err
}

// RemoveRule removes an operator rule and takes it out of force on the
// running broker: the next publish or subscribe it alone covered is
// refused, and so is the delivery of messages on subscriptions made under
// it (the broker checks every delivery). Built-in rules give
// ErrBuiltinRule.
func (s *Service) RemoveRule(ctx context.Context, id string) error {
	return s.change(ctx, "rule.remove", "rule "+id, func() error {
		if isBuiltinID(id) {
			return fmt.Errorf("%w: %s is part of the ff/v2 contract, granted by role; it cannot be removed", ErrBuiltinRule, id)
		}
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return invalid("rule id %q: want the number 'rule list' shows", id)
		}
		s.rulesMu.Lock()
		defer s.rulesMu.Unlock()
		if err := s.opts.Store.RemoveRule(ctx, n); err != nil {
			return err
		}
		return s.reloadRules(ctx)
	})
}

// reloadTimeout bounds the reading of the rules after a change.
const reloadTimeout = 10 * time.Second

// reloadRules hands the store's rules to the running policy. Called with
// rulesMu held.
func (s *Service) reloadRules(ctx context.Context) error {
	if s.opts.Policy == nil {
		return nil
	}
	// The change is committed: a caller that goes away now must not leave
	// the policy behind the store.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reloadTimeout)
	defer cancel()
	rules, err := s.opts.Store.ListRules(ctx)
	if err != nil {
		return fmt.Errorf("the change is stored, but the running broker still enforces the old rules: %w", err)
	}
	s.opts.Policy.SetRules(rules)
	return nil
}

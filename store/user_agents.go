package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/toolbus/toolbus/contract"
)

// Per-user agent grants: an operator limits a user (every token of theirs)
// to some expert agents. A user without grants may use every agent; a
// token's own Agents narrow further.

// SetUserAgents replaces the expert agents user may use (their names on
// the bus, each a valid level; at most MaxTokenAgents). An empty list
// means every agent again. The tokens of the user follow at once in this
// process, and within the token cache TTL in the others.
func (s *Store) SetUserAgents(ctx context.Context, user string, agents []string) (err error) {
	defer mapWriteErr(&err)
	if err := contract.ValidateLevel(user); err != nil {
		return fmt.Errorf("%w: user: %w", ErrInvalidTokenSpec, err)
	}
	if len(agents) > MaxTokenAgents {
		return fmt.Errorf("%w: %d agents, at most %d", ErrInvalidTokenSpec, len(agents), MaxTokenAgents)
	}
	var uniq []string
	for _, a := range agents {
		if err := contract.ValidateLevel(a); err != nil {
			return fmt.Errorf("%w: agent %q: %w", ErrInvalidTokenSpec, a, err)
		}
		if !slices.Contains(uniq, a) {
			uniq = append(uniq, a)
		}
	}
	// After the write: a request that reads a token in between must not
	// cache it with the old grants (as RevokeToken does).
	defer s.tokens.invalidateAll()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("set agents of %s: %w", user, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, qDeleteUserAgents, user); err != nil {
		return fmt.Errorf("set agents of %s: %w", user, err)
	}
	for _, a := range uniq {
		if _, err := tx.ExecContext(ctx, qInsertUserAgent, user, a); err != nil {
			return fmt.Errorf("set agents of %s: %w", user, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("set agents of %s: %w", user, err)
	}
	s.log.WithField("user", user).WithField("agents", uniq).Info("set the agents of a user")
	return nil
}

// UserAgents returns the expert agents user may use, sorted; nil means
// every agent.
func (s *Store) UserAgents(ctx context.Context, user string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, qSelectUserAgents, user)
	if err != nil {
		return nil, fmt.Errorf("agents of %s: %w", user, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, fmt.Errorf("agents of %s: %w", user, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("agents of %s: %w", user, err)
	}
	return out, nil
}

// ListUserAgents returns every user's grants, by user.
func (s *Store) ListUserAgents(ctx context.Context) (map[string][]string, error) {
	rows, err := s.db.QueryContext(ctx, qListUserAgents)
	if err != nil {
		return nil, fmt.Errorf("list user agents: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var u, a string
		if err := rows.Scan(&u, &a); err != nil {
			return nil, fmt.Errorf("list user agents: %w", err)
		}
		out[u] = append(out[u], a)
	}
	return out, rows.Err()
}

// NarrowAgents is a token's effective agents (Token.Agents after
// authentication): its own list (own) within its user's grants (granted).
// No grants leave own; a token not limited (nil) gets the grants; else the
// agents in both. nil = every agent; empty non-nil = none.
func NarrowAgents(own, granted []string) []string {
	switch {
	case len(granted) == 0:
		return own
	case own == nil:
		return granted
	}
	out := []string{}
	for _, a := range own {
		if slices.Contains(granted, a) {
			out = append(out, a)
		}
	}
	return out
}

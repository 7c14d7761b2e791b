package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/contract"
)

// Per-agent rate limits: an operator bounds the calls an expert agent gets
// from all callers together, beside the per-token and per-user limits. The
// store keeps the operator's text ("PER_MINUTE" or "PER_MINUTE:BURST");
// the gateway reads it (gateway.ParseLimit), the admin Service checks it
// before it gets here.

// ErrInvalidAgentLimit is returned by SetAgentLimit for an agent name that
// is no valid topic level, or a limit text longer than MaxAgentLimitLen.
var ErrInvalidAgentLimit = errors.New("invalid agent limit")

// MaxAgentLimitLen bounds the stored text of one limit, far above what a
// person writes ("600:50").
const MaxAgentLimitLen = 64

// SetAgentLimit stores limit as agent's rate limit across all callers,
// replacing any before; an empty (or blank) limit removes it. Removing a
// limit the agent does not have is no error: the outcome is the same.
func (s *Store) SetAgentLimit(ctx context.Context, agent, limit string) (err error) {
	defer mapWriteErr(&err)
	if err := contract.ValidateLevel(agent); err != nil {
		return fmt.Errorf("%w: agent %q: %w", ErrInvalidAgentLimit, agent, err)
	}
	limit = strings.TrimSpace(limit)
	if len(limit) > MaxAgentLimitLen {
		return fmt.Errorf("%w: limit of %s: %d bytes, at most %d", ErrInvalidAgentLimit, agent, len(limit), MaxAgentLimitLen)
	}
	if limit == "" {
		if _, err := s.db.ExecContext(ctx, qDeleteAgentLimit, agent); err != nil {
			return fmt.Errorf("remove the limit of agent %s: %w", agent, err)
		}
		s.log.WithField("agent", agent).Info("removed the rate limit of an agent")
		return nil
	}
	_, ms := now()
	if _, err := s.db.ExecContext(ctx, qUpsertAgentLimit, agent, limit, ms); err != nil {
		return fmt.Errorf("set the limit of agent %s: %w", agent, err)
	}
	s.log.WithField("agent", agent).WithField("limit", limit).Info("set the rate limit of an agent")
	return nil
}

// AgentLimits returns every agent's rate limit text, by agent name. An
// agent without a limit of its own is absent; no limits at all is an empty
// map.
func (s *Store) AgentLimits(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, qListAgentLimits)
	if err != nil {
		return nil, fmt.Errorf("list agent limits: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var agent, limit string
		if err := rows.Scan(&agent, &limit); err != nil {
			return nil, fmt.Errorf("list agent limits: %w", err)
		}
		out[agent] = limit
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent limits: %w", err)
	}
	return out, nil
}

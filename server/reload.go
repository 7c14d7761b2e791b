package server

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/gateway"
)

// Reload is what a running process can change without dropping a
// connection (SIGHUP). A nil field is left as it is.
type Reload struct {
	LogLevel   *logrus.Level
	RateLimits *gateway.RateLimits
}

// Reload applies r, and reads the ACL rules from the store again, so that
// rules changed in the data directory while the process ran take effect.
func (s *Server) Reload(ctx context.Context, r Reload) error {
	if r.LogLevel != nil {
		s.cfg.Logger.Logger.SetLevel(*r.LogLevel)
	}
	if r.RateLimits != nil && s.gateway != nil {
		s.gateway.SetRateLimits(*r.RateLimits)
	}
	if s.store == nil || s.policy == nil {
		return nil
	}
	rules, err := s.store.ListRules(ctx)
	if err != nil {
		return fmt.Errorf("reload rules: %w", err)
	}
	s.policy.SetRules(rules)
	s.log.WithField("rules", len(rules)).Info("reloaded")
	return nil
}

package server

import (
	"context"
	"errors"
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

// Reload applies r, reads the HTTPS certificate files again (a renewed
// certificate serves from the next handshake; files that do not make a
// pair keep the old one, and are the error), and reads the ACL rules and
// the per-agent rate limits from the store again, so that the ones changed
// in the data directory while the process ran take effect.
func (s *Server) Reload(ctx context.Context, r Reload) error {
	if r.LogLevel != nil {
		s.cfg.Logger.Logger.SetLevel(*r.LogLevel)
	}
	var certErr error
	if s.https() && s.cert.Load() != nil {
		if certErr = s.loadCert(); certErr != nil {
			s.log.WithError(certErr).Error("reload: the HTTPS certificate files do not make a pair; still serving the previous certificate")
		}
	}
	if r.RateLimits != nil && s.gateway != nil {
		s.gateway.SetRateLimits(*r.RateLimits)
	}
	if err := s.loadAgentLimits(ctx); err != nil {
		s.log.WithError(err).Error("reload: still enforcing the previous agent rate limits")
	}
	if s.store == nil || s.policy == nil {
		return certErr
	}
	rules, err := s.store.ListRules(ctx)
	if err != nil {
		return errors.Join(certErr, fmt.Errorf("reload rules: %w", err))
	}
	s.policy.SetRules(rules)
	s.log.WithField("rules", len(rules)).Info("reloaded")
	return certErr
}

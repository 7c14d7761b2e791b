package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/toolbus/toolbus/store"
)

// checkStore validates the store fields of cfg: a PostgreSQL URL, or a data
// directory for the default SQLite store.
func checkStore(cfg *Config) error {
	if cfg.StoreURL == "" {
		if cfg.DataDir == "" {
			return errors.New("server: DataDir is required")
		}
		return nil
	}
	u, err := url.Parse(cfg.StoreURL)
	if err != nil {
		return errors.New("server: store URL: cannot parse it") // it may hold a password
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql":
	default:
		return fmt.Errorf("server: store URL %s: want postgres://user:password@host:port/dbname", store.RedactURL(cfg.StoreURL))
	}
	return nil
}

// openStore opens the shared PostgreSQL store of StoreURL, or the SQLite
// store in DataDir.
func (s *Server) openStore(ctx context.Context) (*store.Store, error) {
	opts := store.StoreOptions{
		HashIterations: s.cfg.HashIterations,
		BcryptCost:     s.cfg.BcryptCost,
		Logger:         s.cfg.Logger.WithField("component", "store"),
	}
	if s.cfg.StoreURL != "" {
		return store.OpenURL(ctx, s.cfg.StoreURL, opts)
	}
	return store.Open(ctx, s.cfg.DataDir, opts)
}

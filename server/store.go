package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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

// ErrDataDir is wrapped by CheckDataDir's error: the data directory can
// neither be used nor created.
var ErrDataDir = errors.New("data directory unusable")

// CheckDataDir reports whether the SQLite store can live in dir: dir is a
// directory toolbus may write in, or its nearest existing ancestor is one,
// so that Start can create it. It leaves nothing behind (it writes and
// removes a probe), so that `serve --check-config` finds a mistyped or
// unwritable path before a start does, without making the directory.
func CheckDataDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	p := abs
	for {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%w: %s is not a directory: choose another path for the store", ErrDataDir, p)
			}
			break
		}
		// A missing path, or one under a file (ENOTDIR), is judged by the
		// nearest ancestor that exists.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("%w: %w", ErrDataDir, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("%w: %w", ErrDataDir, err)
		}
		p = parent
	}
	// What Start does first there: make a directory (or the database file).
	probe, err := os.MkdirTemp(p, ".toolbus-check-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the probe's name means nothing to the reader
		}
		return fmt.Errorf("%w: cannot write in %s: %w", ErrDataDir, p, err)
	}
	return os.Remove(probe)
}

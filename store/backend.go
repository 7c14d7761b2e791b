package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// backend is what differs between the databases the store runs on. The DML
// in queries.go is shared; the DDL in migrate.go is SQLite's and a backend
// may rewrite it.
type backend struct {
	// ddl rewrites one migration statement for this database.
	ddl func(stmt string) string
	// lockMigrations serialises schema migrations between processes that
	// open the same database at once; unlock releases it. SQLite's
	// immediate transactions already do, so it is nil there.
	lockMigrations func(ctx context.Context, db *sql.DB) (unlock func(), err error)
}

var sqliteBackend = &backend{ddl: func(s string) string { return s }}

// ErrStoreURL is wrapped by OpenURL's error for a URL it cannot use.
var ErrStoreURL = errors.New("store: unsupported URL")

// OpenURL opens (creating the schema if needed) the store a URL names:
// postgres://user:password@host:port/dbname?sslmode=... (or postgresql://;
// the parameters are pgx's, see docs/scale-out.md). The database must exist;
// the store creates its tables in the connection's search path. Several
// toolbus processes (gateway replicas, the CLI) may share it.
func OpenURL(ctx context.Context, storeURL string, opts StoreOptions) (*Store, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		// The URL may hold a password: do not echo it.
		return nil, fmt.Errorf("%w: cannot parse it", ErrStoreURL)
	}
	switch strings.ToLower(u.Scheme) {
	case "postgres", "postgresql":
		return openPostgres(ctx, storeURL, opts)
	}
	return nil, fmt.Errorf("%w: scheme %q (want postgres://)", ErrStoreURL, u.Scheme)
}

// RedactURL returns storeURL with its password masked, for logs and errors.
func RedactURL(storeURL string) string {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

package testenv

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testenv/pgtest"
)

// Postgres is a throwaway PostgreSQL server (see pgtest, a leaf package so
// that acl's own tests can use it without an import cycle).
type Postgres = pgtest.Postgres

// StartPostgres makes a new cluster in a temporary directory (initdb, as
// the user nobody when run as root) and starts it on a free 127.0.0.1
// port; t.Cleanup stops it with pg_ctl. When PostgreSQL is missing it is
// installed with apt-get as root, else the test is skipped.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return pgtest.Start(t)
}
